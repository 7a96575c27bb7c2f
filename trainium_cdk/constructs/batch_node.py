"""The setup of a Batch compute environment's nodes: trainium_cdk/node/batch_node.sh (the track's Neuron driver
and tools, the EFA kernel module), with storage the Lustre client's tuning (node/lustre_tuning.sh) and the client
itself, and the metrics program, shipped once as an S3 asset; the user data (node/batch_bootstrap.sh, in the MIME
multi-part form Batch merges with its own) carries the values, fetches the setup and checks its sha256.

Every launch template once carried the whole setup as user data: about 15 KB a group (EC2 allows 16 KB of user
data), 35.8 KiB of template per trn2.48xlarge group, 978 KiB for Batch's 50 groups of CloudFormation's 1 MiB."""

from __future__ import annotations

import base64
import gzip
import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from aws_cdk import Stack, Stage
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from trainium_cdk import node
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.facts.catalog import InstanceSpec
from trainium_cdk.facts.names import NEURON_YUM_REPO, SHARED_MOUNT
from trainium_cdk.facts.versions import EFA_INSTALLER_SHA256, EFA_INSTALLER_URL, XLA_TRACK
from trainium_cdk.node import neuron_metrics
from trainium_cdk.node.health_check import COLLECTIVE_TIMEOUT_S
from trainium_cdk.node.neuron_metrics import NODE_PATH as NEURON_METRICS_PATH
from trainium_cdk.node.neuron_metrics import install_command as neuron_metrics_install
from trainium_cdk.runtime.lustre_client import SCRIPT as LUSTRE_SCRIPT
from trainium_cdk.runtime.lustre_client import mount_values as lustre_mount_values
from trainium_cdk.runtime.lustre_tuning import install_commands as lustre_tuning_commands
from trainium_cdk.runtime.prometheus_setup import REMOTE_WRITE_VARIABLE
from trainium_cdk.runtime.prometheus_setup import setup_lines as prometheus_setup_lines

# The nodes run the "Amazon Linux 2023 (Neuron)" variant of the ECS-optimized AMI, pinned by AMI name
# through AWS's immutable per-AMI-name public parameter (versions.py: never ECS's `recommended`, which
# moves under a running compute environment). The user data then installs the track's driver version
# if the AMI carries another one, so that driver and container agree whatever AMI build is pinned.
MIME_BOUNDARY = node.MIME_BOUNDARY
# What every Batch node runs (trainium_cdk/node/batch_node.sh), then, with storage, the Lustre client; the
# client's tuning goes first (lustre_tuning.py): its module options must be in place before the mount.
# batch_node.sh's own comments are few: every group's launch template carries it, and 25 trn2.48xlarge groups
# fill a template close to CloudFormation's 1 MB (tests/app/batch/test_scale_batch.py). Its variables and reasons:
#   NEURON_DRIVER, NEURON_YUM_REPO  the track's aws-neuronx-dkms version and Neuron's yum repository: the
#       driver is installed (or downgraded: a pin older than the AMI's) when the AMI carries another version,
#       and the loaded module is replaced; the tools when missing.
#   NEURON_RUNTIME, NEURON_COLLECTIVES  the track's aws-neuronx-runtime-lib and aws-neuronx-collectives: the health
#       check's on-node collective (nccom-test, from aws-neuronx-tools) runs on them; jobs bring their own in the
#       image. Installed (or downgraded) when the AMI has another version; an RPM version carries a build suffix
#       after "_", hence the comparison of what precedes it and dnf's glob.
#   EFA_INSTALLER_URL, EFA_INSTALLER_SHA256  for a type with EFA: the installer of the version versions.py
#       pins, never aws-efa-installer-latest, run only when the AMI has no EFA module and only after sha256sum
#       agrees with the published digest (EC2 user guide, "Verify the EFA installer using a checksum");
#       --minimal: the kernel module and rdma-core, as libfabric comes with the training image.
#   ECS_CONFIG, YUM_REPOS_DIR  the ECS agent's configuration (/etc/ecs/ecs.config) and dnf's repositories
#       (/etc/yum.repos.d); others only under stand-ins. Multi-node
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
# The first part, every Batch node's (the CPU queue's too, cpu_node_setup): the ECS agent held until the setup
# succeeded, else masked and the host shut down; awsvpc tasks kept from the instance metadata.
BATCH_AGENT_SCRIPT = "batch_agent.sh"
BATCH_NODE_FILES = (BATCH_AGENT_SCRIPT, BATCH_NODE_SCRIPT)
# The metrics program the node setup writes onto each node (compressed: one line of the setup program).
NEURON_METRICS_SOURCE = Path(neuron_metrics.__file__)
# The user data: fetch the setup, check it, run it (trainium_cdk/node/batch_bootstrap.sh).
BATCH_BOOTSTRAP_SCRIPT = "batch_bootstrap.sh"
SETUP_FILE_NAME = "batch_node_setup.sh"
# Checked last, after the driver, EFA and the mount are in place: the node health check (node/health_check.py),
# with its on-node collective (nccom-test's bf16 all-reduce over every NeuronCore) given COLLECTIVE_TIMEOUT_S.
HEALTH_CHECK = "health_check.py"


@dataclass(frozen=True)
class NodeSetup:
    """A node's setup: ``program``, the same text for every group of one instance type and storage (no CDK token:
    shipped as an S3 asset, its sha256 known at synth), and ``values``, the header the program reads (they may be
    tokens, such as the file system's DNS name: in the user data)."""

    program: str
    values: dict[str, str] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.program.encode()).hexdigest()


def node_setup(
    spec: InstanceSpec,
    storage: LustreMount | None,
    *,
    driver: str = XLA_TRACK.driver,
    runtime: str = XLA_TRACK.runtime,
    collectives: str = XLA_TRACK.collectives,
    metrics_deployment: str | None = None,
    prometheus_remote_write: str | None = None,
) -> NodeSetup:
    """The Neuron driver, runtime and collectives of the track (each installed when the AMI carries another version)
    and tools, the EFA kernel
    module, the FSx client's tuning for ``spec`` and the mount, each only when the AMI does not already have it;
    with ``metrics_deployment``, neuron-monitor into CloudWatch (trainium_cdk/node/neuron_metrics.py, started as a
    systemd service); with ``prometheus_remote_write`` (a workspace's remote-write URL, in the header: a token), the
    Prometheus-format exporters and agent (trainium_cdk/node/prometheus_node.py)."""
    values = {"NEURON_DRIVER": driver, "NEURON_RUNTIME": runtime, "NEURON_COLLECTIVES": collectives,
              "NEURON_YUM_REPO": NEURON_YUM_REPO}
    if spec.has_efa:
        values |= {"EFA_INSTALLER_URL": EFA_INSTALLER_URL, "EFA_INSTALLER_SHA256": EFA_INSTALLER_SHA256}
    files = list(BATCH_NODE_FILES)
    lines = ["#!/bin/bash"]
    if storage is not None:
        values.update(lustre_mount_values("amazon-linux", storage.dns_name, storage.mount_name))  # ECS AL2023
        files.append(LUSTRE_SCRIPT)
        lines += ["set -euo pipefail", *lustre_tuning_commands(spec, SHARED_MOUNT)]
    lines.append(node.program(files).rstrip("\n"))
    if metrics_deployment is not None:
        program = base64.b64encode(gzip.compress(NEURON_METRICS_SOURCE.read_bytes(), mtime=0)).decode()
        lines += [
            "rpm -q python3-boto3 >/dev/null 2>&1 || dnf install -y python3-boto3",
            f"mkdir -p {shlex.quote(str(PurePosixPath(NEURON_METRICS_PATH).parent))}",
            f"echo {program} | base64 -d | gunzip > {NEURON_METRICS_PATH}",
            shlex.join(neuron_metrics_install(deployment=metrics_deployment)),
        ]
    if prometheus_remote_write is not None and metrics_deployment is not None:
        values |= {REMOTE_WRITE_VARIABLE: prometheus_remote_write}
        # pip, for neuron-monitor-prometheus.py's prometheus_client; as the install itself, never fatal to the node.
        lines += ["rpm -q python3-pip >/dev/null 2>&1 || dnf install -y python3-pip || true",
                  *prometheus_setup_lines(deployment=metrics_deployment)]
    values |= health_values(spec)
    lines.append(health_check_command(SHARED_MOUNT if storage is not None else None))
    return NodeSetup(program="\n".join(lines) + "\n", values=values)


def cpu_node_setup(storage: LustreMount | None) -> NodeSetup:
    """A node of the Batch CPU queue (``BatchCpuQueue``): the agent's part of every Batch node and, with storage, the
    Lustre client and the mount. No Neuron, no EFA, no health check of either, no client tuning (a CPU job reads
    and writes a dataset, not a training step's checkpoint)."""
    files, values = [BATCH_AGENT_SCRIPT], {}
    if storage is not None:
        values = lustre_mount_values("amazon-linux", storage.dns_name, storage.mount_name)  # ECS AL2023
        files.append(LUSTRE_SCRIPT)
    return NodeSetup(program=node.program(files), values=values)


def health_values(spec: InstanceSpec) -> dict[str, str]:
    """What a node of ``spec`` must show (the catalog), as values of the setup's header: the program stays one text
    (one S3 object) for every type."""
    return {"HEALTH_DEVICES": str(spec.neuron_devices), "HEALTH_CORES": ",".join(map(str, spec.neuron_core_counts)),
            "HEALTH_EFA": str(spec.efa_interfaces)}


def health_check_command(shared_mount: str | None) -> str:
    """The node health check (node/health_check.py, compressed into one line and run from stdin) against the header's
    :func:`health_values`, the track's driver (installed above), with storage the Lustre mount, and last the on-node
    collective over every NeuronCore (the runtime and collectives installed above): its failure, or a collective not
    done within COLLECTIVE_TIMEOUT_S, fails the setup, so the host never starts the ECS agent (batch_node.sh's EXIT
    trap masks it and shuts the host down) and Batch launches another."""
    args = ('--devices "${HEALTH_DEVICES:?}" --cores "${HEALTH_CORES:?}" --efa "${HEALTH_EFA:?}" '
            '--driver "${NEURON_DRIVER:?}"' + (f" --fsx {shlex.quote(shared_mount)}" if shared_mount else "")
            + f" --collective --collective-timeout {COLLECTIVE_TIMEOUT_S}")
    return f"echo {node.packed(HEALTH_CHECK)} | base64 -d | gunzip | python3 - {args}"


def node_user_data(setup: NodeSetup, *, url: str, region: str) -> str:
    """MIME multi-part user data (Batch merges it with its own): node/batch_bootstrap.sh with the setup's values,
    where to fetch the program (``url``, s3://, in ``region``) and its sha256."""
    values = {**setup.values, "NODE_SETUP_URL": url, "NODE_SETUP_SHA256": setup.sha256, "NODE_SETUP_REGION": region}
    # The setup's values are read by the setup, which the bootstrap sources: unused in this text (shellcheck).
    lint = "# shellcheck disable=SC2034  # the values are the fetched setup's\n"
    return node.multipart("#!/bin/bash\n" + lint + node.program(BATCH_BOOTSTRAP_SCRIPT, values))


class BatchNodeSetup(Construct):
    """A compute group's node setup as an S3 asset (groups of one content share one object) and the user data
    that fetches it; :meth:`grant_read` lets a node role read that object and nothing else.

    :param setup: what the nodes run (:func:`node_setup`).
    """

    def __init__(self, scope: Construct, construct_id: str, *, setup: NodeSetup) -> None:
        super().__init__(scope, construct_id)
        self.setup = setup
        self.asset = s3_assets.Asset(self, "Program", path=str(_stage(self, setup.program)))
        self.user_data = node_user_data(setup, url=self.asset.s3_object_url, region=Stack.of(self).region)

    def grant_read(self, role: iam.IRole) -> None:
        # The one object, not the asset bucket (Asset.grant_read allows every object of the bucket).
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:GetObject"], resources=[self.asset.bucket.arn_for_objects(self.asset.s3_object_key)],
        ))


def _stage(scope: Construct, text: str) -> Path:
    """A rendered file needs a path to become an asset: the cloud assembly's, by content."""
    stage = Stage.of(scope)
    assert stage is not None  # a construct of an app: the app is a stage
    path = Path(stage.asset_outdir) / "trainium-cdk-sources" / hashlib.sha256(text.encode()).hexdigest()[:16] / SETUP_FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
