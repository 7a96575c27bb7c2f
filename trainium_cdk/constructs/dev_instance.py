"""DevInstance: one Trainium (or Inferentia) instance for development, on the Neuron DLAMI.

Private subnet, no inbound rule from anywhere: reached with SSM Session Manager (or, as an option, an
EC2 Instance Connect endpoint inside the VPC). The AMI is the DLAMI of the Neuron track's SDK release,
found at deploy time by name and description (AmiLookup: Neuron publishes SSM parameters only for
`latest`) and kept for the life of the stack, so synth stays offline. Never the DLAMI's `latest`: since
Neuron 2.32 the latest DLAMIs carry no PyTorch/XLA environment, and a moving AMI would drift from the
pinned SDK.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import posixpath
from dataclasses import dataclass
from pathlib import Path

import jsii
from aws_cdk import Stack, Stage
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from trainium_cdk import node
from trainium_cdk.constructs.ami_lookup import AmiLookup, ImageIdImage
from trainium_cdk.constructs.efa_launch_template import METADATA_HOP_LIMIT
from trainium_cdk.constructs.nag import acknowledge
from trainium_cdk.constructs.prometheus import MetricsWorkspace
from trainium_cdk.constructs.session_manager import session_manager_role
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.errors import ConfigError, names_construct_path
from trainium_cdk.facts import defaults
from trainium_cdk.facts.catalog import InstanceSpec, check_ami_id
from trainium_cdk.facts.names import CACHE_DIR_NAME, SHARED_MOUNT
from trainium_cdk.facts.versions import XLA_TRACK, AmiQuery, NeuronTrack
from trainium_cdk.runtime.lustre_client import BOOT_SCRIPT as LUSTRE_BOOT_SCRIPT
from trainium_cdk.runtime.lustre_client import SCRIPT as LUSTRE_SCRIPT
from trainium_cdk.runtime.lustre_client import mount_values as lustre_mount_values
from trainium_cdk.runtime.lustre_tuning import install_commands as lustre_tuning_commands
from trainium_cdk.runtime.prometheus_setup import REMOTE_WRITE_VARIABLE
from trainium_cdk.runtime.prometheus_setup import setup_lines as prometheus_setup_lines

# The MLP example, at the path the example image has it (Batch and EKS run it there).
EXAMPLE_SOURCE = Path(__file__).resolve().parent.parent / "examples" / "mlp" / "train.py"
EXAMPLE_PATH = "/opt/trainium-cdk/examples/mlp/train.py"
# The user data: fetch the setup, check it, run it (trainium_cdk/node/batch_bootstrap.sh, as on a Batch node).
BOOTSTRAP_SCRIPT = "batch_bootstrap.sh"
SETUP_FILE_NAME = "instance_setup.sh"
# The Neuron setup guides ask for at least 512 GiB.
DEFAULT_ROOT_VOLUME_GIB = defaults.ROOT_VOLUME_GIB
SSH_PORT = 22
# The root device of the AMI: Ubuntu images boot from /dev/sda1, Amazon Linux from /dev/xvda.
ROOT_DEVICE = {"ubuntu": "/dev/sda1", "amazon-linux": "/dev/xvda"}
OS_USER = {"ubuntu": "ubuntu", "amazon-linux": "ec2-user"}
# neuron-monitor-prometheus.py imports prometheus_client (Neuron Monitor User Guide). Ubuntu's system Python refuses
# pip installs (PEP 668: externally managed), so its Debian package; apt waits for the boot's unattended-upgrades
# instead of failing on its lock (apt 1.9.11+: DPkg::Lock::Timeout), and refreshes the AMI's package lists only
# when they are too old to install from. Amazon Linux gets pip, as a Batch node does.
# Never fatal: a failed install leaves the instance without these metrics, never without work.
_APT = "apt-get -o DPkg::Lock::Timeout=300"
PROMETHEUS_CLIENT_COMMAND = {
    "ubuntu": f"{_APT} install -y python3-prometheus-client || {{ {_APT} update && {_APT} install -y "
              "python3-prometheus-client; } || true",
    "amazon-linux": "rpm -q python3-pip >/dev/null 2>&1 || dnf install -y python3-pip || true",
}


def dlami_query(dlami: str | None, track: NeuronTrack = XLA_TRACK) -> AmiQuery:
    """The DLAMI of ``track``'s Neuron SDK release: the track's own, or the flavour ``dlami``'s."""
    try:
        return track.dlami_query(dlami)
    except ValueError as err:
        raise ConfigError("dlami", dlami, str(err)) from None


@jsii.implements(ec2.IConnectable)
class DevInstance(Construct):
    """A development instance: the Neuron DLAMI, an encrypted gp3 root volume, IMDSv2, detailed
    monitoring, an SSM-only role, and the FSx file system at /fsx when one is given.

    :param vpc: the training VPC.
    :param spec: the instance type from the catalog.
    :param vpc_subnets: where the instance goes (the first subnet selected, as with ``ec2.Instance``):
        pick a subnet in an AZ that offers the instance type. Default: the VPC's default selection (its
        private subnets).
    :param dlami: the Neuron DLAMI flavour, as Neuron names them below /aws/service/neuron/dlami/
        (``multi-framework/ubuntu-24.04``, ``base/amazon-linux-2023``, ``pytorch-2.9/ubuntu-24.04``); its
        image of the track's SDK release is found at deploy. Default: the track's DLAMI (versions.py).
    :param root_volume_gib: the encrypted gp3 root volume, GiB. Default: 512.
    :param instance_connect_endpoint: add an EC2 Instance Connect endpoint (SSH from inside the VPC) in
        the instance's subnet. Default: false.
    :param storage: a file system to mount at /fsx. Default: none.
    :param storage_client_group: the security group the file system accepts clients from (the EFA
        group); required with ``storage``. Default: none.
    :param track: the Neuron track whose DLAMI the instance boots. Default: the XLA track.
    :param ami_id: boot this AMI instead (of the same OS as ``dlami``: the root device and user follow
        it). Default: the DLAMI found at deploy.
    :param metrics_workspace: install the Prometheus-format exporters and agent (trainium_cdk/node/
        prometheus_node.py, as on AWS Batch and ParallelCluster compute nodes) and let the instance's role
        aps:RemoteWrite into this workspace alone. Default: none.
    :param metrics_deployment: the ``deployment`` label of the instance's series. Default: the stack's name.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        spec: InstanceSpec,
        vpc_subnets: ec2.SubnetSelection | None = None,
        dlami: str | None = None,
        root_volume_gib: int = DEFAULT_ROOT_VOLUME_GIB,
        instance_connect_endpoint: bool = False,
        storage: LustreMount | None = None,
        storage_client_group: ec2.ISecurityGroup | None = None,
        track: NeuronTrack = XLA_TRACK,
        ami_id: str | None = None,
        metrics_workspace: MetricsWorkspace | None = None,
        metrics_deployment: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if storage is not None and storage_client_group is None:
            raise ConfigError("storage_client_group", None, "the security group FSx accepts clients from")
        if ami_id is not None:
            check_ami_id(ami_id)
        subnet = _first_subnet(vpc, vpc_subnets or ec2.SubnetSelection())
        self.image_query = dlami_query(dlami, track)
        family = self.image_query.os_family
        self.os_user = OS_USER[family]
        self.ami_lookup: AmiLookup | None = None
        machine_image: ec2.IMachineImage
        if ami_id is None:
            self.ami_lookup = AmiLookup(self, "Ami", query=self.image_query)
            machine_image = self.ami_lookup.machine_image
        else:
            machine_image = ImageIdImage(ami_id)

        # Run Command too: `trn submit --backend instance` starts jobs through it.
        self.role = session_manager_role(
            self, "Role", description="Development instance: SSM Session Manager and Run Command only", run_command=True
        )
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Development instance: no inbound from anywhere (SSM); all outbound",
            allow_all_outbound=True,
        )

        user_data = self._user_data(spec, family, storage, metrics_workspace, metrics_deployment)
        self._instance(vpc, subnet, spec, machine_image, user_data, root_volume_gib, ROOT_DEVICE[family])
        if storage_client_group is not None and storage is not None:
            self.instance.add_security_group(storage_client_group)
        self.endpoint: ec2.CfnInstanceConnectEndpoint | None = None
        if instance_connect_endpoint:
            self.endpoint = self._instance_connect_endpoint(vpc, subnet)

    def _user_data(self, spec: InstanceSpec, family: str, storage: LustreMount | None,
                   metrics_workspace: MetricsWorkspace | None, metrics_deployment: str | None) -> ec2.UserData:
        # The setup (the Lustre client, its tuning and the mount, the example, the Prometheus exporters) is one
        # S3 asset, fetched and checked at boot as a Batch node's is: EC2 holds 16 KB of user data, and the setup
        # alone took 15 KB. The user data carries the deploy-time values and the fetch.
        setup = instance_setup(spec, family, storage, metrics_deployment=(
            metrics_deployment or Stack.of(self).stack_name) if metrics_workspace is not None else None)
        values = dict(setup.values)
        if metrics_workspace is not None:
            values[REMOTE_WRITE_VARIABLE] = metrics_workspace.remote_write_url
            metrics_workspace.grant_remote_write(self.role)
        self.setup = s3_assets.Asset(self, "Setup", path=str(_stage(self, setup.program)))
        # The one object, not the asset bucket (Asset.grant_read allows every object of the bucket).
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[
            self.setup.bucket.arn_for_objects(self.setup.s3_object_key)]))
        # The values are the fetched setup's, which the bootstrap sources: unused in this text (shellcheck).
        return ec2.UserData.custom("#!/bin/bash\n# shellcheck disable=SC2034  # the values are the fetched setup's\n"
                                   + node.program(BOOTSTRAP_SCRIPT, {
                                       **values, "NODE_SETUP_URL": self.setup.s3_object_url,
                                       "NODE_SETUP_SHA256": setup.sha256, "NODE_SETUP_REGION": Stack.of(self).region,
                                       "NODE_SETUP_STAYS": "yes"}))

    def _instance(self, vpc: ec2.IVpc, subnet: ec2.ISubnet, spec: InstanceSpec, machine_image: ec2.IMachineImage,
                  user_data: ec2.UserData, root_volume_gib: int, root_device: str) -> None:
        self.instance = ec2.Instance(
            self,
            "Instance",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=[subnet]),
            instance_type=ec2.InstanceType(spec.name),
            machine_image=machine_image,
            role=self.role,
            security_group=self.security_group,
            user_data=user_data,
            block_devices=[
                ec2.BlockDevice(
                    device_name=root_device,
                    volume=ec2.BlockDeviceVolume.ebs(
                        root_volume_gib,
                        encrypted=True,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        delete_on_termination=True,
                    ),
                )
            ],
            # IMDSv2 on the instance itself: require_imdsv2 adds a launch template with a fixed name,
            # which collides between two deployments in one account.
            http_tokens=ec2.HttpTokens.REQUIRED,
            http_endpoint=True,
            http_put_response_hop_limit=METADATA_HOP_LIMIT,  # containers on the instance: no node role
            detailed_monitoring=True,
            propagate_tags_to_volume_on_creation=True,
        )
        # The L2 copies the subnet's AZ into AvailabilityZone; our subnets carry AZ IDs (see
        # TrainingNetwork), which that property rejects. The subnet alone places the instance.
        cfn_instance = self.instance.node.default_child
        assert isinstance(cfn_instance, ec2.CfnInstance)
        cfn_instance.add_property_deletion_override("AvailabilityZone")
        acknowledge(
            self.instance,
            "AwsSolutions::AwsSolutions-EC26",
            None,
            "cdk-nag 3.0.2's EC26 throws on an instance without a launch template in a stack that has one (it reads "
            "the name of an undefined template): an app with TrainiumBatch or TrainiumCluster beside it. The root "
            "volume is encrypted (its block_devices).",
        )
        acknowledge(
            self.instance,
            "AwsSolutions-EC29",
            None,
            "A development instance is disposable by design (code and data live on FSx or in git); "
            "termination protection would make `cdk destroy` fail.",
        )

    def _instance_connect_endpoint(self, vpc: ec2.IVpc, subnet: ec2.ISubnet) -> ec2.CfnInstanceConnectEndpoint:
        endpoint_group = ec2.SecurityGroup(
            self,
            "InstanceConnectSecurityGroup",
            vpc=vpc,
            description="EC2 Instance Connect endpoint: SSH to the development instance only",
            allow_all_outbound=False,
        )
        endpoint_group.add_egress_rule(self.security_group, ec2.Port.tcp(SSH_PORT), "SSH to the instance")
        self.security_group.add_ingress_rule(endpoint_group, ec2.Port.tcp(SSH_PORT), "SSH from the endpoint")
        # L1: aws-cdk-lib has no L2 for EC2 Instance Connect endpoints.
        return ec2.CfnInstanceConnectEndpoint(
            self,
            "InstanceConnectEndpoint",
            subnet_id=subnet.subnet_id,
            security_group_ids=[endpoint_group.security_group_id],
            preserve_client_ip=False,
        )

    @property
    def instance_id(self) -> str:
        return self.instance.instance_id

    @property
    def connections(self) -> ec2.Connections:
        """The instance's ``connections``: its own group (no inbound rule), and ``storage_client_group`` with a
        file system: ``storage.connections.allow_default_port_from(dev)`` would open Lustre to both."""
        return self.instance.connections


def example_commands() -> list[str]:
    """Put the MLP example where its image puts it, so that the README's first command on the instance runs with no
    copy. Written at the first boot only."""
    data = base64.b64encode(gzip.compress(EXAMPLE_SOURCE.read_bytes(), mtime=0)).decode()
    return [
        f"install -d -m 755 {posixpath.dirname(EXAMPLE_PATH)}",
        f"echo {data} | base64 -d | gunzip > {EXAMPLE_PATH}",
        f"chmod 644 {EXAMPLE_PATH}",
    ]


@dataclass(frozen=True)
class InstanceSetup:
    """The instance's setup: ``program`` (no CDK token: an S3 asset whose sha256 is known at synth) and ``values``,
    the header it reads (they may be tokens, such as the file system's DNS name: in the user data)."""

    program: str
    values: dict[str, str]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.program.encode()).hexdigest()


def instance_setup(
    spec: InstanceSpec, family: str, storage: LustreMount | None, *, metrics_deployment: str | None = None
) -> InstanceSetup:
    """With ``storage``: the client's tuning for ``spec`` (its module options before the mount loads the modules),
    the mount at /fsx (and the client for the running kernel at every boot), and the compile cache when the file
    system has none: one that exists keeps its owner and mode (a ParallelCluster head node on the same file system
    gives it to the group its users share: node/neuron_setup.sh). Then the example; with ``metrics_deployment``,
    the Prometheus-format exporters and agent, into the header's PROMETHEUS_REMOTE_WRITE."""
    lines, values = ["#!/bin/bash", "# trainium-cdk: the development instance's setup (constructs/dev_instance.py)"], {}
    if storage is not None:
        cache = f"{SHARED_MOUNT}/{CACHE_DIR_NAME}"
        values.update(lustre_mount_values(family, storage.dns_name, storage.mount_name))
        lines += ["set -euxo pipefail", *lustre_tuning_commands(spec, SHARED_MOUNT),
                  node.program([LUSTRE_SCRIPT, LUSTRE_BOOT_SCRIPT]).rstrip("\n"),
                  f"[ -d {cache} ] || install -d -m 1777 {cache}"]
    lines += example_commands()
    if metrics_deployment is not None:
        lines += [PROMETHEUS_CLIENT_COMMAND[family], *prometheus_setup_lines(deployment=metrics_deployment)]
    return InstanceSetup(program="\n".join(lines) + "\n", values=values)


def _stage(scope: Construct, text: str) -> Path:
    """A rendered file needs a path to become an asset: the cloud assembly's, by content."""
    stage = Stage.of(scope)
    assert stage is not None  # a construct of an app: the app is a stage
    path = Path(stage.asset_outdir) / "trainium-cdk-sources" / hashlib.sha256(text.encode()).hexdigest()[:16]
    path.mkdir(parents=True, exist_ok=True)
    (path / SETUP_FILE_NAME).write_text(text)
    return path / SETUP_FILE_NAME


def _first_subnet(vpc: ec2.IVpc, selection: ec2.SubnetSelection) -> ec2.ISubnet:
    subnets = vpc.select_subnets(
        subnet_type=selection.subnet_type,
        subnet_group_name=selection.subnet_group_name,
        availability_zones=selection.availability_zones,
        one_per_az=selection.one_per_az,
        subnet_filters=selection.subnet_filters,
        subnets=selection.subnets,
    ).subnets
    if not subnets:
        raise ConfigError("vpc_subnets", 0, "a selection of at least one subnet of the VPC")
    return subnets[0]
