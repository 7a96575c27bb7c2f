"""neuron-monitor into CloudWatch on AWS Batch and ParallelCluster nodes, the deployment's alarm and dashboard.

The program the nodes run (trainium_cdk/node/neuron_metrics.py) is taken from the artefact itself (the Batch
launch template's user data; the ParallelCluster asset), installed with a stand-in ``systemctl``, and its
systemd unit's ExecStart runs here with a stand-in ``neuron-monitor`` (printing reports in the documented
format, tests/data/neuron_monitor_reports.jsonl) and a stand-in ``boto3`` that records put_metric_data.
"""

from __future__ import annotations

import ast
import base64
import gzip
import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from tests.support import paths
from tests.support.helpers import config_with, nag_violations, resources, synth
from trainium_cdk.app.dist.parallelcluster import SETUP_SCRIPT
from trainium_cdk.app.parallelcluster.cluster_config import cluster_name
from trainium_cdk.constructs.batch_node import node_setup, node_user_data
from trainium_cdk.constructs.observability import NeuronNodeMetrics
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.node import neuron_metrics
from trainium_cdk.node.neuron_metrics import (
    CORE_UTILIZATION,
    DEPLOYMENT_DIMENSION,
    DEVICE_MEMORY,
    HARDWARE_ERRORS,
    INSTANCE_DIMENSION,
    MONITOR_CONFIG,
    NAMESPACE,
    NODE_PATH,
)

REPORTS = paths.DATA / "neuron_monitor_reports.jsonl"
INSTANCE = "i-0123456789abcdef0"
# EC2 refuses user data above 16 KiB (before base64).
USER_DATA_LIMIT = 16 * 1024

_BOTO3 = """import json, os
class _Client:
    def __init__(self, region):
        self.region = region
    def put_metric_data(self, **kwargs):
        with open(os.environ["CALLS"], "a") as f:
            f.write(json.dumps({"region": self.region, **kwargs}) + "\\n")
def client(service, region_name=None):
    assert service == "cloudwatch", service
    return _Client(region_name)
"""


@pytest.fixture(scope="module")
def app():
    return synth(config_with(backends=["batch", "parallelcluster"]))


def _node(tmp_path: Path) -> dict[str, Path]:
    """Stand-ins: systemctl (records), neuron-monitor (records its arguments, prints the reports), boto3."""
    bin_dir, lib = tmp_path / "bin", tmp_path / "lib"
    bin_dir.mkdir()
    lib.mkdir()
    (lib / "boto3.py").write_text(_BOTO3)
    paths = {"bin": bin_dir, "lib": lib, "systemctl": tmp_path / "systemctl.log", "monitor": tmp_path / "monitor.log",
             "calls": tmp_path / "calls.jsonl", "systemd": tmp_path / "systemd"}
    for name, text in (
        ("systemctl", f"#!/bin/sh\necho \"$*\" >> '{paths['systemctl']}'\n"),
        ("neuron-monitor", f"#!/bin/sh\necho \"$*\" >> '{paths['monitor']}'\ncat '{REPORTS}'\n"),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return paths


def _install_and_run(tmp_path: Path, program: str, install_argv: list[str]) -> tuple[dict[str, Path], str]:
    """Install the program as a node would (``install_argv``: the artefact's command), then run the unit's
    ExecStart; return the stand-ins' records and the unit."""
    node = _node(tmp_path)
    path = tmp_path / "opt" / "neuron_metrics.py"
    path.parent.mkdir()
    path.write_text(program)
    assert install_argv[1] == NODE_PATH and install_argv[2] == "install"
    env = {"PATH": f"{node['bin']}:/usr/bin:/bin", "PYTHONPATH": str(node["lib"]), "CALLS": str(node["calls"])}
    subprocess.run([sys.executable, str(path), *install_argv[2:], "--systemd-dir", str(node["systemd"])],
                   env=env, check=True)
    assert node["systemctl"].read_text().splitlines() == [
        "daemon-reload", f"enable --now {neuron_metrics.SERVICE}.service"]
    unit = (node["systemd"] / f"{neuron_metrics.SERVICE}.service").read_text()
    (exec_start,) = [line.removeprefix("ExecStart=") for line in unit.splitlines() if line.startswith("ExecStart=")]
    subprocess.run(shlex.split(exec_start), env=env, check=True, timeout=60)
    return node, unit


def _assert_published(node: dict[str, Path], deployment: str) -> None:
    # neuron-monitor ran with the configuration the program wrote next to itself.
    (monitor_args,) = node["monitor"].read_text().splitlines()
    flag, config = monitor_args.split()
    assert flag == "-c" and json.loads(Path(config).read_text()) == MONITOR_CONFIG
    calls = [json.loads(line) for line in node["calls"].read_text().splitlines()]
    assert len(calls) == 2  # one put_metric_data per report
    per_node = [{"Name": DEPLOYMENT_DIMENSION, "Value": deployment}, {"Name": INSTANCE_DIMENSION, "Value": INSTANCE}]
    deployment_only = per_node[:1]
    expected = [(40.0, 2e9, 0.0), (20.0, 3e9, 3.0)]  # 16 of 32 cores busy; 2 uncorrected ECC + 1 hardware error
    for call, (utilization, memory, errors) in zip(calls, expected, strict=True):
        assert call["Namespace"] == NAMESPACE and call["region"] == "us-east-2"
        assert call["MetricData"] == [
            {"MetricName": CORE_UTILIZATION, "Dimensions": per_node, "Value": utilization, "Unit": "Percent"},
            {"MetricName": DEVICE_MEMORY, "Dimensions": per_node, "Value": memory, "Unit": "Bytes"},
            {"MetricName": HARDWARE_ERRORS, "Dimensions": per_node, "Value": errors, "Unit": "Count"},
            {"MetricName": HARDWARE_ERRORS, "Dimensions": deployment_only, "Value": errors, "Unit": "Count"},
        ]


# -- AWS Batch ---------------------------------------------------------------------------------------


def _written(script: str) -> str:
    """The program the node setup writes to NODE_PATH (gzip, base64, in the setup's one text)."""
    (line,) = [ln for ln in script.splitlines() if ln.endswith(f"| base64 -d | gunzip > {NODE_PATH}")]
    return gzip.decompress(base64.b64decode(line.split()[1])).decode()


def test_batch_user_data_starts_the_monitor_with_namespace_and_dimensions(tmp_path):
    script = node_setup(DEFAULT_CATALOG.get("trn1.32xlarge"), None, metrics_deployment="t-batch").program
    program = _written(script)
    assert program == Path(neuron_metrics.__file__).read_text()
    (install,) = [shlex.split(line) for line in script.splitlines() if f"{NODE_PATH} install" in line]
    assert install[3:] == ["--namespace", NAMESPACE, "--deployment", "t-batch"]
    node, unit = _install_and_run(tmp_path, program, install)
    assert "Restart=always" in unit and f"Environment=PATH={neuron_metrics.NEURON_BIN}:" in unit
    _assert_published(node, "t-batch")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_batch_user_data_without_metrics_starts_nothing():
    assert "neuron_metrics" not in node_setup(DEFAULT_CATALOG.get("trn1.32xlarge"), None).program


def test_batch_stack_nodes_publish_what_its_dashboard_and_alarm_read(app):
    stack_name = app.config.stack_name("batch")
    template = app.template_json("batch")
    (group,) = app.stacks.backends["batch"].groups.values()
    install = shlex.join(neuron_metrics.install_command(deployment=stack_name))
    assert install in group.node_setup.setup.program.splitlines()
    _assert_reads_namespace(template, deployment=stack_name)


def test_batch_user_data_fits_ec2_limit():
    """The setup ships as an S3 asset; the user data carries its values and the short program that fetches it."""
    setup = node_setup(DEFAULT_CATALOG.get("trn2.48xlarge"), None, metrics_deployment="x" * 64)
    text = node_user_data(setup, url="s3://" + "b" * 63 + "/" + "k" * 67, region="ap-southeast-4")
    assert len(text.encode()) < USER_DATA_LIMIT // 4  # room for the FSx mount values and Batch's own part


def test_batch_instance_role_may_put_metrics_in_the_namespace_only(app):
    template = app.template_with_nested("batch")  # each group's instance role is in its nested stack
    statements = [s for p in resources(template, "AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    cloudwatch = [s for s in statements
                  if any(a.startswith("cloudwatch:") for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))]
    assert cloudwatch == [{
        "Action": "cloudwatch:PutMetricData", "Effect": "Allow", "Resource": "*",
        "Condition": {"StringEquals": {"cloudwatch:namespace": NAMESPACE}},
    }]
    assert not [v for v in nag_violations(app) if "IAM5" in v]


# -- ParallelCluster -------------------------------------------------------------------------------


def _cluster_configuration(app) -> dict[str, Any]:
    (cluster,) = resources(app.template_json("parallelcluster"), "Custom::PclusterCluster").values()
    return cluster["Properties"]["ClusterConfiguration"]


def test_parallelcluster_compute_nodes_start_the_monitor(app, tmp_path):
    config = _cluster_configuration(app)
    deployment = cluster_name(app.config)
    for queue in config["Scheduling"]["SlurmQueues"]:
        args = queue["CustomActions"]["OnNodeConfigured"]["Args"]
        pairs = dict(zip(args[::2], args[1::2], strict=True))
        assert pairs["--metrics-namespace"] == NAMESPACE and pairs["--metrics-deployment"] == deployment
        # <sha256>@s3://<asset bucket>/<key>.py
        (checked, bucket, key) = pairs["--metrics-program"]["Fn::Join"][1]
        assert re.fullmatch(r"[0-9a-f]{64}@s3://", checked) and set(bucket) == {"Fn::Sub"}
        # The asset the compute nodes fetch is the program itself (another .py asset is the MLP example, which
        # the head node copies to ~/trainium).
        staged = (app.outdir / f"asset.{key.rsplit('/', 1)[1]}").read_text()
        assert staged == Path(neuron_metrics.__file__).read_text()
        # The nodes refuse any other content: the argument carries the sha256 of the asset's
        # (tests/unit/node/test_fetched_scripts.py).
        assert checked == f"{hashlib.sha256(staged.encode()).hexdigest()}@s3://"
    # The head node runs no Neuron workload: no monitor there.
    assert "--metrics-program" not in config["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]
    # neuron_setup.sh, on a compute node, copies it to NODE_PATH once checked and runs its install with the arguments.
    setup = SETUP_SCRIPT.read_text()
    assert f'fetch_checked "${{METRICS_PROGRAM}}" {NODE_PATH} 0644' in setup
    assert (f'/usr/bin/python3 {NODE_PATH} install \\\n      --namespace "${{METRICS_NAMESPACE}}" '
            '--deployment "${METRICS_DEPLOYMENT}"') in setup
    install = ["/usr/bin/python3", NODE_PATH, "install", "--namespace", NAMESPACE, "--deployment", deployment]
    node, _ = _install_and_run(tmp_path, staged, install)
    _assert_published(node, deployment)


def test_parallelcluster_compute_role_gets_the_scoped_managed_policy(app):
    template = app.template_json("parallelcluster")
    # The compute nodes' metrics policy (the other managed policy is the head node's Session Manager one).
    ((policy_id, policy),) = [(k, p) for k, p in resources(template, "AWS::IAM::ManagedPolicy").items() if "NeuronMetrics" in k]
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [{
        "Action": "cloudwatch:PutMetricData", "Effect": "Allow", "Resource": "*",
        "Condition": {"StringEquals": {"cloudwatch:namespace": NAMESPACE}},
    }]
    config = _cluster_configuration(app)
    for queue in config["Scheduling"]["SlurmQueues"]:
        assert {"Policy": {"Ref": policy_id}} in queue["Iam"]["AdditionalIamPolicies"]
    assert {"Policy": {"Ref": policy_id}} not in config["HeadNode"]["Iam"]["AdditionalIamPolicies"]
    assert not [v for v in nag_violations(app) if "IAM5" in v]


def test_parallelcluster_stack_dashboard_reads_what_the_nodes_publish(app):
    _assert_reads_namespace(app.template_json("parallelcluster"), deployment=cluster_name(app.config))


# -- the dashboard and the alarm -------------------------------------------------------------------


def _dashboard_body(dashboard: dict[str, Any]) -> str:
    body = dashboard["Properties"]["DashboardBody"]
    if isinstance(body, dict):  # Fn::Join with the region or the file system id
        body = "".join(p if isinstance(p, str) else "TOKEN" for p in body["Fn::Join"][1])
    return body


def _assert_reads_namespace(template: dict[str, Any], *, deployment: str) -> None:
    ((_, alarm),) = [(k, a) for k, a in resources(template, "AWS::CloudWatch::Alarm").items()
                     if a["Properties"].get("Namespace") == NAMESPACE]
    props = alarm["Properties"]
    assert props["MetricName"] == HARDWARE_ERRORS and props["Statistic"] == "Sum" and props["Threshold"] == 0
    assert props["Dimensions"] == [{"Name": DEPLOYMENT_DIMENSION, "Value": deployment}]
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == f"{deployment}-training"
    body = json.loads(_dashboard_body(dashboard))
    searches = [m[0]["expression"] for w in body["widgets"] for m in w["properties"].get("metrics", [])
                if "expression" in m[0]]
    assert searches == [
        f"SEARCH('{{{NAMESPACE},{DEPLOYMENT_DIMENSION},{INSTANCE_DIMENSION}}} MetricName=\"{metric}\" "
        f"{DEPLOYMENT_DIMENSION}=\"{deployment}\"', '{statistic}', 60)"
        for metric, statistic in ((CORE_UTILIZATION, "Average"), (DEVICE_MEMORY, "Average"), (HARDWARE_ERRORS, "Sum"))
    ]


def test_neuron_node_metrics_alone_in_a_bare_stack():
    stack = cdk.Stack()
    metrics = NeuronNodeMetrics(stack, "Metrics", deployment="lab", file_system_id="fs-0123456789abcdef0")
    template = Template.from_stack(stack).to_json()
    _assert_reads_namespace(template, deployment="lab")
    assert metrics.deployment == "lab"
    assert "AWS/FSx" in _dashboard_body(next(iter(resources(template, "AWS::CloudWatch::Dashboard").values())))


def test_the_program_reads_both_names_of_the_instance_block():
    first, second = (json.loads(line) for line in REPORTS.read_text().splitlines())
    assert "instance_data" in first and "instance_info" in second
    for report in (first, second):
        assert neuron_metrics.measurements(report)[0] == INSTANCE


def test_the_program_parses_as_python_3_9():
    """AL2023 (Batch) nodes run Python 3.9: the program's grammar must be 3.9's, and its annotations
    (``str | None``) are never evaluated."""
    source = Path(neuron_metrics.__file__).read_text()
    ast.parse(source, feature_version=(3, 9))
    assert "from __future__ import annotations" in source
