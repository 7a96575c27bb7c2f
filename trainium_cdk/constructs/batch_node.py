"""The user data of a Batch compute environment's nodes: trainium_cdk/node/batch_node.sh (the track's Neuron
driver and tools, the EFA kernel module), the Lustre client with storage, and the metrics program, in the MIME
multi-part form Batch merges with its own."""

from __future__ import annotations

import shlex
from pathlib import Path, PurePosixPath

from trainium_cdk import node
from trainium_cdk.catalog import InstanceSpec
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.errors import ConfigError
from trainium_cdk.lustre_client import SCRIPT as LUSTRE_SCRIPT
from trainium_cdk.lustre_client import mount_values as lustre_mount_values
from trainium_cdk.node import neuron_metrics
from trainium_cdk.node.neuron_metrics import NODE_PATH as NEURON_METRICS_PATH
from trainium_cdk.node.neuron_metrics import install_command as neuron_metrics_install
from trainium_cdk.versions import XLA_TRACK

# The nodes run the "Amazon Linux 2023 (Neuron)" variant of the ECS-optimized AMI, pinned by AMI name
# through AWS's immutable per-AMI-name public parameter (versions.py: never ECS's `recommended`, which
# moves under a running compute environment). The user data then installs the track's driver version
# if the AMI carries another one, so that driver and container agree whatever AMI build is pinned.
NEURON_YUM_REPO = "https://yum.repos.neuron.amazonaws.com"
EFA_INSTALLER_URL = "https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz"
MIME_BOUNDARY = "==TRAINIUM_CDK=="
# What every Batch node runs first (trainium_cdk/node/batch_node.sh), then the Lustre client with storage.
BATCH_NODE_SCRIPT = "batch_node.sh"
# The metrics program the user data writes onto each node (a heredoc: its delimiter must not occur in it).
NEURON_METRICS_SOURCE = Path(neuron_metrics.__file__)
NEURON_METRICS_END = "TRAINIUM_NEURON_METRICS"


def node_user_data(
    spec: InstanceSpec,
    storage: LustreMount | None,
    *,
    driver: str = XLA_TRACK.driver,
    metrics_deployment: str | None = None,
) -> str:
    """MIME multi-part user data (Batch merges it with its own): the Neuron driver of the track (installed
    when the AMI carries another version) and tools, the EFA kernel module, and the FSx mount, each only
    when the AMI does not already have it; with ``metrics_deployment``, neuron-monitor into CloudWatch
    (trainium_cdk/node/neuron_metrics.py, started as a systemd service)."""
    values = {"NEURON_DRIVER": driver, "NEURON_YUM_REPO": NEURON_YUM_REPO}
    if spec.has_efa:
        values["EFA_INSTALLER_URL"] = EFA_INSTALLER_URL
    files = [BATCH_NODE_SCRIPT]
    if storage is not None:
        values.update(lustre_mount_values("amazon-linux", storage.dns_name, storage.mount_name))  # ECS AL2023
        files.append(LUSTRE_SCRIPT)
    lines = [node.program(files, values, shebang="/bin/bash").rstrip("\n")]
    if metrics_deployment is not None:
        program = NEURON_METRICS_SOURCE.read_text().rstrip("\n")
        if NEURON_METRICS_END in program:
            raise ConfigError("neuron_metrics.py", NEURON_METRICS_END, "a program without its heredoc delimiter")
        lines += [
            "rpm -q python3-boto3 >/dev/null 2>&1 || dnf install -y python3-boto3",
            f"mkdir -p {shlex.quote(str(PurePosixPath(NEURON_METRICS_PATH).parent))}",
            f"cat > {NEURON_METRICS_PATH} <<'{NEURON_METRICS_END}'",
            program,
            NEURON_METRICS_END,
            shlex.join(neuron_metrics_install(deployment=metrics_deployment)),
        ]
    script = "\n".join(lines)
    return "\n".join(
        [
            "MIME-Version: 1.0",
            f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"',
            "",
            f"--{MIME_BOUNDARY}",
            'Content-Type: text/x-shellscript; charset="us-ascii"',
            "",
            script,
            "",
            f"--{MIME_BOUNDARY}--",
            "",
        ]
    )
