"""EKS jobs' metrics through the Prometheus Pushgateway (observability.prometheus): Pod Security keeps an EKS job from
the node's textfile folder, so its launcher pushes the same text to a Pushgateway in the training namespace, which
the managed collector scrapes.

The launcher's push runs for real against a local HTTP server playing the gateway; the gateway's objects come from
`make synth`'s dist/ and the EKS stack; the network model is tests/app/eks/test_network_policy.py's evaluator.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.app.eks.test_network_policy import COREDNS, SYSTEM_PODS, Pod, _pods, _policies, connects
from tests.support.chart_helpers import validate_all
from tests.support.helpers import config_with, resources, synth
from tests.support.reachability import Reachability
from tests.unit.jobs.test_compile_cache import launch, torchrun_stand_in
from trainium_cdk import dashboards
from trainium_cdk.app.dist import write_dist
from trainium_cdk.charts.job_metrics import NAME_LABEL
from trainium_cdk.facts import versions
from trainium_cdk.facts.names import (
    COMPILE_CACHE_HITS_METRIC,
    COMPILE_CACHE_MISSES_METRIC,
    METRICS_PUSH_URL_VARIABLE,
    PUSHGATEWAY_NAME,
    PUSHGATEWAY_PORT,
    PUSHGATEWAY_URL,
    TRAINING_NAMESPACE,
)


# What the launcher pushes for tests.unit.jobs.test_compile_cache.NEURON_LINES: graphs 111 and 333 from the cache, 222 compiled.
def _text(job: str, node: int) -> str:
    return (f"# TYPE {COMPILE_CACHE_HITS_METRIC} counter\n{COMPILE_CACHE_HITS_METRIC}{{job=\"{job}\",node=\"{node}\"}} 2\n"
            f"# TYPE {COMPILE_CACHE_MISSES_METRIC} counter\n"
            f"{COMPILE_CACHE_MISSES_METRIC}{{job=\"{job}\",node=\"{node}\"}} 1\n")


# -- the launcher's push -------------------------------------------------------------------------------------------

class _Gateway(http.server.BaseHTTPRequestHandler):
    """Records each request (method, path, body) and answers with the server's ``status``."""

    def _record(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self.server.requests.append((self.command, self.path, body))  # type: ignore[attr-defined]
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.end_headers()

    do_PUT = do_POST = _record

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    server.requests, server.status = [], 200  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: http.server.HTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _run(tmp_path: Path, env: dict[str, str], *, code: int = 0, path: str | None = None) -> tuple[int, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    torchrun_stand_in(bin_dir, code=code)
    if path is not None:
        env = {**env, "PATH": f"{bin_dir}:{path}"}
    proc = launch(bin_dir, {"TRN_JOB_NAME": "bert-1127", **env})
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_the_launcher_pushes_the_jobs_counters_to_the_gateway_once_per_node(tmp_path, gateway):
    code, err = _run(tmp_path, {METRICS_PUSH_URL_VARIABLE: _url(gateway)})
    assert code == 0, err
    assert gateway.requests == [("PUT", "/metrics/job/bert-1127/node/0", _text("bert-1127", 0))]
    assert "cannot push" not in err


def test_a_volcano_worker_pushes_under_its_own_rank(tmp_path, gateway):
    """An EKS worker pod: the training chart's rank offset and Volcano's variables; its group is its own, so the
    leader's push does not replace it (PUT replaces one group: the Pushgateway's README)."""
    volcano = {"TRN_NODE_RANK_OFFSET": "1", "VC_TASK_INDEX": "1", "VC_LEADER_NUM": "1", "VC_WORKER_NUM": "2",
               "VC_LEADER_HOSTS": "bert-1127-leader-0.bert-1127", METRICS_PUSH_URL_VARIABLE: _url(gateway)}
    code, err = _run(tmp_path, volcano)
    assert code == 0, err
    assert gateway.requests == [("PUT", "/metrics/job/bert-1127/node/2", _text("bert-1127", 2))]


def test_without_curl_python_pushes_the_same(tmp_path, gateway):
    """An image without curl: python3's urllib (every training image has Python)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("sh", "awk", "mktemp", "mkfifo", "cat", "rm", "sleep", "mkdir", "mv", "python3", "hostname"):
        found = next((Path(d) / tool for d in ("/usr/bin", "/bin") if (Path(d) / tool).exists()), None)
        assert found is not None, tool
        (tools / tool).symlink_to(found)
    assert not (tools / "curl").exists()
    code, err = _run(tmp_path, {METRICS_PUSH_URL_VARIABLE: _url(gateway)}, path=str(tools))
    assert code == 0, err
    assert gateway.requests == [("PUT", "/metrics/job/bert-1127/node/0", _text("bert-1127", 0))]


@pytest.mark.parametrize("code", [0, 3])
def test_an_unreachable_gateway_warns_and_leaves_the_exit_code_torchruns(tmp_path, code):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    url = _url(server)
    server.server_close()  # nothing listens there now
    exit_code, err = _run(tmp_path, {METRICS_PUSH_URL_VARIABLE: url}, code=code)
    assert exit_code == code
    assert f"trainium-launch: WARNING: cannot push the job's metrics to {url}/metrics/job/bert-1127/node/0" in err


def test_a_gateway_that_refuses_the_push_warns_and_leaves_the_exit_code(tmp_path, gateway):
    gateway.status = 400  # e.g. an inconsistent push (the Pushgateway answers 400)
    code, err = _run(tmp_path, {METRICS_PUSH_URL_VARIABLE: _url(gateway)}, code=3)
    assert code == 3
    assert len(gateway.requests) == 1 and "WARNING: cannot push" in err


def test_no_push_url_no_request(tmp_path, gateway):
    code, err = _run(tmp_path, {})
    assert code == 0 and not gateway.requests and "push" not in err


# -- what `make synth` writes and the EKS stack applies ---------------------------------------------------------

PROMETHEUS = {"prometheus": True}


@pytest.fixture(scope="module")
def dist_objects(tmp_path_factory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("dist")
    paths = write_dist(config_with(backends=["eks"], observability=PROMETHEUS, eks={"example_images": True}), out)
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def _gateway_objects(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects if o["metadata"].get("name") == PUSHGATEWAY_NAME}


def test_the_gateway_is_a_deployment_a_service_and_a_policy_that_validate(dist_objects):
    found = _gateway_objects(dist_objects)
    assert set(found) == {"Deployment", "Service", "NetworkPolicy"}
    assert validate_all(found.values()) == 3
    assert all(o["metadata"]["namespace"] == TRAINING_NAMESPACE for o in found.values())
    service = found["Service"]["spec"]
    assert service["ports"] == [{"name": "http", "port": PUSHGATEWAY_PORT, "targetPort": PUSHGATEWAY_PORT}]
    assert PUSHGATEWAY_URL == f"http://{found['Service']['metadata']['name']}.{TRAINING_NAMESPACE}.svc:{PUSHGATEWAY_PORT}"
    pod = found["Deployment"]["spec"]["template"]
    assert service["selector"] == pod["metadata"]["labels"] == {NAME_LABEL: PUSHGATEWAY_NAME}


def test_the_gateway_pod_meets_pod_security_restricted(dist_objects):
    """The checks of Pod Security Standards' restricted level (kubernetes.io/docs/concepts/security/
    pod-security-standards) that a pod spec can fail, and the pinned image."""
    spec = _gateway_objects(dist_objects)["Deployment"]["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert not any(key in spec for key in ("hostNetwork", "hostPID", "hostIPC"))
    assert all(set(v) <= {"name", "emptyDir"} for v in spec["volumes"])
    (container,) = spec["containers"]
    assert container["image"] == versions.PUSHGATEWAY_IMAGE and "@sha256:" in container["image"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True and security["runAsNonRoot"] is True
    assert "privileged" not in security and "ports" in container and not any("hostPort" in p for p in container["ports"])


def _training_envs(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The environment of every training container (it names its job) of the dist jobs."""
    templates = [t for o in objects for t in ([t["template"] for t in o.get("spec", {}).get("tasks", [])]
                                              or [o.get("spec", {}).get("template", {})])]
    envs = [{e["name"]: e.get("value") for e in c.get("env", [])}
            for t in templates for c in (t.get("spec") or {}).get("containers", [])]
    return [env for env in envs if "TRN_JOB_NAME" in env]


def test_eks_jobs_push_to_the_gateway_when_prometheus_is_on(dist_objects, tmp_path):
    envs = _training_envs(dist_objects)
    assert len(envs) >= 3, "the dist jobs: the examples (one of them distributed: leader and worker)"
    assert all(env[METRICS_PUSH_URL_VARIABLE] == PUSHGATEWAY_URL for env in envs)
    # Off: no gateway, no push URL.
    off = write_dist(config_with(backends=["eks"]), tmp_path / "off")
    objects = [doc for path in off for doc in yaml.safe_load_all(path.read_text()) if doc]
    envs = _training_envs(objects)
    assert envs and not any(METRICS_PUSH_URL_VARIABLE in env for env in envs)
    assert not _gateway_objects(objects)


# -- the collector: scrapes the gateway, keeps the pushed labels -------------------------------------------------

@pytest.fixture(scope="module")
def app():
    return synth(config_with(backends=["eks"], observability=PROMETHEUS, eks={"example_images": True},
                             workloads={"data_loader": {"s3_uri": "s3://my-bucket/datasets/"}}), nag=False)


def test_the_collector_scrapes_the_gateway_with_the_pushed_labels(app, dist_objects):
    (scraper,) = [r["Properties"] for r in resources(app.template_json("eks"), "AWS::APS::Scraper").values()]
    config = yaml.safe_load(scraper["ScrapeConfiguration"]["ConfigurationBlob"])
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == PUSHGATEWAY_NAME]
    # The pushed job and node labels win over the target's (Pushgateway README, "About the job and instance labels").
    assert job["honor_labels"] is True
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [TRAINING_NAMESPACE]}}]
    keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    pod = _gateway_objects(dist_objects)["Deployment"]["spec"]["template"]
    assert keep[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)] == pod["metadata"]["labels"][NAME_LABEL]
    assert int(keep[("__meta_kubernetes_pod_container_port_number",)]) in [
        p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]]
    # The jobs dashboard selects by deployment: the target gives it; no node label of the gateway's own node.
    targets = [r.get("target_label") for r in job["relabel_configs"]]
    assert "deployment" in targets and "node" not in targets
    exprs = [t["expr"] for p in dashboards.load("jobs")["panels"] for t in p.get("targets", [])]
    assert exprs and all("deployment=~" in e for e in exprs)


# -- who may reach the gateway (tests/app/eks/test_network_policy.py's evaluator) -----------------------------------------

VPC_CIDR = "10.0.0.0/16"  # config_with's network.cidr (the default)
COLLECTOR = "10.0.96.17"  # an ENI of the managed collector in a private subnet
OUTSIDE_VPC = ("192.168.10.5", "172.31.0.9", "52.218.0.1")  # a peered VPC, another VPC's range, the internet


@pytest.fixture(scope="module")
def objects(app, tmp_path_factory):
    applied = [o for _, objs in Reachability.from_dir(app.outdir).manifests() for o in objs]
    dist = tmp_path_factory.mktemp("dist-model")
    write_dist(app.config, dist)
    jobs = [o for path in sorted(dist.glob("eks/workloads/job-*.yaml")) for o in yaml.safe_load_all(path.read_text()) if o]
    return applied + jobs


def _resolve(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The applied policies, the gateway's collector block as the deployed stack resolves it: the VPC's CIDR (a
    token in the template)."""
    policies = yaml.safe_load(yaml.safe_dump(_policies(objects)))
    (gateway_policy,) = [p for p in policies if p["metadata"]["name"] == PUSHGATEWAY_NAME]
    blocks = [peer["ipBlock"] for rule in gateway_policy["spec"]["ingress"] for peer in rule["from"] if "ipBlock" in peer]
    assert len(blocks) == 1 and set(blocks[0]) == {"cidr"}, blocks
    blocks[0]["cidr"] = VPC_CIDR
    return policies


def test_training_pods_push_the_collector_scrapes_and_nothing_else_gets_in(objects):
    policies, pods = _resolve(objects), _pods(objects)
    (gateway,) = [p for p in pods if dict(p.labels).get(NAME_LABEL) == PUSHGATEWAY_NAME]
    assert gateway.namespace == TRAINING_NAMESPACE
    training = [p for p in pods if p.namespace == TRAINING_NAMESPACE and p != gateway]
    assert len(training) >= 6, training
    for pod in training:  # every job pod, the data loader, the shell, TensorBoard
        assert connects(policies, pod, gateway, PUSHGATEWAY_PORT), pod
    assert connects(policies, COLLECTOR, gateway, PUSHGATEWAY_PORT)
    for address in OUTSIDE_VPC:
        assert not connects(policies, address, gateway, PUSHGATEWAY_PORT), address
    # No other port of it is open to anyone outside the namespace, the collector's addresses included.
    for source in (COLLECTOR, COREDNS, *(system for system, _ in SYSTEM_PODS)):
        for port in (22, 8080, 9090, 9100):
            assert not connects(policies, source, gateway, port), (source, port)


def test_a_pod_in_another_namespace_is_let_in_only_on_the_collectors_port(objects):
    """The limit of a NetworkPolicy here: the managed collector is matched by address, and its interfaces sit in the
    subnets that pods take their addresses from (VPC CNI), so a pod of another namespace (kube-system's agents,
    Volcano, Karpenter: none of them the users') reaches port 9091 too. docs/guide/health.md says so."""
    policies, pods = _resolve(objects), _pods(objects)
    (gateway,) = [p for p in pods if dict(p.labels).get(NAME_LABEL) == PUSHGATEWAY_NAME]
    other = Pod.of("default", {"app": "someone-elses"}, "10.0.65.40")
    assert connects(policies, other, gateway, PUSHGATEWAY_PORT)
    assert not connects(policies, other, gateway, 8080)
    # Outside the VPC's addresses (a pod network on a secondary CIDR, VPC CNI custom networking) it is refused.
    assert not connects(policies, Pod.of("default", {"app": "someone-elses"}, "100.64.3.4"), gateway, PUSHGATEWAY_PORT)
