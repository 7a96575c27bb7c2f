"""Prometheus-format metrics (observability.prometheus) on every host that runs Trainium work, beyond the Batch and
ParallelCluster stacks' compute nodes (tests/app/test_prometheus_metrics.py): the development instance, the cluster of the
pcluster CLI path (dist/parallelcluster/), and neuron_setup.sh's ComputeFleet branch, each run as it is against
stand-ins of what cannot run here (systemd, apt, S3, the release downloads)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.app.parallelcluster.test_parallelcluster_image import make_host
from tests.app.test_prometheus_metrics import _release
from tests.support import node_files
from tests.support.helpers import config_with, imported, resources, synth, template_text
from tests.support.pcluster_schema import validate_many, venv_or_skip
from trainium_cdk.app.adapters.parallelcluster import cluster_name
from trainium_cdk.app.dist import write_dist
from trainium_cdk.app.parallelcluster.cluster_config import SCRIPTS_BUCKET, SCRIPTS_PREFIX, cluster_file_name
from trainium_cdk.constructs.dev_instance import PROMETHEUS_CLIENT_COMMAND
from trainium_cdk.facts import names, versions
from trainium_cdk.node import prometheus_node as node_program
from trainium_cdk.node.prometheus_node import OPT, UNITS
from trainium_cdk.parallelcluster.parts import PROMETHEUS_NODE_NAME, PROMETHEUS_POLICY_NAME, SETUP_SCRIPT
from trainium_cdk.runtime import prometheus_setup

PROGRAM = Path(node_program.__file__)
ENDPOINT = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0123456789abcdef/"
REMOTE_WRITE = ENDPOINT + "api/v1/remote_write"
WORKSPACE_ARN = "arn:aws:aps:us-west-2:123456789012:workspace/ws-0123456789abcdef"
PINNED = [(versions.NODE_EXPORTER_URL, versions.NODE_EXPORTER_SHA256), (versions.PROMETHEUS_URL, versions.PROMETHEUS_SHA256)]
ENABLED = "systemctl enable --now " + " ".join(f"{u}.service" for u in UNITS)


def _stand_in_bin(directory: Path, *, apt: bool = True) -> Path:
    """systemctl, apt-get and a python3 that records what it is asked, except prometheus_node.py's install, which it
    runs for real with the host's root under the test's folder ($ROOT): the binaries, the agent's configuration, the
    units land there."""
    directory.mkdir(parents=True, exist_ok=True)
    tools = {
        "systemctl": 'echo "systemctl $*" >> "$CALLS"',
        "apt-get": 'echo "apt-get $*" >> "$CALLS"',
        "python3": (f'echo "python3 $*" >> "$CALLS"\n'
                    f'case "$1 $2" in *{PROMETHEUS_NODE_NAME}" install") exec {sys.executable} "$@" --root "$ROOT" ;; esac'),
    }
    if not apt:
        del tools["apt-get"]
    for name, body in tools.items():
        (directory / name).write_text(f"#!/bin/bash\n{body}\n")
        (directory / name).chmod(0o755)
    return directory


def _local_releases(tmp_path: Path) -> list[tuple[str, str]]:
    """Stand-ins of the pinned node_exporter and Prometheus release tarballs (file:// URL, SHA-256)."""
    releases = tmp_path / "releases"
    releases.mkdir()
    return [_release(releases, "node_exporter-1.12.1.linux-amd64", "node_exporter"),
            _release(releases, "prometheus-3.13.1.linux-amd64", "prometheus")]


def _assert_installed(root: Path, calls: list[str], *, remote_write: str, deployment: str) -> None:
    opt = root / OPT.lstrip("/")
    assert os.access(opt / "node_exporter", os.X_OK) and os.access(opt / "prometheus", os.X_OK)
    agent = yaml.safe_load((opt / "agent.yml").read_text())
    assert agent["remote_write"] == [{"url": remote_write, "sigv4": {"region": "us-west-2"}}]
    assert agent["global"]["external_labels"]["deployment"] == deployment
    systemd = root / "etc/systemd/system"
    assert sorted(p.stem for p in systemd.glob("*.service")) == sorted(UNITS)
    assert calls[-2:] == ["systemctl daemon-reload", ENABLED]
    _verify_units(systemd)


def _verify_units(units: Path) -> None:
    """systemd's own check of the units written (as tests/app/test_prometheus_metrics.py's)."""
    if not shutil.which("systemd-analyze"):
        return
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", *(f"{u}.service" for u in UNITS)], cwd=units,
                            env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:", "SYSTEMD_LOG_LEVEL": "warning"},
                            capture_output=True, text=True, check=False)
    problems = [line for line in (verify.stdout + verify.stderr).splitlines()
                if "trainium-" in line and "is not executable" not in line and "No such file" not in line]
    assert not problems, verify.stdout + verify.stderr


# -- the development instance -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def instance_app():
    return synth(config_with(backends=["instance"], observability={"prometheus": True}), nag=False)


def _instance(template: dict[str, Any]) -> dict[str, Any]:
    (instance,) = resources(template, "AWS::EC2::Instance").values()
    return instance["Properties"]


def _actions(statement: dict[str, Any]) -> list[str]:
    return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]


def _setup(app) -> tuple[dict[str, str], str]:
    """The instance's user data header values (the workspace's endpoint and the other deploy-time values as
    "<token>") and the setup it fetches: an asset of the cloud assembly, by its digest (tests/support/node_files.py)."""
    return node_files.fetched_setup(template_text(_instance(app.template_json("instance"))["UserData"]["Fn::Base64"]),
                                    app.outdir)


def test_the_dev_instance_installs_the_exporters_into_the_deployments_workspace(instance_app):
    values, script = _setup(instance_app)
    # The deploy-time value: the network stack's workspace endpoint (an import of its PrometheusEndpoint).
    user_data = _instance(instance_app.template_json("instance"))["UserData"]
    (workspace,) = resources(instance_app.template_json("network"), "AWS::APS::Workspace")
    value = node_files.header_value(user_data, prometheus_setup.REMOTE_WRITE_VARIABLE)
    assert [imported(instance_app, p) for p in value] == [
        "'", {"Fn::GetAtt": [workspace, "PrometheusEndpoint"]}, "api/v1/remote_write'"]
    assert values[prometheus_setup.REMOTE_WRITE_VARIABLE] == "<token>api/v1/remote_write"
    stack = instance_app.stacks.backends["instance"].stack_name
    lines = [PROMETHEUS_CLIENT_COMMAND["ubuntu"], *prometheus_setup.setup_lines(deployment=stack)]
    assert script.endswith("\n".join(lines) + "\n")
    for url, sha in PINNED:
        assert f"--fetch {url} {sha}" in script
    assert "LUSTRE_MOUNT_POINT" in values  # with the Lustre client: the file system is mounted here


def test_the_dev_instance_role_may_remote_write_into_that_workspace_alone(instance_app):
    template = instance_app.template_json("instance")
    role = next(iter(resources(template, "AWS::IAM::Role")))
    statements = [(policy, s) for policy in resources(template, "AWS::IAM::Policy").values()
                  for s in policy["Properties"]["PolicyDocument"]["Statement"]
                  if any(a.startswith("aps:") for a in _actions(s))]
    ((policy, statement),) = statements
    assert policy["Properties"]["Roles"] == [{"Ref": role}]
    assert statement["Action"] == "aps:RemoteWrite" and statement["Effect"] == "Allow"
    (workspace,) = resources(instance_app.template_json("network"), "AWS::APS::Workspace")
    assert imported(instance_app, statement["Resource"]) == {"Fn::GetAtt": [workspace, "Arn"]}
    # The setup's one object in the asset bucket, and nothing else of that bucket.
    values, _ = _setup(instance_app)
    (read,) = [s for p in resources(template, "AWS::IAM::Policy").values()
               for s in p["Properties"]["PolicyDocument"]["Statement"] if any(a.startswith("s3:") for a in _actions(s))]
    (key,) = [f.name.removeprefix("asset.") for f in instance_app.outdir.glob("asset.*.sh")
              if hashlib.sha256(f.read_bytes()).hexdigest() == values["NODE_SETUP_SHA256"]]
    assert read["Action"] == "s3:GetObject" and read["Resource"]["Fn::Join"][1][-1] == f"/{key}"


def test_the_dev_instance_boot_installs_and_starts_the_exporters_and_the_agent(instance_app, tmp_path):
    """The fetched setup as the instance runs it, from the Prometheus lines on (before them: the Lustre client and
    the example, which tests/app/test_instance.py covers, with the bootstrap that fetches and checks it), under the
    errexit the Lustre lines set and with the header's remote-write URL. / is tmp_path/root; the releases are served
    from stand-ins."""
    _, script = _setup(instance_app)
    script = script[script.index(PROMETHEUS_CLIENT_COMMAND["ubuntu"]):]
    root = tmp_path / "root"
    for (url, sha), (local, local_sha) in zip(PINNED, _local_releases(tmp_path), strict=True):
        script = script.replace(f"{url} {sha}", f"{local} {local_sha}")
    script = script.replace("/opt/trainium-cdk", f"{root}/opt/trainium-cdk")
    bindir = _stand_in_bin(tmp_path / "bin")
    calls = tmp_path / "calls"
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=120,
                            check=False, env={"PATH": f"{bindir}:/usr/bin:/bin", "CALLS": str(calls), "ROOT": str(root),
                                              "HOME": str(tmp_path),
                                              prometheus_setup.REMOTE_WRITE_VARIABLE: REMOTE_WRITE})
    assert result.returncode == 0 and "not installed" not in result.stderr, result.stderr
    recorded = calls.read_text().splitlines()
    # The DLAMI is Ubuntu: prometheus_client from its package (pip refuses the system Python, PEP 668).
    assert recorded[0] == "apt-get -o DPkg::Lock::Timeout=300 install -y python3-prometheus-client"
    assert (root / node_program.NODE_PATH.lstrip("/")).read_text() == PROGRAM.read_text()
    assert any(c.startswith(f"python3 {root}{node_program.NODE_PATH} install") for c in recorded)
    _assert_installed(root, recorded, remote_write=REMOTE_WRITE,
                      deployment=instance_app.stacks.backends["instance"].stack_name)


def test_without_prometheus_the_dev_instance_has_no_agent_and_no_remote_write():
    app = synth(config_with(backends=["instance"]), nag=False)
    template = app.template_json("instance")
    assert "prometheus" not in template_text(_instance(template)["UserData"]["Fn::Base64"]).lower()
    assert "prometheus" not in _setup(app)[1].lower()
    actions = [a for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy") for p in resources(template, kind).values()
               for s in p["Properties"]["PolicyDocument"]["Statement"] for a in _actions(s)]
    assert actions and not [a for a in actions if a.startswith("aps:")]


# -- the pcluster CLI path: dist/parallelcluster/ ---------------------------------------------------------------

PCLUSTER = config_with(backends=["parallelcluster"], observability={"prometheus": True})
FILLED = {
    "HEAD_NODE_SUBNET_ID": "subnet-0123456789abcdef0",
    "EFA_SECURITY_GROUP_ID": "sg-0123456789abcdef0",
    "FSX_FILE_SYSTEM_ID": "fs-0123456789abcdef0",
    SCRIPTS_BUCKET: "my-bucket",
    "NEURON_METRICS_POLICY_ARN": "arn:aws:iam::123456789012:policy/t-neuron-metrics",
    "SESSION_MANAGER_POLICY_ARN": "arn:aws:iam::123456789012:policy/t-session-manager",
    "PROMETHEUS_POLICY_ARN": "arn:aws:iam::123456789012:policy/t-prometheus-remote-write",
    "PROMETHEUS_REMOTE_WRITE_URL": REMOTE_WRITE,
    "COMPUTE_SUBNET_ID_TRAIN": "subnet-0123456789abcd000",
}


@pytest.fixture(scope="module")
def pcluster_dist(tmp_path_factory) -> Path:
    """dist/parallelcluster/ as `make synth` writes it (app.py: trainium_cdk.app.dist.write_dist)."""
    out = tmp_path_factory.mktemp("dist")
    write_dist(PCLUSTER, out)
    return out / "parallelcluster"


def _envsubst(text: str, values: dict[str, str]) -> str:
    """What the header's envsubst line does with the values a user reads from the stack outputs."""
    (listed,) = re.findall(r"^#   envsubst '([^']*)' <", text, re.M)
    for name in listed.split():
        text = text.replace("${" + name.removeprefix("$") + "}", values[name.removeprefix("$")])
    return text


def _filled_configuration(dist: Path) -> dict[str, Any]:
    text = (dist / cluster_file_name(PCLUSTER)).read_text()
    filled = _envsubst(text, FILLED)
    assert "${" not in "\n".join(line for line in filled.splitlines() if not line.startswith("#"))
    return yaml.safe_load(filled)


def _compute_args(configuration: dict[str, Any]) -> list[str]:
    (queue,) = configuration["Scheduling"]["SlurmQueues"]
    return queue["CustomActions"]["OnNodeConfigured"]["Args"]


def test_the_cli_cluster_installs_the_agent_into_the_workspace_of_the_network_stack(pcluster_dist):
    text = (pcluster_dist / cluster_file_name(PCLUSTER)).read_text()
    network = PCLUSTER.stack_name("network")
    # The header names where each new value comes from: the network stack's outputs.
    assert f"PROMETHEUS_REMOTE_WRITE_URL: output {names.OUTPUT_PROMETHEUS_REMOTE_WRITE_URL} of {network}" in text
    assert f"PROMETHEUS_POLICY_ARN: a managed policy of yours with the document {PROMETHEUS_POLICY_NAME}" in text
    configuration = _filled_configuration(pcluster_dist)
    args = _compute_args(configuration)
    pairs = list(zip(args[::2], args[1::2], strict=True))
    flags = dict(pairs)
    program = (pcluster_dist / PROMETHEUS_NODE_NAME).read_text()
    assert program == PROGRAM.read_text()
    digest = hashlib.sha256(program.encode()).hexdigest()
    assert flags["--prometheus-program"] == f"{digest}@s3://my-bucket/{SCRIPTS_PREFIX}/{PROMETHEUS_NODE_NAME}"
    assert flags["--prometheus-remote-write"] == REMOTE_WRITE
    assert flags["--prometheus-deployment"] == cluster_name(PCLUSTER)
    assert [v for f, v in pairs if f == "--prometheus-release"] == [f"{sha}@{url}" for url, sha in PINNED]
    (queue,) = configuration["Scheduling"]["SlurmQueues"]
    assert {"Policy": FILLED["PROMETHEUS_POLICY_ARN"]} in queue["Iam"]["AdditionalIamPolicies"]
    assert {"Policy": FILLED["PROMETHEUS_POLICY_ARN"]} not in configuration["HeadNode"]["Iam"]["AdditionalIamPolicies"]
    # The compute nodes may read the program from the scripts bucket.
    assert {"BucketName": "my-bucket", "KeyName": f"{SCRIPTS_PREFIX}/*", "EnableWriteAccess": False} in queue["Iam"]["S3Access"]


def test_the_cli_remote_write_policy_names_the_workspace_alone(pcluster_dist):
    text = (pcluster_dist / PROMETHEUS_POLICY_NAME).read_text()
    document = json.loads(text.replace("${PROMETHEUS_WORKSPACE_ARN}", WORKSPACE_ARN))
    assert document["Statement"] == [{"Effect": "Allow", "Action": "aps:RemoteWrite", "Resource": WORKSPACE_ARN}]


def test_the_network_stack_outputs_what_the_cli_path_fills():
    app = synth(config_with(backends=["parallelcluster"], observability={"prometheus": True}), nag=False)
    outputs = app.template_json("network")["Outputs"]
    workspace = next(iter(resources(app.template_json("network"), "AWS::APS::Workspace")))
    assert outputs[names.OUTPUT_PROMETHEUS_WORKSPACE_ARN]["Value"] == {"Fn::GetAtt": [workspace, "Arn"]}
    assert outputs[names.OUTPUT_PROMETHEUS_REMOTE_WRITE_URL]["Value"] == {
        "Fn::Join": ["", [{"Fn::GetAtt": [workspace, "PrometheusEndpoint"]}, "api/v1/remote_write"]]}
    # The stack's cluster: every policy the nodes are given, the remote-write one included, sits where the
    # provider's role may attach it (tests/app/parallelcluster/test_parallelcluster_provider.py evaluates that).
    template = app.template_json("parallelcluster")
    policies = resources(template, "AWS::IAM::ManagedPolicy")
    (prometheus,) = [p for k, p in policies.items() if "Prometheus" in k]
    assert prometheus["Properties"]["Path"] == "/parallelcluster/"


def test_without_prometheus_the_cli_path_has_none_of_it(tmp_path):
    write_dist(config_with(backends=["parallelcluster"]), tmp_path)
    out = tmp_path / "parallelcluster"
    assert not (out / PROMETHEUS_NODE_NAME).exists() and not (out / PROMETHEUS_POLICY_NAME).exists()
    assert "prometheus" not in (out / cluster_file_name(PCLUSTER)).read_text().lower()


def test_the_cli_cluster_passes_parallelcluster_schema(pcluster_dist):
    venv_or_skip("ParallelCluster's schema")
    result = validate_many({"t-prometheus-cli": _filled_configuration(pcluster_dist)})["t-prometheus-cli"]
    assert result.errors == [] and result.warnings == []


# -- neuron_setup.sh's ComputeFleet branch, with the CLI path's arguments and bucket ----------------------------

def _compute_node(tmp_path: Path, dist: Path, *, image: bool):
    """A compute node (of an image with the pins, or of the official AMI) runs its OnNodeConfigured: neuron_setup.sh
    with the queue's arguments of the filled dist/ YAML; the bucket holds dist/parallelcluster/ as the user uploaded
    it; the pinned releases are served from stand-ins (their URLs and digests swapped in the arguments)."""
    host = make_host(tmp_path / "node")
    args = _compute_args(_filled_configuration(dist))
    for (url, sha), (local, local_sha) in zip(PINNED, _local_releases(tmp_path), strict=True):
        args = [f"{local_sha}@{local}" if a == f"{sha}@{url}" else a for a in args]
    bucket = tmp_path / "s3" / "my-bucket" / SCRIPTS_PREFIX
    shutil.copytree(dist, bucket)
    root = host.root
    _stand_in_bin(host.bindir, apt=False)  # the host's apt-get and dpkg-query stand in for the package database
    # s3 cp s3://BUCKET/KEY DEST: DEST holds $S3/BUCKET/KEY.
    (host.bindir / "aws").write_text('#!/bin/bash\necho "aws $*" >> "$CALLS"\nsrc="${*: -2:1}"\n'
                                     'cp "$S3/${src#s3://}" "${*: -1}"\n')
    (host.bindir / "aws").chmod(0o755)
    if image:  # a node of an image built by `pcluster build-image` (neuron_setup.sh --image, with the queue's pins)
        host.boot("Image")
        host.run(SETUP_SCRIPT.read_text(), ["--image", *args])
    host.boot()
    text = (SETUP_SCRIPT.read_text().replace("/etc/", f"{root}/etc/")
            .replace("/sys/module/", f"{root}/sys/module/").replace("/opt/trainium-cdk", f"{root}/opt/trainium-cdk")
            .replace("/usr/bin/python3", str(host.bindir / "python3")))
    calls = tmp_path / "calls"
    env = {"PATH": f"{host.bindir}:/usr/bin:/bin", "STATE": str(host.state), "ROOT": str(root), "HOME": str(root),
           "S3": str(tmp_path / "s3"), "CALLS": str(calls)}
    (host.state / "calls").write_text("")
    proc = subprocess.run(["bash", "-c", text, "neuron_setup.sh", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    recorded = calls.read_text().splitlines() if calls.exists() else []
    return proc, root, recorded, (host.state / "calls").read_text().splitlines()


def test_a_cli_compute_node_installs_and_starts_the_exporters_and_the_agent(tmp_path, pcluster_dist):
    proc, root, calls, host_calls = _compute_node(tmp_path, pcluster_dist, image=False)
    assert proc.returncode == 0 and "not installed" not in proc.stderr, proc.stderr
    assert (root / node_program.NODE_PATH.lstrip("/")).read_text() == PROGRAM.read_text()
    # prometheus_client from Ubuntu's package (the official AMI: after the apt lists the Neuron install refreshed).
    assert "apt-get install -y python3-prometheus-client" in host_calls
    assert host_calls.index("apt-get update -y") < host_calls.index("apt-get install -y python3-prometheus-client")
    _assert_installed(root, calls, remote_write=REMOTE_WRITE, deployment=cluster_name(PCLUSTER))


def test_a_compute_node_of_an_image_installs_the_exporters_with_no_apt(tmp_path, pcluster_dist):
    """The image carries python3-prometheus-client as it carries the Neuron packages and boto3: its nodes run no apt
    (on stale package lists, or none at all)."""
    proc, root, calls, host_calls = _compute_node(tmp_path, pcluster_dist, image=True)
    assert proc.returncode == 0 and "not installed" not in proc.stderr, proc.stderr
    assert not [c for c in host_calls if c.startswith(("apt-get", "curl", "gpg", "dkms"))], host_calls
    _assert_installed(root, calls, remote_write=REMOTE_WRITE, deployment=cluster_name(PCLUSTER))


def test_a_cli_compute_node_refuses_a_changed_program_and_runs_none_of_it(tmp_path, pcluster_dist):
    changed = tmp_path / "changed"
    shutil.copytree(pcluster_dist, changed)
    (changed / PROMETHEUS_NODE_NAME).write_text(PROGRAM.read_text() + "\n# changed after synth\n")
    proc, root, calls, _ = _compute_node(tmp_path, changed, image=False)
    assert proc.returncode != 0 and f"/{PROMETHEUS_NODE_NAME}: its sha256 is not" in proc.stderr
    assert not (root / node_program.NODE_PATH.lstrip("/")).exists()
    assert not [c for c in calls if c.startswith("python3") and PROMETHEUS_NODE_NAME in c]
