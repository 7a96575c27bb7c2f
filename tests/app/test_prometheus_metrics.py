"""Prometheus-format metrics (observability.prometheus): the dashboards query only what the collectors emit; EKS
synthesizes the workspace and the managed collector, whose scrape configuration finds the exporters' pods in dist/;
a host's exporters and agent are installed and started from pinned, checked releases."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import node_files
from tests.support.chart_helpers import validate_all
from tests.support.helpers import config_with, group_resources, imported, resources, synth
from trainium_cdk import dashboards
from trainium_cdk.app.dist import write_dist
from trainium_cdk.charts.metrics_exporters import NAME_LABEL
from trainium_cdk.facts import names, versions
from trainium_cdk.node import prometheus_node as node_program
from trainium_cdk.node.prometheus_node import (
    EFA_COUNTERS,
    EFA_PREFIX,
    NEURON_MONITOR_METRICS,
    NEURON_MONITOR_PORT,
    NODE_EXPORTER_PORT,
    UNITS,
)

PROGRAM = Path(node_program.__file__)
# What Prometheus itself records per target (Prometheus docs, "Jobs and instances": up, scrape_*).
PROMETHEUS_OWN = {"up"}
EMITTED = ({*NEURON_MONITOR_METRICS} | {EFA_PREFIX + c for c in EFA_COUNTERS}
           | {names.COMPILE_CACHE_HITS_METRIC, names.COMPILE_CACHE_MISSES_METRIC} | PROMETHEUS_OWN
           | {names.JOB_TOKENS_PER_SECOND_METRIC, names.JOB_MFU_METRIC})

# -- PromQL: the metric names of an expression ------------------------------------------------------------------

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
_IDENT = re.compile(r"(?<![\w:.])[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are neither functions (followed by "("),
    keywords, label names (in {...} or a by/without/on/ignoring list), strings nor durations ([...])."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    found = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end():].lstrip()
        if match.group() in _KEYWORDS or rest.startswith("(") or match.group().startswith("$"):
            continue
        if text[max(0, match.start() - 1)] == "$":  # a Grafana variable such as $__rate_interval
            continue
        found.add(match.group())
    return found


def test_metric_names_parses_selectors_functions_and_grouping():
    expr = ('sum by (node, job) (rate(trn_a_total{job=~"$job", x="y{z}"}[$__rate_interval])) / '
            'on (node) group_left max(b_bytes) > bool 0 and up offset 5m')
    assert metric_names(expr) == {"trn_a_total", "b_bytes", "up"}


def _queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            exprs.append(inner.group(1) if inner else query)
    return exprs


@pytest.mark.parametrize("name", dashboards.DASHBOARDS)
def test_every_query_of_the_dashboard_names_only_metrics_a_collector_emits(name):
    queries = _queries(dashboards.load(name))
    assert queries
    used = {metric for expr in queries for metric in metric_names(expr)}
    assert used and used <= EMITTED, f"{name}.json queries metrics no collector emits: {sorted(used - EMITTED)}"


def test_the_dashboards_show_what_the_issue_asks():
    used = {n: {m for e in _queries(dashboards.load(n)) for m in metric_names(e)} for n in dashboards.DASHBOARDS}
    assert {"neuroncore_utilization_ratio", "neuron_runtime_memory_used_bytes", "execution_errors_total",
            "hardware_ecc_events_total", "execution_latency_seconds"} <= used["neuron"]
    assert {f"{EFA_PREFIX}{c}" for c in ("tx_bytes", "rx_bytes", "rx_drops", "rdma_read_bytes", "rdma_write_bytes")} <= used["efa"]
    assert {names.COMPILE_CACHE_HITS_METRIC, names.COMPILE_CACHE_MISSES_METRIC} <= used["jobs"]
    assert {names.JOB_TOKENS_PER_SECOND_METRIC, names.JOB_MFU_METRIC} <= used["jobs"]


@pytest.mark.parametrize("name", dashboards.DASHBOARDS)
def test_each_dashboard_is_a_grafana_model_with_a_prometheus_data_source_variable(name):
    board = dashboards.load(name)
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["uid"] == f"trainium-cdk-{name}" and board["title"] and board["panels"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert all(t["datasource"]["uid"] == "${datasource}" and t["refId"] for t in panel["targets"])


def test_the_node_program_uses_the_node_metrics_directory_of_names():
    assert node_program.METRICS_DIR == names.NODE_METRICS_DIR


# -- the EFA counters ----------------------------------------------------------------------------------------------

def _sysfs(root: Path, counters: dict[str, dict[str, int]]) -> Path:
    for device, values in counters.items():
        directory = root / device / "ports" / "1" / "hw_counters"
        directory.mkdir(parents=True)
        for counter, value in values.items():
            (directory / counter).write_text(f"{value}\n")
    return root


def test_the_efa_reader_writes_each_devices_hardware_counters_as_a_textfile(tmp_path):
    sysfs = _sysfs(tmp_path / "infiniband", {
        "rdmap16s27": {"tx_bytes": 1000, "rx_bytes": 2000, "rx_drops": 3, "rdma_read_bytes": 4096, "lifespan": 12},
        "rdmap32s27": {"tx_bytes": 5, "rdma_write_bytes": 7},
    })
    out = tmp_path / "metrics"
    subprocess.run([sys.executable, str(PROGRAM), "efa", "--once", "--sys", str(sysfs), "--dir", str(out)], check=True)
    text = (out / node_program.EFA_FILE).read_text()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert samples == {
        'node_amazonefa_tx_bytes{device="rdmap16s27",port="1"}': "1000",
        'node_amazonefa_tx_bytes{device="rdmap32s27",port="1"}': "5",
        'node_amazonefa_rx_bytes{device="rdmap16s27",port="1"}': "2000",
        'node_amazonefa_rx_drops{device="rdmap16s27",port="1"}': "3",
        'node_amazonefa_rdma_read_bytes{device="rdmap16s27",port="1"}': "4096",
        'node_amazonefa_rdma_write_bytes{device="rdmap32s27",port="1"}': "7",
    }
    assert "# TYPE node_amazonefa_tx_bytes counter" in text
    # Written whole and renamed: nothing half-written is left for node_exporter to read.
    assert sorted(p.name for p in out.iterdir()) == [node_program.EFA_FILE]


def test_a_node_without_efa_gets_an_empty_file(tmp_path):
    out = tmp_path / "metrics"
    subprocess.run([sys.executable, str(PROGRAM), "efa", "--once", "--sys", str(tmp_path / "none"), "--dir", str(out)],
                   check=True)
    assert (out / node_program.EFA_FILE).read_text() == ""


# -- EKS: the workspace, the managed collector and what it scrapes ------------------------------------------------

@pytest.fixture(scope="module")
def eks_app():
    return synth(config_with(backends=["eks"], observability={"prometheus": True}), nag=False)


def _one(template: dict[str, Any], type_name: str) -> dict[str, Any]:
    found = resources(template, type_name)
    assert len(found) == 1, sorted(found)
    return next(iter(found.values()))["Properties"]


def test_eks_synthesizes_the_workspace_and_a_collector_writing_into_it(eks_app):
    network, eks = eks_app.template_json("network"), eks_app.template_json("eks")
    (workspace_id,) = resources(network, "AWS::APS::Workspace")
    (scraper_id,) = resources(eks, "AWS::APS::Scraper")
    scraper = _one(eks, "AWS::APS::Scraper")
    assert list(scraper["Destination"]) == ["AmpConfiguration"]
    assert {k: imported(eks_app, v) for k, v in scraper["Destination"]["AmpConfiguration"].items()} == {
        "WorkspaceArn": {"Fn::GetAtt": [workspace_id, "Arn"]}}
    source = scraper["Source"]["EksConfiguration"]
    (cluster_id,) = resources(eks, "AWS::EKS::Cluster")
    assert len(source["SubnetIds"]) >= 2
    assert source["SecurityGroupIds"] == [{"Fn::GetAtt": [cluster_id, "ClusterSecurityGroupId"]}]
    entry = _one(eks, "AWS::EKS::AccessEntry") if len(resources(eks, "AWS::EKS::AccessEntry")) == 1 else next(
        r["Properties"] for r in resources(eks, "AWS::EKS::AccessEntry").values() if r["Properties"].get("Username"))
    assert entry["Username"] == "aps-collector-user"
    # The collector's role, as an IAM role ARN (its RoleArn names an assumed-role path).
    assert entry["PrincipalArn"] == {"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":iam::", {"Ref": "AWS::AccountId"}, ":role/",
        {"Fn::Select": [3, {"Fn::Split": ["/", {"Fn::GetAtt": [scraper_id, "RoleArn"]}]}]}]]}
    assert any(o.get("Description", "").startswith("The Amazon Managed Service for Prometheus workspace")
               for o in network["Outputs"].values())


def test_no_workspace_or_collector_by_default():
    app = synth(config_with(backends=["eks"]), nag=False)
    for role in ("network", "eks"):
        template = app.template_json(role)
        assert not resources(template, "AWS::APS::Workspace") and not resources(template, "AWS::APS::Scraper")


@pytest.fixture(scope="module")
def dist_objects(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    paths = write_dist(config_with(backends=["eks"], observability={"prometheus": True}), out)
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_the_scrape_configuration_finds_every_exporter_and_the_pushgateway_in_dist(eks_app, dist_objects):
    config = yaml.safe_load(_one(eks_app.template_json("eks"), "AWS::APS::Scraper")["ScrapeConfiguration"]["ConfigurationBlob"])
    daemon_sets = [o for o in dist_objects if o["kind"] in ("DaemonSet", "Deployment")]
    matched = {}
    for job in config["scrape_configs"]:
        keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
        app = keep[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)]
        port = int(keep[("__meta_kubernetes_pod_container_port_number",)])
        namespaces = job["kubernetes_sd_configs"][0]["namespaces"]["names"]
        targets = [d for d in daemon_sets
                   if d["spec"]["template"]["metadata"]["labels"].get(NAME_LABEL) == app
                   and d["metadata"]["namespace"] in namespaces
                   and port in [p["containerPort"] for c in d["spec"]["template"]["spec"]["containers"]
                                for p in c.get("ports", [])]]
        assert len(targets) == 1, (job["job_name"], app, port)
        matched[job["job_name"]] = (targets[0]["metadata"]["name"], port)
    assert matched == {"neuron-monitor": ("neuron-monitor", NEURON_MONITOR_PORT),
                       "node-exporter": ("node-exporter", NODE_EXPORTER_PORT),
                       names.PUSHGATEWAY_NAME: (names.PUSHGATEWAY_NAME, names.PUSHGATEWAY_PORT)}
    # Not in the training namespace (Pod Security admission: they mount host paths).
    assert all(d["metadata"]["namespace"] == "kube-system" for d in daemon_sets
               if d["metadata"]["name"] in ("neuron-monitor", "node-exporter"))


def test_the_exporters_validate_against_the_cluster_schemas(dist_objects):
    exporters = [o for o in dist_objects if o["metadata"].get("name", "").startswith("node-exporter")]
    assert {o["kind"] for o in exporters} == {"DaemonSet", "ConfigMap"}
    assert validate_all(exporters) == 2
    daemon_set = next(o for o in exporters if o["kind"] == "DaemonSet")
    mounts = {m["mountPath"]: m.get("readOnly", False) for c in daemon_set["spec"]["template"]["spec"]["containers"]
              for m in c["volumeMounts"]}
    assert mounts[names.NODE_METRICS_DIR] is False  # the EFA writer's; node_exporter's own is read-only
    config_map = next(o for o in exporters if o["kind"] == "ConfigMap")
    assert config_map["data"]["prometheus_node.py"] == PROGRAM.read_text()


# -- a host: install the exporters and the agent --------------------------------------------------------------------

def _release(directory: Path, name: str, binary: str) -> tuple[str, str]:
    """A stand-in release tarball <name>.tar.gz holding <name>/<binary>: its file:// URL and SHA-256."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = f"#!/bin/sh\necho {binary}\n".encode()
        info = tarfile.TarInfo(f"{name}/{binary}")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    path = directory / f"{name}.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path.as_uri(), hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def host(tmp_path):
    """A host's root, the release tarballs, and stand-ins of systemctl and python (which records what it is asked)."""
    releases = tmp_path / "releases"
    releases.mkdir()
    downloads = [_release(releases, "node_exporter-1.12.1.linux-amd64", "node_exporter"),
                 _release(releases, "prometheus-3.13.1.linux-amd64", "prometheus")]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    for tool in ("systemctl", "python-standin"):
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        (bindir / tool).chmod(0o755)
    return tmp_path / "root", downloads, bindir, calls


def _install(root: Path, downloads, bindir: Path, *extra: str) -> subprocess.CompletedProcess:
    fetch = [part for url, sha in downloads for part in ("--fetch", url, sha)]
    return subprocess.run(
        [sys.executable, str(PROGRAM), "install", "--remote-write",
         "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write", "--region", "us-west-2",
         "--deployment", "trainium-batch", *fetch, "--prometheus-client", "0.21.1",
         "--python", str(bindir / "python-standin"), "--root", str(root), *extra],
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}, capture_output=True, text=True, check=False,
    )


def test_a_host_installs_and_starts_the_exporters_and_the_agent(host):
    root, downloads, bindir, calls = host
    result = _install(root, downloads, bindir)
    assert result.returncode == 0, result.stderr
    opt = root / node_program.OPT.lstrip("/")
    assert (opt / "node_exporter").read_text() == "#!/bin/sh\necho node_exporter\n"
    assert os.access(opt / "prometheus", os.X_OK) and not list(opt.glob("*.tar.gz"))
    agent = yaml.safe_load((opt / "agent.yml").read_text())
    assert {j["job_name"]: j["static_configs"][0]["targets"] for j in agent["scrape_configs"]} == {
        "neuron-monitor": [f"127.0.0.1:{NEURON_MONITOR_PORT}"], "node-exporter": [f"127.0.0.1:{NODE_EXPORTER_PORT}"]}
    assert agent["remote_write"] == [{"url": "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/"
                                              "remote_write", "sigv4": {"region": "us-west-2"}}]
    assert set(agent["global"]["external_labels"]) == {"deployment", "node"}
    assert agent["global"]["external_labels"]["deployment"] == "trainium-batch"
    systemd = root / "etc/systemd/system"
    assert sorted(p.stem for p in systemd.glob("*.service")) == sorted(UNITS)
    node_exporter = (systemd / "trainium-node-exporter.service").read_text()
    assert f"--collector.textfile.directory={names.NODE_METRICS_DIR}" in node_exporter
    # The users' Slurm and dev-instance jobs write their textfiles there (the launcher): sticky, world-writable.
    assert stat.S_IMODE((root / names.NODE_METRICS_DIR.lstrip("/")).stat().st_mode) == 0o1777
    assert "neuron-monitor-prometheus.py --port 8000" in (systemd / "trainium-neuron-prometheus.service").read_text()
    assert "--agent" in (systemd / "trainium-prometheus-agent.service").read_text()
    assert calls.read_text().splitlines() == [
        "python-standin -c import prometheus_client",
        "systemctl daemon-reload",
        "systemctl enable --now " + " ".join(f"{u}.service" for u in UNITS),
    ]


def test_a_release_whose_digest_differs_installs_nothing(host):
    root, downloads, bindir, calls = host
    (url, _), second = downloads
    result = _install(root, [(url, "0" * 64), second], bindir)
    assert result.returncode != 0 and "expected " + "0" * 64 in result.stderr
    assert not (root / node_program.OPT.lstrip("/") / "node_exporter").exists()
    assert not calls.exists()


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze")
def test_systemd_accepts_the_units(host, tmp_path):
    root, downloads, bindir, _ = host
    assert _install(root, downloads, bindir).returncode == 0
    units = root / "etc/systemd/system"
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", *(f"{u}.service" for u in UNITS)], cwd=units,
                            env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:", "SYSTEMD_LOG_LEVEL": "warning"},
                            capture_output=True, text=True, check=False)
    # The binaries live under /opt on a node, not on this machine: only that may be reported.
    problems = [line for line in (verify.stdout + verify.stderr).splitlines()
                if "trainium-" in line and "is not executable" not in line and "No such file" not in line]
    assert not problems, verify.stdout + verify.stderr


# -- the backends' host setups carry it -------------------------------------------------------------------------------

REMOTE_WRITE = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write"


def test_a_batch_node_setup_installs_and_starts_the_exporters_and_the_agent(host, tmp_path):
    """The setup a Batch node runs (its user data's program), the Prometheus lines as they are, with the releases
    served from stand-ins (their URLs and digests swapped for the pins') and the host's root under tmp_path."""
    from trainium_cdk.constructs.batch_node import node_setup
    from trainium_cdk.facts import versions
    from trainium_cdk.facts.catalog import DEFAULT_CATALOG

    root, downloads, bindir, calls = host
    setup = node_setup(DEFAULT_CATALOG.get("trn1.32xlarge"), None, metrics_deployment="t-batch",
                       prometheus_remote_write=REMOTE_WRITE)
    assert setup.values["PROMETHEUS_REMOTE_WRITE"] == REMOTE_WRITE
    lines = setup.program.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("mkdir -p /opt/trainium-cdk") and
                 "prometheus_node.py" in lines[i + 1])
    write, install = lines[start + 1], lines[start + 2]
    program = tmp_path / "prometheus_node.py"
    for (url, sha), (local, local_sha) in zip(
            [(versions.NODE_EXPORTER_URL, versions.NODE_EXPORTER_SHA256), (versions.PROMETHEUS_URL, versions.PROMETHEUS_SHA256)],
            downloads, strict=True):
        assert f"--fetch {url} {sha}" in install
        install = install.replace(f"{url} {sha}", f"{local} {local_sha}")
    (bindir / "python3").symlink_to(bindir / "python-standin")  # prometheus_client's check: recorded
    script = "\n".join([write.replace(node_program.NODE_PATH, str(program)),
                        install.replace(node_program.NODE_PATH, str(program)).replace(
                            " || echo", f" --root {root} || echo").replace("python3 ", f"{sys.executable} ", 1)])
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script],
                            env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PROMETHEUS_REMOTE_WRITE": REMOTE_WRITE},
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "not installed" not in result.stderr, result.stderr
    assert program.read_text() == PROGRAM.read_text()
    agent = yaml.safe_load((root / node_program.OPT.lstrip("/") / "agent.yml").read_text())
    assert agent["remote_write"] == [{"url": REMOTE_WRITE, "sigv4": {"region": "us-west-2"}}]
    assert agent["global"]["external_labels"]["deployment"] == "t-batch"
    assert calls.read_text().splitlines()[-1] == "systemctl enable --now " + " ".join(f"{u}.service" for u in UNITS)


def test_a_failed_install_leaves_the_batch_node_to_its_work(host, tmp_path):
    """GitHub unreachable at boot: the node reports and goes on (its health check and ECS agent still run)."""
    from trainium_cdk.constructs.batch_node import node_setup
    from trainium_cdk.facts.catalog import DEFAULT_CATALOG

    setup = node_setup(DEFAULT_CATALOG.get("trn1.32xlarge"), None, metrics_deployment="t-batch",
                       prometheus_remote_write=REMOTE_WRITE)
    (install,) = [line for line in setup.program.splitlines() if "prometheus_node.py install" in line]
    install = re.sub(r"--fetch \S+ ", "--fetch file:///nonexistent/release.tar.gz ", install)
    install = install.replace(node_program.NODE_PATH, str(PROGRAM)).replace("python3 ", f"{sys.executable} ", 1)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", install + "\necho next"], capture_output=True, text=True,
                            env={**os.environ, "PROMETHEUS_REMOTE_WRITE": REMOTE_WRITE}, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "next"
    assert "Prometheus exporters not installed" in result.stderr


def test_every_host_backend_writes_into_the_workspace_with_remote_write_on_it_alone():
    from tests.support.apps import synthesized

    app = synthesized("trn1.32xlarge")
    (workspace,) = resources(app.template_json("network"), "AWS::APS::Workspace")
    endpoint = [{"Fn::GetAtt": [workspace, "PrometheusEndpoint"]}, "api/v1/remote_write"]
    groups = {"batch": len(app.config.compute_groups), "parallelcluster": 1}  # Batch: each group's own instance role
    for role, count in groups.items():
        statements = [s for t in (app.template_with_nested(role),)
                      for r in t["Resources"].values() if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
                      for s in r["Properties"]["PolicyDocument"]["Statement"]
                      if "aps:RemoteWrite" in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])]
        assert len(statements) == count and all(s["Action"] == "aps:RemoteWrite" for s in statements), role
        for statement in statements:  # the workspace's ARN, imported from the network stack
            assert imported(app, statement["Resource"]) == {"Fn::GetAtt": [workspace, "Arn"]}
    # Batch: the groups' user data (nested stacks) name the workspace for the setup they fetch.
    launch_templates = group_resources(app.template_with_nested("batch"), "AWS::EC2::LaunchTemplate").values()
    assert len(launch_templates) == len(app.config.compute_groups)
    for launch_template in launch_templates:
        user_data = launch_template["Properties"]["LaunchTemplateData"]["UserData"]
        value = node_files.header_value(user_data, "PROMETHEUS_REMOTE_WRITE")
        assert [imported(app, p) for p in value] == ["'", endpoint[0], f"{endpoint[1]}'"]
    # ParallelCluster: the compute nodes' setup gets the program, the workspace and the pinned releases.
    (cluster,) = resources(app.template_json("parallelcluster"), "Custom::PclusterCluster").values()
    for queue in cluster["Properties"]["ClusterConfiguration"]["Scheduling"]["SlurmQueues"]:
        args = queue["CustomActions"]["OnNodeConfigured"]["Args"]
        values = [(a, args[i + 1]) for i, a in enumerate(args) if isinstance(a, str) and a.startswith("--prometheus-")]
        assert [a for a, _ in values] == ["--prometheus-program", "--prometheus-remote-write", "--prometheus-deployment",
                                          "--prometheus-release", "--prometheus-release", "--prometheus-client"]
        remote_write = dict(values)["--prometheus-remote-write"]["Fn::Join"]
        assert remote_write[0] == "" and [imported(app, p) for p in remote_write[1]] == endpoint
        assert [v for a, v in values if a == "--prometheus-release"] == [
            f"{versions.NODE_EXPORTER_SHA256}@{versions.NODE_EXPORTER_URL}", f"{versions.PROMETHEUS_SHA256}@{versions.PROMETHEUS_URL}"]
        assert dict(values)["--prometheus-client"] == versions.PROMETHEUS_CLIENT_VERSION
