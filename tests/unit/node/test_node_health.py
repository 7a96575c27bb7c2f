"""Health before work (trainium_cdk/node/health_check.py): the check itself against stand-in good and bad nodes
(a host tree of /dev, /sys and /proc, a neuron-ls stand-in), then the gates: on EKS, the startup taint on every
Trainium node and the checker DaemonSet that takes it off on pass (run as the synthesized manifest carries it,
against a stand-in Kubernetes API) or has the node replaced; on Batch, the node setup that never starts the ECS
agent on a failed host. (Slurm's prolog: tests/unit/node/test_health.py.)"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import paths
from tests.support.apps import synthesized
from tests.support.chart_helpers import validate_all
from tests.support.fake_kube import _certificates
from tests.support.reachability import Reachability
from tests.support.scheduling import lands_on, pod_templates, why_not
from trainium_cdk import node
from trainium_cdk.charts.node_health import NAME, NodeHealthCheck, NodeHealthProps
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.names import HEALTH_TAINT_KEY, HEALTH_TAINT_VALUE, NEURON_TAINT_KEY, STARTUP_TAINT_PREFIX

PROGRAM = node.FOLDER / "health_check.py"
DRIVER = versions.XLA_TRACK.driver
NODE = "ip-10-0-1-23.us-west-2.compute.internal"


def host_tree(root: Path, *, devices: int, cores_per_device: int, efa: int, driver: str | None = DRIVER,
              lustre: bool = True) -> Path:
    """A node's /dev, /sys and /proc as the Neuron driver, the efa module and a Lustre mount lay them out."""
    for i in range(devices):
        (root / "dev").mkdir(parents=True, exist_ok=True)
        (root / "dev" / f"neuron{i}").write_text("")
        sysfs = root / "sys/devices/virtual/neuron_device" / f"neuron{i}"
        sysfs.mkdir(parents=True)
        (sysfs / "core_count").write_text(f"{cores_per_device}\n")
    (root / "sys/class/infiniband").mkdir(parents=True)
    for i in range(efa):
        (root / "sys/class/infiniband" / f"rdmap{i}s0").mkdir()
    if driver is not None:
        (root / "sys/module/neuron").mkdir(parents=True)
        (root / "sys/module/neuron/version").write_text(driver + "\n")
    (root / "proc/1").mkdir(parents=True)
    mounts = ["/dev/nvme0n1p1 / xfs rw 0 0"]
    if lustre:
        mounts.append("10.0.1.5@tcp:/abcdefgh /fsx lustre rw,flock 0 0")
    (root / "proc/1/mounts").write_text("\n".join(mounts) + "\n")
    return root


def neuron_ls(bin_dir: Path, devices: int, cores_per_device: int) -> None:
    """neuron-ls stand-in: ``--json-output`` lists the devices, each with its NeuronCore count."""
    bin_dir.mkdir(exist_ok=True)
    listing = json.dumps([{"neuron_device": i, "nc_count": cores_per_device} for i in range(devices)])
    tool = bin_dir / "neuron-ls"
    tool.write_text(f"#!/bin/sh\ncase \"$*\" in *--json-output*) echo '{listing}' ;; *) exit 2 ;; esac\n")
    tool.chmod(0o755)


def args_of(instance_type: str, **extra: str) -> list[str]:
    spec = DEFAULT_CATALOG.get(instance_type)
    args = ["--devices", str(spec.neuron_devices), "--cores", ",".join(map(str, spec.neuron_core_counts)),
            "--efa", str(spec.efa_interfaces)]
    for name, value in extra.items():
        args += [f"--{name}", value]
    return args


def check(root: Path, args: list[str], bin_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin" if bin_dir else "/usr/bin:/bin", "TRN_HEALTH_ROOT": str(root)}
    return subprocess.run([sys.executable, str(PROGRAM), *args], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


# -- the check -----------------------------------------------------------------------------------------------------

def test_a_good_trn1_node_passes_with_neuron_ls_or_without(tmp_path):
    root = host_tree(tmp_path / "host", devices=16, cores_per_device=2, efa=8)
    neuron_ls(tmp_path / "bin", 16, 2)
    args = args_of("trn1.32xlarge", driver=DRIVER, fsx="/fsx")
    with_tools = check(root, args, tmp_path / "bin")
    assert with_tools.returncode == 0, with_tools.stderr
    assert with_tools.stdout == "trainium-cdk health: PASS (16 Neuron devices, 8 EFA interfaces)\n"
    # No Neuron tools (the EKS checker's image): /dev and the driver's sysfs.
    without = check(root, args)
    assert without.returncode == 0, without.stderr


def test_a_trn2_node_passes_with_logical_or_physical_cores(tmp_path):
    root = host_tree(tmp_path / "host", devices=16, cores_per_device=8, efa=16)  # sysfs: physical cores
    assert check(root, args_of("trn2.48xlarge")).returncode == 0
    neuron_ls(tmp_path / "bin", 16, 4)  # neuron-ls at LNC=2: logical cores
    assert check(root, args_of("trn2.48xlarge"), tmp_path / "bin").returncode == 0


def test_a_bad_node_fails_with_one_line_per_failed_check(tmp_path):
    """A device short, a bad EFA interface, another driver, no /fsx: each its own line, exit 1."""
    root = host_tree(tmp_path / "host", devices=15, cores_per_device=2, efa=7, driver="2.19.64.0", lustre=False)
    result = check(root, args_of("trn1.32xlarge", driver=DRIVER, fsx="/fsx"))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "trainium-cdk health: FAIL devices: found 15 Neuron devices, expected 16",
        "trainium-cdk health: FAIL cores: found 30 NeuronCores, expected 32",
        "trainium-cdk health: FAIL efa: found 7 EFA interfaces, expected 8",
        f"trainium-cdk health: FAIL driver: Neuron driver 2.19.64.0 loaded, expected {DRIVER}",
        "trainium-cdk health: FAIL fsx: /fsx is not mounted",
    ]
    assert result.stdout == ""


def test_neuron_ls_that_fails_counts_no_device(tmp_path):
    root = host_tree(tmp_path / "host", devices=16, cores_per_device=2, efa=8)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/neuron-ls").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin/neuron-ls").chmod(0o755)
    result = check(root, args_of("trn1.32xlarge"), tmp_path / "bin")
    assert result.returncode == 1 and "found 0 Neuron devices, expected 16" in result.stderr


def nccom_test(bin_dir: Path, report: Path, log: Path, *, exit_code: int = 0) -> None:
    """nccom-test stand-in: records its arguments, prints a real report (tests/data), exits as told."""
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "nccom-test"
    tool.write_text(f"#!/bin/sh\necho \"$*\" >> '{log}'\ncat '{report}'\nexit {exit_code}\n")
    tool.chmod(0o755)


DATA = paths.DATA


@pytest.mark.parametrize("instance_type, cores_per_device, ranks", [("trn1.32xlarge", 2, 32), ("trn2.48xlarge", 4, 64)])
def test_a_good_node_passes_its_on_node_collective_over_all_neuroncores(tmp_path, instance_type, cores_per_device,
                                                                         ranks):
    """--collective: nccom-test's bf16 all-reduce over every NeuronCore of the node (trn2: its 64 logical cores,
    nccom-test's ranks at the default LNC=2), one short size; what it measured on stdout."""
    spec = DEFAULT_CATALOG.get(instance_type)
    root = host_tree(tmp_path / "host", devices=16, cores_per_device=cores_per_device, efa=spec.efa_interfaces)
    neuron_ls(tmp_path / "bin", 16, cores_per_device)
    calls = tmp_path / "nccom.log"
    nccom_test(tmp_path / "bin", DATA / "nccom_test_allr_one_node.txt", calls)
    result = check(root, [*args_of(instance_type), "--collective"], tmp_path / "bin")
    assert result.returncode == 0, result.stderr
    assert calls.read_text() == f"-r {ranks} -N 1 -b 32MB -e 32MB -n 5 -w 2 -d bf16 allr\n"
    measured, verdict = result.stdout.splitlines()
    # How long it took (the number the timeout is set from, once a real node has run it).
    assert re.fullmatch(rf"trainium-cdk health: collective: bf16 all-reduce over {ranks} NeuronCores, bus bandwidth "
                        r"40\.69 GB/s in \d+\.\d s", measured), measured
    assert verdict == f"trainium-cdk health: PASS (16 Neuron devices, {spec.efa_interfaces} EFA interfaces)"


def test_a_collective_that_hangs_fails_the_node_at_its_timeout(tmp_path):
    """A hung collective (nccom-test that never returns: a stuck NeuronLink, a runtime that never loads) is what the
    check is there to find: it fails at --collective-timeout, not at the gate's own limit, and says so."""
    root = host_tree(tmp_path / "host", devices=16, cores_per_device=2, efa=8)
    neuron_ls(tmp_path / "bin", 16, 2)
    # A worker per rank, as nccom-test starts them, holding the output pipes as long as it runs.
    (tmp_path / "bin/nccom-test").write_text("#!/bin/sh\nsleep 30 &\nwait\n")
    (tmp_path / "bin/nccom-test").chmod(0o755)
    started = time.monotonic()
    result = check(root, [*args_of("trn1.32xlarge"), "--collective", "--collective-timeout", "1"], tmp_path / "bin")
    assert time.monotonic() - started < 15  # the workers went with it
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "trainium-cdk health: FAIL collective: nccom-test all-reduce over 32 NeuronCores did not finish within 1 s"]


def test_a_node_whose_on_node_collective_fails_fails_the_check(tmp_path):
    root = host_tree(tmp_path / "host", devices=16, cores_per_device=2, efa=8)
    neuron_ls(tmp_path / "bin", 16, 2)
    nccom_test(tmp_path / "bin", DATA / "nccom_test_failure.txt", tmp_path / "nccom.log", exit_code=1)
    result = check(root, [*args_of("trn1.32xlarge"), "--collective"], tmp_path / "bin")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "trainium-cdk health: FAIL collective: nccom-test all-reduce over 32 NeuronCores failed (exit 1): "
        "1 errors found - test failed"]


def test_the_on_node_collective_is_not_run_without_nccom_test_or_on_a_node_already_failing(tmp_path):
    root = host_tree(tmp_path / "host", devices=16, cores_per_device=2, efa=8)
    neuron_ls(tmp_path / "bin", 16, 2)
    result = check(root, [*args_of("trn1.32xlarge"), "--collective"], tmp_path / "bin")
    assert result.returncode == 0 and "collective: not run (no nccom-test on this host)" in result.stdout
    calls = tmp_path / "nccom.log"
    nccom_test(tmp_path / "bin", DATA / "nccom_test_allr_one_node.txt", calls)
    short = host_tree(tmp_path / "short", devices=15, cores_per_device=2, efa=8)
    neuron_ls(tmp_path / "bin", 15, 2)
    assert check(short, [*args_of("trn1.32xlarge"), "--collective"], tmp_path / "bin").returncode == 1
    assert not calls.exists()  # a node short of a device is not asked to all-reduce over it


# -- EKS: the startup taint ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["trn1.32xlarge", "trn1n.32xlarge+trn1.2xlarge"], ids=["karpenter", "managed"])
def eks_app(request):
    result = synthesized(request.param)
    return result, Reachability.from_dir(result.outdir)


def _health_objects(model: Reachability) -> list[dict[str, Any]]:
    return [o for _, objs in model.manifests() for o in objs
            if o["metadata"].get("name", "").startswith(NAME)]


def checked_type(daemon_set: dict[str, Any]) -> str:
    """The instance type a checker DaemonSet's required node affinity selects (with GROUP_LABEL: our groups' nodes)."""
    (term,) = daemon_set["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    ours, of_type = term["matchExpressions"]
    assert ours == {"key": "trainium-cdk/compute-group", "operator": "Exists"}, ours
    assert of_type["key"] == "node.kubernetes.io/instance-type" and of_type["operator"] == "In", of_type
    (instance_type,) = of_type["values"]
    return instance_type


def _checker(model: Reachability, instance_type: str) -> dict[str, Any]:
    (ds,) = [o for o in _health_objects(model) if o["kind"] == "DaemonSet" and checked_type(o) == instance_type]
    return ds


def test_every_trainium_node_joins_with_the_health_taint_and_only_the_checker_lands_before_it_is_off(eks_app):
    """Each compute group's nodes (NodePool startupTaints, or the managed node group's taints) carry the health
    taint as a startup taint; before the check no training pod lands there, only the checker of the group's instance
    type; after it, the training pods land and the checker stays."""
    result, model = eks_app
    groups = [n for n in model.of_backend("eks") if n.labels.get("trainium-cdk/compute-group")]
    assert groups and all(n.startup_taints == ({"Key": HEALTH_TAINT_KEY, "Value": HEALTH_TAINT_VALUE,
                                                 "Effect": n.startup_taints[0]["Effect"]},) for n in groups)
    from trainium_cdk.app.workloads import render_job

    config = result.config
    checkers = [p for p in pod_templates(_health_objects(model)) if p.kind == "DaemonSet"]
    assert len(checkers) == len({g.instance_type for g in config.compute_groups})
    for group in config.compute_groups:
        (nodes,) = [n for n in groups if n.labels["trainium-cdk/compute-group"] == group.name]
        job = render_job(config, name="t", group=group.name, job="mlp", nodes=1, image="example.com/train:1")
        (pod,) = pod_templates(job)
        assert any("startup-taint" in reason for reason in why_not(pod, nodes, checked=False))
        assert lands_on(pod, [nodes], checked=True) == [nodes]
        (checker,) = [c for c in checkers if c.name == f"{NAME}-{group.instance_type.replace('.', '-')}"]
        assert lands_on(checker, [nodes], checked=False) == [nodes]
        assert [n for n in groups if lands_on(checker, [n])] == [n for n in groups
                                                                 if n.instance_type == group.instance_type]


def test_the_managed_node_group_taint_is_one_cluster_autoscaler_and_eks_take(eks_app):
    """Cluster Autoscaler reads a node group's taints to simulate its nodes; with its startup prefix the health taint
    is left out of that simulation (so pending pods still scale from zero) and out of the node template tags; EKS
    takes taint keys of at most 63 characters (EKS API reference, Taint)."""
    result, _ = eks_app
    assert HEALTH_TAINT_KEY.startswith(STARTUP_TAINT_PREFIX) and len(HEALTH_TAINT_KEY) <= 63
    for stack in result.assembly.stacks:
        for resource in stack.template.get("Resources", {}).values():
            if resource["Type"] != "AWS::EKS::Nodegroup" or "Taints" not in resource["Properties"]:
                continue
            props = resource["Properties"]
            if any(t["Key"] == NEURON_TAINT_KEY for t in props["Taints"]):
                assert {"Key": HEALTH_TAINT_KEY, "Value": HEALTH_TAINT_VALUE, "Effect": "NO_SCHEDULE"} in props["Taints"]
                assert not any("trainium-health" in key for key in props.get("Tags", {}))


def test_the_checker_objects_validate_and_hold_least_privilege(eks_app):
    _, model = eks_app
    objects = _health_objects(model)
    assert validate_all(objects) == len(objects)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds.count("DaemonSet") >= 1 and "ValidatingAdmissionPolicy" in kinds
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    for ds in (o for o in objects if o["kind"] == "DaemonSet"):
        (container,) = ds["spec"]["template"]["spec"]["containers"]
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["runAsNonRoot"] is True and "privileged" not in container["securityContext"]
        assert all(m["readOnly"] for m in container["volumeMounts"])


# -- EKS: the checker against a stand-in API server -----------------------------------------------------------------

class StandInApi:
    """The Kubernetes API of one node, over HTTPS on loopback: GET, PATCH and DELETE of /api/v1/nodes/<name> (and
    its status), and the checker's probe pods: create, get, log and delete in its namespace, a created pod run to its
    end at once as its node's kubelet would run it (:meth:`run_pod`: its command on this machine, its program from the
    ConfigMap, the node's Neuron tools from ``bin_dir``). Each request is kept in :attr:`requests` (method, path,
    content type, body) for tests to assert."""

    def __init__(self, tmp_path: Path, node_object: dict[str, Any], *, bin_dir: Path | None = None,
                 kubelet: str = "run") -> None:
        self.node = node_object
        self.bin_dir = bin_dir
        self.kubelet = kubelet  # run: run a created pod; hang: leave it Running
        self.program_dir = tmp_path / "program"
        self.pods: dict[str, dict[str, Any]] = {}
        self.logs: dict[str, str] = {}
        self.requests: list[tuple[str, str, str, Any]] = []
        ca, cert, key = _certificates(("localhost",))
        self.account = tmp_path / "serviceaccount"
        self.account.mkdir()
        (self.account / "ca.crt").write_bytes(ca)
        (self.account / "token").write_text("stand-in-token")
        (self.account / "namespace").write_text("kube-system")
        (tmp_path / "cert.pem").write_bytes(cert)
        (tmp_path / "key.pem").write_bytes(key)
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                assert self.headers["Authorization"] == "Bearer stand-in-token"
                api.requests.append((self.command, self.path, self.headers.get("Content-Type", ""), body))
                code, answer = api.answer(self.command, self.path, body)
                self.send_response(code)
                self.send_header("Content-Type", "text/plain" if isinstance(answer, str) else "application/json")
                data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_DELETE = do_POST = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        pods = "/api/v1/namespaces/kube-system/pods"
        if not path.startswith(pods):
            return 200, self.node
        name = path.removeprefix(pods).strip("/").split("/")[0]
        if method == "POST":
            if body["metadata"]["name"] in self.pods:
                return 409, {"kind": "Status", "reason": "AlreadyExists", "code": 409}
            pod = {**body, "status": {"phase": "Pending"}}
            self.pods[body["metadata"]["name"]] = pod
            if self.kubelet == "run":
                self.run_pod(pod)
            else:
                pod["status"] = {"phase": "Running", "containerStatuses": [
                    {"name": "probe", "state": {"running": {}}}]}
            return 201, {**body, "status": {"phase": "Pending"}}
        if method == "DELETE":
            return 200, self.pods.pop(name)
        if path.startswith(f"{pods}/{name}/log"):
            return 200, self.logs.get(name, "")
        return 200, self.pods[name]

    def run_pod(self, pod: dict[str, Any]) -> None:
        """The pod's one container as the kubelet would run it on the stand-in node: its command (python3 its program
        in the ConfigMap's mount), the node's Neuron tools on PATH; its log, its phase from the exit code."""
        (container,) = pod["spec"]["containers"]
        (mount,) = container["volumeMounts"]
        python, *args = [a.replace(mount["mountPath"], str(self.program_dir)) for a in container["command"]]
        assert python == "python3"
        path = f"{self.bin_dir}:/usr/bin:/bin" if self.bin_dir else "/usr/bin:/bin"
        run = subprocess.run([sys.executable, *args], env={"PATH": path}, capture_output=True, text=True, timeout=60,
                             check=False)
        self.logs[pod["metadata"]["name"]] = run.stdout + run.stderr
        pod["status"] = {"phase": "Succeeded" if run.returncode == 0 else "Failed", "containerStatuses": [
            {"name": container["name"], "state": {"terminated": {"exitCode": run.returncode}}}]}

    def env(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "localhost", "KUBERNETES_SERVICE_PORT": str(self.server.server_address[1]),
                "TRN_HEALTH_SERVICE_ACCOUNT_DIR": str(self.account), "TRN_HEALTH_EXIT": "1", "TRN_HEALTH_POLL": "0.05"}


INSTANCE = "i-0a1b2c3d4e5f60718"


def _node_object(karpenter: bool, neuron_devices: int = 16) -> dict[str, Any]:
    """The node as the API serves it: tainted, and with ``neuron_devices`` advertised (by the Neuron device plugin)."""
    labels = {"trainium-cdk/compute-group": "train", **({"karpenter.sh/nodepool": "train"} if karpenter else {})}
    return {"metadata": {"name": NODE, "resourceVersion": "41", "labels": labels}, "spec": {
        "providerID": f"aws:///us-west-2d/{INSTANCE}",
        "taints": [
            {"key": NEURON_TAINT_KEY, "value": "true", "effect": "NoSchedule"},
            {"key": HEALTH_TAINT_KEY, "value": HEALTH_TAINT_VALUE, "effect": "NoSchedule"},
        ]}, "status": {"allocatable": {"cpu": "127", NEURON_TAINT_KEY: str(neuron_devices)}}}


def run_checker(tmp_path: Path, model: Reachability, instance_type: str, root: Path, api: StandInApi):
    """The instance type's DaemonSet container as the synthesized manifest carries it: its program (the ConfigMap's text),
    command and environment, with the host tree at TRN_HEALTH_ROOT (the pod's /host) and the stand-in API."""
    objects = _health_objects(model)
    (files,) = [o["data"] for o in objects if o["kind"] == "ConfigMap"]
    assert files["health_check.py"] == PROGRAM.read_text()
    (container,) = _checker(model, instance_type)["spec"]["template"]["spec"]["containers"]
    (mount,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "program"]
    # The ConfigMap's files where the pods mount them (the checker's, and the probe pod's: the same ConfigMap).
    api.program_dir.mkdir(exist_ok=True)
    for name, text in files.items():
        (api.program_dir / name).write_text(text)
    python, *args = [a.replace(mount, str(api.program_dir)) for a in container["command"]]
    script, *args = args
    assert python == "python3" and script == str(api.program_dir / "health_check.py")
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["TRN_HEALTH_ROOT"] == "/host" and env["TAINT_KEY"] == HEALTH_TAINT_KEY
    env = {**env, "TRN_HEALTH_ROOT": str(root), "NODE_NAME": NODE, "PATH": "/usr/bin:/bin", **api.env()}
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def test_on_a_good_node_the_checker_runs_the_on_node_collective_then_takes_the_health_taint_off(tmp_path, eks_app):
    """Its own checks pass; then the probe pod on its node (its type's, from the ConfigMap, named for the node) runs
    the all-reduce over the node's NeuronCores, the checker reads its verdict and deletes it, and takes the taint off.
    Every call, in full."""
    _, model = eks_app
    group = _first_type(model)
    devices, cores, efa = _expected(model, group)
    calls = tmp_path / "nccom.log"
    nccom_test(tmp_path / "bin", DATA / "nccom_test_allr_one_node.txt", calls)
    api = StandInApi(tmp_path, _node_object(karpenter=True, neuron_devices=devices), bin_dir=tmp_path / "bin")
    root = host_tree(tmp_path / "host", devices=devices, cores_per_device=cores // devices, efa=efa, lustre=False)
    result = run_checker(tmp_path, model, group, root, api)
    assert result.returncode == 0, result.stderr
    path = f"/api/v1/nodes/{NODE}"
    assert api.requests == [
        ("GET", path, "application/json", None),  # still tainted: not checked before
        *probe_calls(model, group),
        ("GET", path, "application/json", None),
        ("PATCH", path, "application/json-patch+json", [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
            {"op": "replace", "path": "/spec/taints", "value": [
                {"key": NEURON_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]},
        ]),
    ]
    assert calls.read_text() == f"-r {cores} -N 1 -b 32MB -e 32MB -n 5 -w 2 -d bf16 allr\n"
    measured, passed, untainted = result.stdout.splitlines()
    assert re.fullmatch(rf"trainium-cdk health: collective: bf16 all-reduce over {cores} NeuronCores, bus bandwidth "
                        r"40\.69 GB/s in \d+\.\d s", measured), measured
    assert passed == f"trainium-cdk health: PASS ({devices} Neuron devices, {efa} EFA interfaces)"
    assert untainted == f"trainium-cdk health: node {NODE}: {HEALTH_TAINT_KEY} removed"


PODS = "/api/v1/namespaces/kube-system/pods"


def probe_pod(model: Reachability, instance_type: str) -> dict[str, Any]:
    """The type's probe pod as the checker creates it: the ConfigMap's, with its name and its node."""
    (files,) = [o["data"] for o in _health_objects(model) if o["kind"] == "ConfigMap"]
    pod = json.loads(files[f"probe-{instance_type.replace('.', '-')}.json"])
    pod["metadata"]["name"] = f"{NAME}-probe-{NODE}"
    pod["spec"]["nodeName"] = NODE
    return pod


def probe_calls(model: Reachability, group: str, *, polls: int = 1) -> list[tuple[str, str, str, Any]]:
    """The checker's calls for a probe that runs: the node's advertised devices, the pod created, read to its end
    (``polls`` times), its log, its deletion."""
    pod = f"{PODS}/{NAME}-probe-{NODE}"
    return [
        ("GET", f"/api/v1/nodes/{NODE}", "application/json", None),
        ("POST", PODS, "application/json", probe_pod(model, group)),
        *[("GET", pod, "application/json", None)] * polls,
        ("GET", f"{pod}/log?container=probe", "application/json", None),
        ("DELETE", pod, "application/json", None),
    ]


def _expected(model: Reachability, group: str) -> tuple[int, int, int]:
    """(devices, NeuronCores, EFA interfaces) the type's checker expects, from its command line."""
    args = run_args(model, group)
    value = dict(zip(args[0::2], args[1::2], strict=False))
    return int(value["--devices"]), int(value["--cores"].split(",")[0]), int(value["--efa"])


def _first_type(model: Reachability) -> str:
    """The instance type of the first checker DaemonSet."""
    return sorted(checked_type(o) for o in _health_objects(model) if o["kind"] == "DaemonSet")[0]


def _condition_patch(api: StandInApi) -> dict[str, Any]:
    """The one status PATCH the checker sent, its body with the (clock's) times checked and taken out."""
    (body,) = [b for m, p, t, b in api.requests if m == "PATCH" and p.endswith("/status")
               and t == "application/strategic-merge-patch+json"]
    (condition,) = body["status"]["conditions"]
    heartbeat, transition = condition.pop("lastHeartbeatTime"), condition.pop("lastTransitionTime")
    assert heartbeat == transition and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", transition), transition
    return body


@pytest.mark.parametrize("karpenter", [True, False], ids=["karpenter-node", "node-group-node"])
def test_on_a_bad_node_the_taint_stays_the_node_is_marked_and_replaced(tmp_path, eks_app, karpenter):
    """What the checker writes to the API, in full: the condition (a type of our own: node repair acts only on
    conditions that the kubelet and the node monitoring agent own and rewrite); then a Karpenter node is deleted, and
    a managed node group's node is left for its Auto Scaling group, with the command that has it replaced."""
    _, model = eks_app
    api = StandInApi(tmp_path, _node_object(karpenter=karpenter))
    group = _first_type(model)
    spec_devices, _, _ = _expected(model, group)
    root = host_tree(tmp_path / "host", devices=spec_devices - 1, cores_per_device=2, efa=0, lustre=False)
    result = run_checker(tmp_path, model, group, root, api)
    assert result.returncode == 1
    failed = result.stderr.splitlines()
    assert f"trainium-cdk health: FAIL devices: found {spec_devices - 1} Neuron devices, expected {spec_devices}" in failed
    path = f"/api/v1/nodes/{NODE}"
    assert [(m, p, t) for m, p, t, _ in api.requests] == [
        ("GET", path, "application/json"), ("PATCH", f"{path}/status", "application/strategic-merge-patch+json"),
        ("GET", path, "application/json"), *([("DELETE", path, "application/json")] if karpenter else [])]
    assert [b for m, _, _, b in api.requests if m != "PATCH"] == [None] * (len(api.requests) - 1)
    assert _condition_patch(api) == {"status": {"conditions": [{
        "type": "TrainiumHealthy", "status": "False", "reason": "HealthCheckFailed",
        "message": "; ".join(line.removeprefix("trainium-cdk health: FAIL ") for line in failed),
    }]}}
    verdict = result.stdout.splitlines()[-1]
    if karpenter:
        assert verdict == f"trainium-cdk health: node {NODE} deleted: Karpenter replaces it"
    else:
        assert verdict == (f"trainium-cdk health: node {NODE} left tainted: have its node group replace it: "
                           f"aws autoscaling set-instance-health --instance-id {INSTANCE} --health-status Unhealthy "
                           "--no-should-respect-grace-period")


@pytest.mark.parametrize("loaded, passes", [(DRIVER, True), ("2.29.0.0", True), ("2.19.64.0", False), (None, False)],
                         ids=["the-tracks", "newer", "older", "none"])
def test_the_eks_checker_wants_the_tracks_driver_or_newer(tmp_path, eks_app, loaded, passes):
    """The EKS AMI release brings the driver (the AMI of release v20260714 carried 2.29.0.0: awslabs/amazon-eks-ami
    CHANGELOG): the track's or newer passes; an older one, or none, fails but replaces nothing, because every
    replacement would come up with the same AMI."""
    _, model = eks_app
    group = _first_type(model)
    assert run_args(model, group)[-5:] == ["--min-driver", DRIVER, "--kube", "--probe",
                                           f"/opt/trainium-cdk/probe-{group.replace('.', '-')}.json"]
    devices, cores, efa = _expected(model, group)
    nccom_test(tmp_path / "bin", DATA / "nccom_test_allr_one_node.txt", tmp_path / "nccom.log")
    api = StandInApi(tmp_path, _node_object(karpenter=True, neuron_devices=devices), bin_dir=tmp_path / "bin")
    root = host_tree(tmp_path / "host", devices=devices, cores_per_device=cores // devices, efa=efa, driver=loaded,
                     lustre=False)
    result = run_checker(tmp_path, model, group, root, api)
    if passes:
        assert result.returncode == 0, result.stderr
        # The probe, then the taint off.
        assert [m for m, *_ in api.requests] == ["GET", "GET", "POST", "GET", "GET", "DELETE", "GET", "PATCH"]
        return
    assert result.returncode == 1
    line = f"driver: Neuron driver {loaded or 'none'} loaded, expected {DRIVER} or newer"
    assert result.stderr.splitlines() == [f"trainium-cdk health: FAIL {line}"]
    assert [m for m, *_ in api.requests] == ["GET", "PATCH"]  # marked; not deleted, the taint stays
    assert _condition_patch(api)["status"]["conditions"][0]["message"] == line
    assert result.stdout.splitlines()[-1].startswith(f"trainium-cdk health: node {NODE} left tainted: its AMI release")


def run_args(model: Reachability, instance_type: str) -> list[str]:
    return _checker(model, instance_type)["spec"]["template"]["spec"]["containers"][0]["command"][2:]


def test_a_node_checked_before_is_left_alone(tmp_path, eks_app):
    """A checker pod replaced on a node that passed (a DaemonSet update) does not check a node that may be running
    a job: no health taint, nothing to do."""
    _, model = eks_app
    node_object = _node_object(karpenter=True)
    node_object["spec"]["taints"] = node_object["spec"]["taints"][:1]
    api = StandInApi(tmp_path, node_object)
    result = run_checker(tmp_path, model, _first_type(model), tmp_path / "empty-host", api)
    assert result.returncode == 0, result.stderr
    assert [m for m, *_ in api.requests] == ["GET"]


def test_the_chart_alone_needs_one_props_per_instance_type():
    from cdk8s import App

    from trainium_cdk.errors import ConfigError

    with pytest.raises(ConfigError):
        NodeHealthCheck(App(), "x", groups=[])
    for bad in ("Trn1.32xlarge", "trn1_32xlarge", "trn1"):
        with pytest.raises(ConfigError, match="NodeHealthProps.instance_type"):
            NodeHealthProps(instance_type=bad, devices=16, cores=(32,), efa_interfaces=8)
    twice = [NodeHealthProps(instance_type="trn1.32xlarge", devices=16, cores=(32,), efa_interfaces=8)] * 2
    with pytest.raises(ConfigError, match="one NodeHealthProps per instance type"):
        NodeHealthCheck(App(), "y", groups=twice)


# -- Batch: before the ECS agent starts ------------------------------------------------------------------------------

def _batch_host(tmp_path: Path, *, devices: int, collective: Path | None = DATA / "nccom_test_allr_one_node.txt",
                collective_exit: int = 0):
    """A trn1.2xlarge Batch host running its node setup as the host runs it (the header of its values, then the
    program: batch_node.sh, then the health check), with the AMI's commands stood in (tests/unit/node/test_batch_node.py), a
    host tree, neuron-ls and, unless ``collective`` is None, nccom-test (its report and exit): (result, host)."""
    from tests.unit.node.test_batch_node import Host
    from trainium_cdk.constructs.batch_node import node_setup

    setup = node_setup(DEFAULT_CATALOG.get("trn1.2xlarge"), None)
    host = Host(tmp_path)
    root = host_tree(tmp_path / "host", devices=devices, cores_per_device=2, efa=0, lustre=False)
    neuron_ls(tmp_path / "bin", devices, 2)
    if collective is not None:
        nccom_test(tmp_path / "bin", collective, tmp_path / "nccom.log", exit_code=collective_exit)
    host.env["TRN_HEALTH_ROOT"] = str(root)
    return host.run_text(node.header(setup.values) + setup.program), host


@pytest.mark.parametrize("healthy", [True, False], ids=["good-host", "bad-host"])
def test_a_batch_host_starts_the_ecs_agent_only_when_the_health_check_passes(tmp_path, healthy):
    """A good trn1.2xlarge host (its device, and an on-node all-reduce over its 2 NeuronCores) lets the agent start;
    one whose Neuron device is missing keeps it stopped and masked and shuts down, without a collective."""
    from tests.unit.node.test_batch_node import HELD, MASKED, STARTED

    result, host = _batch_host(tmp_path, devices=1 if healthy else 0)
    calls = tmp_path / "nccom.log"
    if healthy:
        assert result.returncode == 0, result.stderr
        assert host.calls("systemctl") == [HELD, STARTED] and host.calls("shutdown") == []
        assert calls.read_text() == "-r 2 -N 1 -b 32MB -e 32MB -n 5 -w 2 -d bf16 allr\n"
        assert re.search(r"^trainium-cdk health: collective: bf16 all-reduce over 2 NeuronCores, bus bandwidth "
                         r"40\.69 GB/s in \d+\.\d s$", result.stdout, re.M), result.stdout
    else:
        assert result.returncode != 0
        assert "trainium-cdk health: FAIL devices: found 0 Neuron devices, expected 1" in result.stderr
        assert host.calls("systemctl") == [HELD, "stop --no-block ecs.service", MASKED]
        assert len(host.calls("shutdown")) == 1
        assert not calls.exists()


def test_a_batch_host_whose_on_node_collective_fails_never_starts_the_ecs_agent(tmp_path):
    """Devices, NeuronCores and driver pass, but nccom-test's all-reduce over the NeuronCores fails (the guide's
    failure report, exit 1): the host is kept out exactly as for any other failed check."""
    from tests.unit.node.test_batch_node import HELD, MASKED

    result, host = _batch_host(tmp_path, devices=1, collective=DATA / "nccom_test_failure.txt", collective_exit=1)
    assert result.returncode != 0
    assert ("trainium-cdk health: FAIL collective: nccom-test all-reduce over 2 NeuronCores failed (exit 1): "
            "1 errors found - test failed") in result.stderr
    assert host.calls("systemctl") == [HELD, "stop --no-block ecs.service", MASKED]
    assert len(host.calls("shutdown")) == 1


def test_a_batch_host_with_storage_checks_the_mount_and_the_tracks_driver():
    from trainium_cdk.constructs.batch_node import health_check_command, node_setup

    values = node_setup(DEFAULT_CATALOG.get("trn2.48xlarge"), None).values
    assert (values["HEALTH_DEVICES"], values["HEALTH_CORES"], values["HEALTH_EFA"]) == ("16", "64,128", "16")
    assert values["NEURON_DRIVER"] == DRIVER
    assert health_check_command("/fsx").endswith(
        '--driver "${NEURON_DRIVER:?}" --fsx /fsx --collective --collective-timeout 300')
    assert "--fsx" not in health_check_command(None) and "--collective --collective-timeout 300" in health_check_command(None)
