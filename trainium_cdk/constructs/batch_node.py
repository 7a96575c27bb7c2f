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
# batch_node.sh's own comments are few: every group's launch template carries it, and 25 trn2.48xlarge groups
# fill a template close to CloudFormation's 1 MB (tests/test_scale_batch.py). Its variables and reasons:
#   NEURON_DRIVER, NEURON_YUM_REPO  the track's aws-neuronx-dkms version and Neuron's yum repository: the
#       driver is installed (or downgraded: a pin older than the AMI's) when the AMI carries another version,
#       and the loaded module is replaced; the tools when missing.
#   EFA_INSTALLER_URL, EFA_INSTALLER_SHA256  for a type with EFA: the installer of the version versions.py
#       pins, never aws-efa-installer-latest, run only when the AMI has no EFA module and only after sha256sum
#       agrees with the published digest (EC2 user guide, "Verify the EFA installer using a checksum");
#       --minimal: the kernel module and rdma-core, as libfabric comes with the training image.
#   ECS_CONFIG  the ECS agent's configuration (/etc/ecs/ecs.config; another only under stand-ins). Multi-node
#       tasks are awsvpc: ECS_AWSVPC_BLOCK_IMDS keeps them from the instance metadata, so that a job cannot
#       take the instance role (the node's, with ECS agent and ECR rights).
# A host whose setup failed never takes jobs (they would find no Neuron module, EFA or /fsx). The AMI's
# ecs.service is wanted by multi-user.target and ordered After=cloud-final.service (aws/amazon-ecs-agent,
# packaging/amazon-linux-ami-integrated/ecs.service): its start waits for the user data, then happened whatever
# the outcome. The program stops that queued start first and, from its EXIT trap (so covering what the user data
# runs after it), starts the agent after a clean run, --no-block (a blocking start would wait for cloud-final,
# which waits for the user data). On any failure it masks the agent and shuts the host down in one minute
# (the reason stays in `ec2 get-console-output`); the launch template's InstanceInitiatedShutdownBehavior
# (constructs/batch.py) makes that a termination, so the instance never registers and Batch launches another.
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
