#!/usr/bin/env python3
"""Prometheus-format metrics of a Trainium node: the same exporters, names and labels on every backend.

Three exporters, each the documented or well-kept tool where one exists:

- Neuron: ``neuron-monitor | neuron-monitor-prometheus.py`` (aws-neuronx-tools; the Neuron Monitor User
  Guide's Prometheus companion), port :data:`NEURON_MONITOR_PORT`. Its metric names: :data:`NEURON_MONITOR_METRICS`.
- EFA: the EFA driver's hardware counters (``/sys/class/infiniband/<device>/ports/<port>/hw_counters``), written
  by ``efa`` below as a textfile. node_exporter's infiniband collector reads ``counters`` and the mlx5
  ``hw_counters`` names it knows, not EFA's (prometheus/procfs sysfs/class_infiniband.go), so this small reader
  names them ``node_amazonefa_<counter>`` (labels ``device``, ``port``), the names awsome-distributed-training's
  EFA node exporter uses, so that queries carry over from it.
- node_exporter (pinned release) with only its textfile collector on, port :data:`NODE_EXPORTER_PORT`: it serves
  the EFA file and the per-job files the launcher writes (``*.prom`` in :data:`METRICS_DIR`, the value of
  ``trainium_cdk.facts.names.NODE_METRICS_DIR``).

On EKS the managed collector scrapes these from pods (trainium_cdk/charts/metrics_exporters.py); on AWS Batch and
ParallelCluster hosts ``install`` puts them on the host as systemd services, with a Prometheus in agent mode that
scrapes them and remote-writes (SigV4) into the deployment's Amazon Managed Service for Prometheus workspace.
Standard library only: this file is copied to nodes and into a pod as is.

    python3 prometheus_node.py efa [--once]
    python3 prometheus_node.py install --remote-write URL --deployment NAME --fetch URL SHA256 ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

NEURON_MONITOR_PORT = 8000
NODE_EXPORTER_PORT = 9100
# Scrape job names (the ``job`` label), and the label every series carries for its node (``node``).
NEURON_JOB = "neuron-monitor"
NODE_JOB = "node-exporter"
NODE_LABEL = "node"
DEPLOYMENT_LABEL = "deployment"
SCRAPE_INTERVAL = "30s"
# The per-job textfiles carry a ``job`` label (the training job, trainium_cdk/facts/names.py); the node exporter's scrape
# honors it (honor_labels), or Prometheus would rename it exported_job under its own job="node-exporter"
# (Prometheus configuration docs, scrape_config honor_labels).
# The same value as trainium_cdk.facts.names.NODE_METRICS_DIR (tests/app/test_prometheus_metrics.py checks): this file
# runs on nodes without the package.
METRICS_DIR = "/var/lib/trainium-cdk/metrics"
EFA_FILE = "efa.prom"
SYS_INFINIBAND = "/sys/class/infiniband"
EFA_PREFIX = "node_amazonefa_"
EFA_INTERVAL_SECONDS = 15

# neuron-monitor-prometheus.py's metric names (as of 2026-11-26), from its documented output: Neuron's own Grafana
# dashboard for it (aws-neuron/aws-neuron-sdk src/examples/neuron-monitor/neuron-monitor-grafana.json, linked
# from the Neuron Monitor User Guide, "neuron-monitor-prometheus.py") and the CloudWatch agent's awsneuron
# processor README (aws/amazon-cloudwatch-agent v1.300066.0, plugins/processors/awsneuron, 2026-03-25), which
# lists what the exporter emits per core and per node. A dashboard may query only these.
NEURON_MONITOR_METRICS = (
    "neuroncore_utilization_ratio",  # label neuroncore; 0..1
    "neuroncore_memory_usage_constants", "neuroncore_memory_usage_model_code",
    "neuroncore_memory_usage_model_shared_scratchpad", "neuroncore_memory_usage_runtime_memory",
    "neuroncore_memory_usage_tensors",  # per core, bytes of device (HBM) memory
    "neuron_runtime_memory_used_bytes",  # label memory_location: host, neuron_device
    "execution_status_total",  # label status_type
    "execution_errors_total",  # label error_type
    "execution_latency_seconds",  # label percentile: p0 .. p100
    "hardware_ecc_events_total",  # labels event_type (mem_ecc_corrected, ...), neuron_device_index
    "neuron_runtime_vcpu_usage_ratio", "system_vcpu_usage_ratio", "system_vcpu_count",
    "system_memory_used_bytes", "system_memory_total_bytes", "instance_info", "neuron_hardware_info",
)
# The EFA driver's device counters (linux drivers/infiniband/hw/efa/efa_verbs.c, EFA_DEFINE_DEVICE_STATS; the
# rdma_write ones from kernel 6.4): what ``efa`` exports, each as EFA_PREFIX + name, when the file exists.
EFA_COUNTERS = (
    "tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes", "recv_wrs",
    "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes",
    "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err", "rdma_write_recv_bytes",
)

# Where ``install`` puts things on a host.
OPT = "/opt/trainium-cdk/prometheus"
NODE_PATH = "/opt/trainium-cdk/prometheus_node.py"
SYSTEMD_DIR = "/etc/systemd/system"
NEURON_BIN = "/opt/aws/neuron/bin"
UNITS = {
    "trainium-node-exporter": "node_exporter: the EFA and job textfiles",
    "trainium-efa-metrics": "EFA hardware counters into the textfile directory",
    "trainium-neuron-prometheus": "neuron-monitor's Prometheus endpoint",
    "trainium-prometheus-agent": "Prometheus agent: remote write into Amazon Managed Service for Prometheus",
}


def efa_text(sys_root: Path) -> str:
    """The textfile (Prometheus exposition format) of every EFA device's hardware counters under ``sys_root``."""
    lines: dict[str, list[str]] = {}
    for counters in sorted(sys_root.glob("*/ports/*/hw_counters")):
        device, port = counters.parent.parent.parent.name, counters.parent.name
        for name in EFA_COUNTERS:
            path = counters / name
            try:
                value = int(path.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            lines.setdefault(name, []).append(f'{EFA_PREFIX}{name}{{device="{device}",port="{port}"}} {value}')
    out = []
    for name, samples in lines.items():
        out += [f"# HELP {EFA_PREFIX}{name} EFA hardware counter {name} (hw_counters).",
                f"# TYPE {EFA_PREFIX}{name} counter", *samples]
    return "\n".join(out) + ("\n" if out else "")


def write_efa(sys_root: Path, directory: Path) -> None:
    """Write the file whole and rename it in place: node_exporter never reads half a file (textfile collector docs)."""
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{EFA_FILE}.{os.getpid()}"
    partial.write_text(efa_text(sys_root))
    partial.replace(directory / EFA_FILE)


def agent_configuration(*, remote_write_url: str, region: str, deployment: str, node: str) -> dict:
    """The host Prometheus (agent mode): scrape the two local exporters, remote-write with SigV4."""
    def job(name: str, port: int) -> dict:
        return {"job_name": name, "honor_labels": name == NODE_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}

    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL,
                   "external_labels": {DEPLOYMENT_LABEL: deployment, NODE_LABEL: node}},
        "scrape_configs": [job(NEURON_JOB, NEURON_MONITOR_PORT), job(NODE_JOB, NODE_EXPORTER_PORT)],
        "remote_write": [{"url": remote_write_url, "sigv4": {"region": region}}],
    }


def units(*, python: str, program: str, opt: str) -> dict[str, list[str]]:
    """The [Service] lines of each unit (ExecStart and what differs); ``unit_text`` adds the rest."""
    neuron = f"exec neuron-monitor | {shlex.quote(python)} {NEURON_BIN}/neuron-monitor-prometheus.py --port {NEURON_MONITOR_PORT}"
    return {
        "trainium-node-exporter": [
            f"ExecStart={opt}/node_exporter --collector.disable-defaults --collector.textfile "
            f"--collector.textfile.directory={METRICS_DIR} --web.listen-address=:{NODE_EXPORTER_PORT}",
            "DynamicUser=yes"],
        "trainium-efa-metrics": [f"ExecStart={python} {program} efa", f"ExecStartPre=/bin/mkdir -p {METRICS_DIR}"],
        "trainium-neuron-prometheus": [f"Environment=PATH={NEURON_BIN}:/usr/local/bin:/usr/bin:/bin",
                                       f"ExecStart=/bin/sh -c {shlex.quote(neuron)}"],
        "trainium-prometheus-agent": [
            f"ExecStart={opt}/prometheus --agent --config.file={opt}/agent.yml --storage.agent.path={opt}/wal "
            "--web.listen-address=127.0.0.1:9090"],
    }


def unit_text(name: str, service: list[str]) -> str:
    return "\n".join(["[Unit]", f"Description=trainium-cdk: {UNITS[name]}", "After=network-online.target",
                      "Wants=network-online.target", "[Service]", *service, "Restart=always", "RestartSec=30",
                      "[Install]", "WantedBy=multi-user.target", ""])


def _extract(archive: Path, member: str, target: Path) -> None:
    """Take the one binary ``member`` (``<dir>/<name>``) out of a release tarball into ``target``."""
    with tarfile.open(archive) as tar:
        for entry in tar.getmembers():
            if entry.isfile() and entry.name.split("/", 1)[-1] == member:
                source = tar.extractfile(entry)
                assert source is not None
                target.write_bytes(source.read())
                target.chmod(0o755)
                return
    raise SystemExit(f"prometheus_node: {archive.name} has no {member}")


def workspace_region(remote_write_url: str) -> str:
    """The region of a workspace's remote-write URL, https://aps-workspaces.<region>.amazonaws.com/workspaces/..."""
    match = re.match(r"https://aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/", remote_write_url)
    if match is None:
        raise SystemExit(f"prometheus_node: not a workspace's remote-write URL: {remote_write_url}; give --region")
    return match.group(1)


def fetch_checked(url: str, sha256: str, target: Path) -> Path:
    """Download ``url`` and keep it only if its SHA-256 is the pinned one: a release's content never moves under
    a node that boots later (the same rule as the EFA installer in batch_node.sh)."""
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 - pinned https URLs from versions.py
        data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise SystemExit(f"prometheus_node: {url} has SHA-256 {digest}, expected {sha256}")
    target.write_bytes(data)
    return target


def install(*, remote_write_url: str, region: str, deployment: str, downloads: list[tuple[str, str]],
            prometheus_client: str, python: str, root: Path) -> int:
    """Install the exporters and the agent from the pinned release archives (``downloads``: (URL, SHA-256) of the
    node_exporter and prometheus tarballs), and prometheus_client for neuron-monitor-prometheus.py, then start them."""
    opt = root / OPT.lstrip("/")
    opt.mkdir(parents=True, exist_ok=True)
    metrics = root / METRICS_DIR.lstrip("/")
    metrics.mkdir(parents=True, exist_ok=True)
    # Slurm and dev-instance jobs run as their users and write their textfiles here (the launcher): sticky and
    # world-writable, as /tmp, so that no user replaces another's file.
    metrics.chmod(0o1777)
    archives = [fetch_checked(url, sha, opt / url.rsplit("/", 1)[-1]) for url, sha in downloads]
    for prefix, binary in (("node_exporter-", "node_exporter"), ("prometheus-", "prometheus")):
        found = [a for a in archives if a.name.startswith(prefix)]
        if len(found) != 1:
            raise SystemExit(f"prometheus_node: expected one {prefix}*.tar.gz download, got {len(found)}")
        _extract(found[0], binary, opt / binary)
        found[0].unlink()
    # neuron-monitor-prometheus.py imports prometheus_client (Neuron Monitor User Guide); images may carry it.
    if subprocess.run([python, "-c", "import prometheus_client"], capture_output=True).returncode != 0:
        subprocess.run([python, "-m", "pip", "install", "--no-cache-dir", f"prometheus-client=={prometheus_client}"],
                       check=True)
    # Prometheus reads YAML, and JSON is YAML: the standard library writes it.
    config = agent_configuration(remote_write_url=remote_write_url, region=region, deployment=deployment,
                                 node=socket.gethostname())
    (opt / "agent.yml").write_text(json.dumps(config, indent=2) + "\n")
    systemd = root / SYSTEMD_DIR.lstrip("/")
    systemd.mkdir(parents=True, exist_ok=True)
    for name, service in units(python=python, program=str(Path(__file__).resolve()), opt=OPT).items():
        (systemd / f"{name}.service").write_text(unit_text(name, service))
    subprocess.run(["systemctl", "daemon-reload"], check=True)
    subprocess.run(["systemctl", "enable", "--now", *(f"{name}.service" for name in UNITS)], check=True)
    return 0


def install_command(*, remote_write_url: str, deployment: str, downloads: list[tuple[str, str]],
                    prometheus_client: str, python: str = "python3") -> list[str]:
    """The argv that installs and starts everything on a host (this file at :data:`NODE_PATH`)."""
    fetch = [part for url, sha in downloads for part in ("--fetch", url, sha)]
    return [python, NODE_PATH, "install", "--remote-write", remote_write_url, "--deployment", deployment, *fetch, "--prometheus-client", prometheus_client, "--python", python]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    efa = sub.add_parser("efa", help="write the EFA counters' textfile every few seconds")
    efa.add_argument("--sys", type=Path, default=Path(SYS_INFINIBAND))
    efa.add_argument("--dir", type=Path, default=Path(METRICS_DIR))
    efa.add_argument("--interval", type=float, default=EFA_INTERVAL_SECONDS)
    efa.add_argument("--once", action="store_true")
    setup = sub.add_parser("install", help="install and start the exporters and the agent on this host")
    setup.add_argument("--remote-write", required=True)
    setup.add_argument("--region", help="the workspace's region; default: the one its URL names")
    setup.add_argument("--deployment", required=True)
    setup.add_argument("--fetch", nargs=2, action="append", metavar=("URL", "SHA256"), required=True)
    setup.add_argument("--prometheus-client", required=True, help="the pinned prometheus_client version")
    setup.add_argument("--python", default=sys.executable)
    setup.add_argument("--root", type=Path, default=Path("/"))
    args = parser.parse_args(argv)
    if args.action == "install":
        region = args.region or workspace_region(args.remote_write)
        return install(remote_write_url=args.remote_write, region=region, deployment=args.deployment,
                       downloads=[tuple(pair) for pair in args.fetch], prometheus_client=args.prometheus_client,
                       python=args.python, root=args.root)
    while True:
        write_efa(args.sys, args.dir)
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
