#!/usr/bin/env python3
"""neuron-monitor into CloudWatch on a Batch or ParallelCluster node (EKS has Container Insights instead).

neuron-monitor (aws-neuronx-tools) writes one JSON report per period to stdout, "to be consumed by other
tools" (Neuron Monitor User Guide); its sample consumer ``neuron-monitor-cloudwatch.py`` publishes with
``put_metric_data`` under a namespace of the caller's choice, but neither its metric names nor its
dimensions are documented, so no dashboard or alarm could rely on them. This program is that consumer
with names and dimensions of our own, read from the report format the guide documents:

- ``NeuronCoreUtilization`` (Percent): ``neuroncore_counters`` of every runtime, averaged over all
  NeuronCores of the instance (``neuron_hardware_info``);
- ``NeuronDeviceMemoryUsed`` (Bytes): ``memory_used.neuron_runtime_used_bytes.neuron_device`` summed;
- ``NeuronHardwareErrors`` (Count): uncorrected DRAM and SRAM ECC events (``neuron_hw_counters``) and
  the runtimes' ``hardware`` execution errors of the period.

Dimensions ``Deployment`` and ``InstanceId`` on each; ``NeuronHardwareErrors`` also with ``Deployment``
alone, for the deployment's alarm. ``install`` writes the monitor's configuration and a systemd unit that
pipes ``neuron-monitor`` into ``run``, and starts it. Standard library only, plus boto3 on the node;
trainium-cdk imports the constants (the dashboard reads what the nodes publish).

    python3 neuron_metrics.py install --namespace NS --deployment NAME
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

NAMESPACE = "TrainiumCDK/Neuron"
DEPLOYMENT_DIMENSION = "Deployment"
INSTANCE_DIMENSION = "InstanceId"
CORE_UTILIZATION = "NeuronCoreUtilization"
DEVICE_MEMORY = "NeuronDeviceMemoryUsed"
HARDWARE_ERRORS = "NeuronHardwareErrors"
# Where the nodes keep this program and how its service is called (Batch user data, neuron_setup.sh).
NODE_PATH = "/opt/trainium-cdk/neuron_metrics.py"
SERVICE = "trainium-neuron-metrics"
SYSTEMD_DIR = "/etc/systemd/system"
NEURON_BIN = "/opt/aws/neuron/bin"
# One report a minute: CloudWatch's standard resolution.
PERIOD = "60s"
MONITOR_CONFIG = {
    "period": PERIOD,
    "neuron_runtimes": [
        {"tag_filter": ".*", "metrics": [{"type": "neuroncore_counters"}, {"type": "memory_used"},
                                         {"type": "execution_stats"}]}
    ],
    "system_metrics": [{"type": "neuron_hw_counters"}],
}
_ECC_UNCORRECTED = ("mem_ecc_uncorrected", "sram_ecc_uncorrected")


def policy_statement(namespace: str = NAMESPACE) -> dict[str, Any]:
    """The IAM statement the nodes' role needs: PutMetricData into ``namespace`` only (the action has no
    resource-level permissions). Batch's instance role and ParallelCluster's managed policy both take it."""
    return {
        "Effect": "Allow", "Action": "cloudwatch:PutMetricData", "Resource": "*",
        "Condition": {"StringEquals": {"cloudwatch:namespace": namespace}},
    }


def install_command(*, deployment: str, namespace: str = NAMESPACE, python: str = "python3") -> list[str]:
    """The argv that installs and starts the service on a node (this file at :data:`NODE_PATH`)."""
    return [python, NODE_PATH, "install", "--namespace", namespace, "--deployment", deployment]


def measurements(report: dict[str, Any]) -> tuple[str | None, list[tuple[str, float, str]]]:
    """(instance id, [(metric, value, unit)]) of one neuron-monitor report."""
    instance = report.get("instance_info") or report.get("instance_data") or {}
    hardware = report.get("neuron_hardware_info") or {}
    cores = int(hardware.get("neuron_device_count") or 0) * int(hardware.get("neuroncore_per_device_count") or 0)
    busy, seen, device_bytes, errors = 0.0, set(), 0, 0
    for runtime in report.get("neuron_runtime_data") or []:
        groups = runtime.get("report") or {}
        for index, core in ((groups.get("neuroncore_counters") or {}).get("neuroncores_in_use") or {}).items():
            busy += float(core.get("neuroncore_utilization") or 0)
            seen.add(index)
        used = (groups.get("memory_used") or {}).get("neuron_runtime_used_bytes") or {}
        device_bytes += int(used.get("neuron_device") or 0)
        errors += int(((groups.get("execution_stats") or {}).get("error_summary") or {}).get("hardware") or 0)
    for device in ((report.get("system_data") or {}).get("neuron_hw_counters") or {}).get("neuron_devices") or []:
        errors += sum(int(device.get(key) or 0) for key in _ECC_UNCORRECTED)
    utilization = busy / (cores or len(seen) or 1)
    values = [(CORE_UTILIZATION, utilization, "Percent"), (DEVICE_MEMORY, float(device_bytes), "Bytes"),
              (HARDWARE_ERRORS, float(errors), "Count")]
    return instance.get("instance_id") or None, values


def metric_data(report: dict[str, Any], deployment: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(region, the MetricData of put_metric_data) of one report."""
    instance_id, values = measurements(report)
    instance = report.get("instance_info") or report.get("instance_data") or {}
    deployment_only = [{"Name": DEPLOYMENT_DIMENSION, "Value": deployment}]
    per_node = [*deployment_only, {"Name": INSTANCE_DIMENSION, "Value": instance_id or "unknown"}]
    data = [{"MetricName": name, "Dimensions": per_node, "Value": value, "Unit": unit} for name, value, unit in values]
    data += [{"MetricName": name, "Dimensions": deployment_only, "Value": value, "Unit": unit}
             for name, value, unit in values if name == HARDWARE_ERRORS]
    return instance.get("instance_region") or None, data


def run(namespace: str, deployment: str) -> int:
    import boto3

    clients: dict[str | None, Any] = {}  # by region; None: boto3's own default
    for line in sys.stdin:
        try:
            report = json.loads(line)
        except ValueError as error:
            print(f"neuron_metrics: not a report: {error}", file=sys.stderr, flush=True)
            continue
        region, data = metric_data(report, deployment)
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region not in clients:
            clients[region] = boto3.client("cloudwatch", region_name=region)
        try:
            clients[region].put_metric_data(Namespace=namespace, MetricData=data)
        except Exception as error:  # noqa: BLE001 - a failed minute must not stop the next one
            print(f"neuron_metrics: put_metric_data failed: {error}", file=sys.stderr, flush=True)
    return 0


def unit(namespace: str, deployment: str, *, config: Path, program: Path, python: str) -> str:
    run_argv = [python, str(program), "run", "--namespace", namespace, "--deployment", deployment]
    pipeline = f"exec neuron-monitor -c {shlex.quote(str(config))} | {shlex.join(run_argv)}"
    return "\n".join([
        "[Unit]",
        "Description=trainium-cdk: neuron-monitor into CloudWatch",
        "After=network-online.target",
        "Wants=network-online.target",
        "[Service]",
        f"Environment=PATH={NEURON_BIN}:/usr/local/bin:/usr/bin:/bin",
        f"ExecStart=/bin/sh -c {shlex.quote(pipeline)}",
        "Restart=always",
        "RestartSec=30",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def install(namespace: str, deployment: str, systemd_dir: Path) -> int:
    program = Path(__file__).resolve()
    config = program.with_name("neuron-monitor.json")
    config.write_text(json.dumps(MONITOR_CONFIG, indent=2) + "\n")
    systemd_dir.mkdir(parents=True, exist_ok=True)
    (systemd_dir / f"{SERVICE}.service").write_text(
        unit(namespace, deployment, config=config, program=program, python=sys.executable)
    )
    subprocess.run(["systemctl", "daemon-reload"], check=True)
    subprocess.run(["systemctl", "enable", "--now", f"{SERVICE}.service"], check=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("install", "run"))
    parser.add_argument("--namespace", default=NAMESPACE)
    parser.add_argument("--deployment", required=True)
    parser.add_argument("--systemd-dir", type=Path, default=Path(SYSTEMD_DIR))
    args = parser.parse_args(argv)
    if args.action == "install":
        return install(args.namespace, args.deployment, args.systemd_dir)
    return run(args.namespace, args.deployment)


if __name__ == "__main__":
    sys.exit(main())
