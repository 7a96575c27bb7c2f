"""The user data of a Batch compute environment's nodes: trainium_cdk/node/batch_node.sh (the track's Neuron
driver and tools, the EFA kernel module), with storage the Lustre client's tuning (node/lustre_tuning.sh) and
the client itself, and the metrics program, in the MIME multi-part form Batch merges with its own."""

from __future__ import annotations

import base64
import gzip
import shlex
from pathlib import Path, PurePosixPath

from trainium_cdk import node
from trainium_cdk.catalog import InstanceSpec
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.lustre_client import SCRIPT as LUSTRE_SCRIPT
from trainium_cdk.lustre_client import mount_values as lustre_mount_values
from trainium_cdk.lustre_tuning import install_commands as lustre_tuning_commands
from trainium_cdk.names import SHARED_MOUNT
from trainium_cdk.node import neuron_metrics
from trainium_cdk.node.neuron_metrics import NODE_PATH as NEURON_METRICS_PATH
from trainium_cdk.node.neuron_metrics import install_command as neuron_metrics_install
from trainium_cdk.versions import EFA_INSTALLER_SHA256, EFA_INSTALLER_URL, XLA_TRACK

# The nodes run the "Amazon Linux 2023 (Neuron)" variant of the ECS-optimized AMI, pinned by AMI name
# through AWS's immutable per-AMI-name public parameter (versions.py: never ECS's `recommended`, which
# moves under a running compute environment). The user data then installs the track's driver version
# if the AMI carries another one, so that driver and container agree whatever AMI build is pinned.
NEURON_YUM_REPO = "https://yum.repos.neuron.amazonaws.com"
MIME_BOUNDARY = node.MIME_BOUNDARY
# What every Batch node runs (trainium_cdk/node/batch_node.sh), then, with storage, the Lustre client; the
# client's tuning goes first (lustre_tuning.py): its module options must be in place before the mount.
BATCH_NODE_SCRIPT = "batch_node.sh"
# The metrics program the user data writes onto each node, compressed: every group's launch template carries
# it, and 25 trn2.48xlarge groups fill a template close to CloudFormation's 1 MB (stacks/batch_stack.py).
NEURON_METRICS_SOURCE = Path(neuron_metrics.__file__)


def node_user_data(
    spec: InstanceSpec,
    storage: LustreMount | None,
    *,
    driver: str = XLA_TRACK.driver,
    metrics_deployment: str | None = None,
) -> str:
    """MIME multi-part user data (Batch merges it with its own): the Neuron driver of the track (installed
    when the AMI carries another version) and tools, the EFA kernel module, the FSx client's tuning for
    ``spec`` and the mount, each only when the AMI does not already have it; with ``metrics_deployment``,
    neuron-monitor into CloudWatch (trainium_cdk/node/neuron_metrics.py, started as a systemd service)."""
    values = {"NEURON_DRIVER": driver, "NEURON_YUM_REPO": NEURON_YUM_REPO}
    if spec.has_efa:
        values |= {"EFA_INSTALLER_URL": EFA_INSTALLER_URL, "EFA_INSTALLER_SHA256": EFA_INSTALLER_SHA256}
    files = [BATCH_NODE_SCRIPT]
    lines = ["#!/bin/bash"]
    if storage is not None:
        values.update(lustre_mount_values("amazon-linux", storage.dns_name, storage.mount_name))  # ECS AL2023
        files.append(LUSTRE_SCRIPT)
        lines += ["set -euo pipefail", *lustre_tuning_commands(spec, SHARED_MOUNT)]
    lines.append(node.program(files, values).rstrip("\n"))
    if metrics_deployment is not None:
        program = base64.b64encode(gzip.compress(NEURON_METRICS_SOURCE.read_bytes(), mtime=0)).decode()
        lines += [
            "rpm -q python3-boto3 >/dev/null 2>&1 || dnf install -y python3-boto3",
            f"mkdir -p {shlex.quote(str(PurePosixPath(NEURON_METRICS_PATH).parent))}",
            f"echo {program} | base64 -d | gunzip > {NEURON_METRICS_PATH}",
            shlex.join(neuron_metrics_install(deployment=metrics_deployment)),
        ]
    return node.multipart("\n".join(lines))
