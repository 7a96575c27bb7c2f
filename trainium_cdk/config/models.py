"""The configuration's models: one per section of the YAML file, and :class:`Config`, the whole.

Each model checks its own fields; the checks across sections are in :mod:`.validation`, the
checks several fields share in :mod:`.fields`.
"""

from __future__ import annotations

import ipaddress
import re
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainium_cdk.addressing import check_ingress_cidr, check_subnets_fit, check_vpc_cidr
from trainium_cdk.catalog import (
    AZ_ID,
    BATCH_MAX_ATTEMPTS,
    BUILTIN_INSTANCE_TYPES,
    GP3_MAX_GIB,
    LUSTRE_COMPRESSION_TYPES,
    LUSTRE_VERSIONS,
    Catalog,
    InstanceSpec,
    LustreCompression,
    LustreDeploymentType,
    LustreVersion,
    check_lustre,
)
from trainium_cdk.config.fields import (
    AZ_ID_RULE, S3_PREFIX, AccountId, AmiId, AzId, Image, LogRetentionDays, Name, RelativePath, S3Prefix, check_az_id,
)
from trainium_cdk import backends as backend_registry
from trainium_cdk import defaults
from trainium_cdk.config.validation import (
    check_backends, check_deployment, check_offerings_shape, check_single_node_types, check_track,
)
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.jobs import JobSpec
from trainium_cdk.names import QUEUE_NAME
from trainium_cdk.versions import DLAMI_FLAVOUR_RULE, NEURON_TRACKS, NeuronTrack, dlami_name

BACKENDS = backend_registry.names()  # trainium_cdk/backends.py, in stack order
# What `cdk destroy` may do to the file system: CloudFormation snapshots only volumes and databases,
# not FSx (DeletionPolicy: Snapshot), so there is no snapshot policy; FSx backups are taken apart.
REMOVAL_POLICIES = defaults.REMOVAL_POLICIES


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Capacity(_Model):
    """How the nodes of a compute group are bought."""

    type: Literal["on-demand", "reservation", "capacity-block"] = Field(
        "on-demand", description="on-demand, an On-Demand Capacity Reservation, or an EC2 Capacity Block for ML."
    )
    reservation_id: str | None = Field(
        None, description="cr-... id of the reservation or capacity block; required unless on-demand."
    )
    placement_group: str | None = Field(
        None, description="Name of the cluster placement group the reservation was made in; default none (a "
        "placement group fights a reservation made without one)."
    )

    @model_validator(mode="after")
    def _reservation(self) -> Capacity:
        if self.type == "on-demand":
            if self.reservation_id is not None:
                raise ConfigError("reservation_id", self.reservation_id, "only with type reservation or capacity-block")
        elif not re.fullmatch(r"^cr-[0-9a-f]{8,17}$", self.reservation_id or ""):
            raise ConfigError(
                "reservation_id", self.reservation_id, f"type {self.type} needs a reservation id like cr-0123456789abcdef0"
            )
        if self.placement_group is not None:
            if self.type == "on-demand":
                raise ConfigError(
                    "placement_group", self.placement_group,
                    "only with a reservation (on-demand groups get a cluster placement group of their own)",
                )
            if not re.fullmatch(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$", self.placement_group):
                raise ConfigError("placement_group", self.placement_group, "an EC2 placement group name")
        return self

    @property
    def reserved(self) -> bool:
        return self.type != "on-demand"


class ComputeGroup(_Model):
    """Nodes of one instance type in one AZ: a node group, a Batch compute environment, a Slurm queue."""

    name: Name = Field("train", description="Short name, lower case: used in resource names and labels.")
    instance_type: str = Field("trn1.32xlarge", description="An instance type of the catalog.")
    nodes: int = Field(2, description="Nodes a job runs on (desired size).")
    min_nodes: int = Field(0, description="Nodes kept when idle (managed EKS node groups; 0 with Karpenter, Batch and Slurm).")
    max_nodes: int | None = Field(None, description="Most nodes the group may scale to; default: nodes.")
    az_ids: tuple[str, ...] = Field(
        ("usw2-az4",), description="AZ ID(s) of the group. An EFA type takes exactly one: EFA needs one subnet."
    )
    capacity: Capacity = Field(default_factory=Capacity)
    root_volume_gib: int = Field(defaults.ROOT_VOLUME_GIB, description="Encrypted gp3 root volume of each node, GiB.")

    @field_validator("az_ids", mode="before")
    @classmethod
    def _one_az(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("root_volume_gib")
    @classmethod
    def _root_volume(cls, value: int) -> int:
        if not 64 <= value <= GP3_MAX_GIB:
            raise ValueError(f"between 64 and {GP3_MAX_GIB} GiB (gp3)")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> ComputeGroup:
        if self.max_nodes is not None and self.max_nodes < 1:
            raise ConfigError("max_nodes", self.max_nodes, "at least 1")
        if self.nodes < 1 or self.nodes > self.maximum:
            raise ConfigError(
                "nodes", self.nodes,
                f"between 1 and the group maximum max_nodes ({self.maximum}); raise max_nodes (-c max_nodes=N) for more",
            )
        if not 0 <= self.min_nodes <= self.nodes:
            raise ConfigError("min_nodes", self.min_nodes, f"between 0 and nodes ({self.nodes})")
        if not self.az_ids:
            raise ConfigError("az_ids", list(self.az_ids), "at least one AZ ID such as usw2-az4")
        for i, az_id in enumerate(self.az_ids):
            if not AZ_ID.fullmatch(az_id):
                raise ConfigError(f"az_ids[{i}]", az_id, AZ_ID_RULE)
        return self

    @property
    def maximum(self) -> int:
        return self.max_nodes if self.max_nodes is not None else self.nodes

    @property
    def az_id(self) -> str:
        """The AZ of the group's compute subnet (the first one for a multi-AZ group without EFA)."""
        return self.az_ids[0]

    @property
    def placement_group(self) -> bool:
        """Whether the nodes use a cluster placement group: one of their own, or the one a reservation
        was made in. A placement group fights a reservation made without it (partial fleets)."""
        return not self.capacity.reserved or self.capacity.placement_group is not None


class NetworkSettings(_Model):
    """The training VPC."""

    cidr: str = Field("10.0.0.0/16", description="IPv4 CIDR of the VPC, /16 to /24.")
    az_ids: tuple[AzId, ...] | None = Field(
        None, description="AZ IDs of the VPC, at least two (EKS needs two); default: the compute AZs plus "
        "other AZs the catalog knows for the instance type."
    )
    public_subnet_mask: int = Field(24, description="Prefix length of each public subnet.")
    private_subnet_mask: int = Field(18, description="Prefix length of each private subnet (pods take many IPs).")
    nat_gateways: Literal["one", "per-az"] = Field("one", description="one NAT gateway, or one per AZ.")
    interface_endpoints: bool = Field(
        False, description="Interface endpoints for ECR, STS, CloudWatch Logs and SSM (the S3 gateway is always on)."
    )
    flow_log_retention_days: LogRetentionDays = Field(defaults.LOG_RETENTION_DAYS, description="Retention of the VPC flow log group, days.")

    @model_validator(mode="after")
    def _fits(self) -> NetworkSettings:
        check_vpc_cidr(self.cidr, self.public_subnet_mask, self.private_subnet_mask)
        return self

    def check_fits(self, az_count: int) -> None:
        """Every AZ gets one public and one private subnet: they must fit in the VPC CIDR."""
        check_subnets_fit(self.cidr, self.public_subnet_mask, self.private_subnet_mask, az_count, prefix="network.")


class DataRepository(_Model):
    """An S3 prefix linked to a path of the file system, imported and exported automatically."""

    bucket_name: str | None = Field(
        None, description="An existing bucket; default: a bucket created (and retained) by the storage stack."
    )
    s3_prefix: S3Prefix = Field("", description="Prefix in the bucket linked to the path; empty: the whole bucket.")
    file_system_path: str = Field("/s3", description="Path in the file system that mirrors the prefix.")
    auto_import: bool = Field(True, description="New, changed and deleted S3 objects show up in the file system.")
    auto_export: bool = Field(True, description="New, changed and deleted files are exported to S3.")

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not re.fullmatch(r"^/[A-Za-z0-9_./-]*$", value) or "//" in value or ".." in value:
            raise ValueError("an absolute path such as /s3 (letters, digits, _ . - /)")
        return value

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", value):
            raise ValueError("an S3 bucket name: 3-63 lower-case letters, digits, '.' and '-'")
        return value


class StorageSettings(_Model):
    """FSx for Lustre shared by every node: datasets, checkpoints, the Neuron compile cache."""

    enabled: bool = Field(True, description="Deploy the storage stack.")
    deployment_type: LustreDeploymentType = Field("PERSISTENT_2", description="FSx deployment type.")
    capacity_gib: int = Field(1200, description="Storage capacity: 1200 GiB or a multiple of 2400 GiB.")
    throughput_mb_per_tib: int | None = Field(
        250, description="PERSISTENT_2 throughput per TiB: 125, 250, 500 or 1000; none for SCRATCH_2."
    )
    lustre_version: LustreVersion = Field(LUSTRE_VERSIONS[0], description="Lustre version.")
    compression: LustreCompression = Field(LUSTRE_COMPRESSION_TYPES[0], description="Data compression.")
    data_repository: DataRepository | None = Field(None, description="Optional S3 data repository association.")
    removal_policy: Literal["retain", "destroy"] = Field(
        "retain", description="What `cdk destroy` does to the file system (and a created bucket)."
    )
    compute_group: str | None = Field(None, description="Group whose subnet holds the file system; default: first.")
    backup_retention_days: int | None = Field(
        None, description="Days FSx keeps its daily automatic backups (0 to 90; 0: none); default 7 for "
        "PERSISTENT_2, 0 for SCRATCH_2 (not backed up by FSx)."
    )

    @field_validator("removal_policy", mode="before")
    @classmethod
    def _removal(cls, value: Any) -> Any:
        if value not in REMOVAL_POLICIES:
            raise ValueError(
                one_of(REMOVAL_POLICIES) + " (CloudFormation cannot snapshot an FSx file system on delete: "
                "retain it, or take an FSx backup before `cdk destroy`)"
            )
        return value

    @model_validator(mode="after")
    def _lustre(self) -> StorageSettings:
        check_lustre(self.deployment_type, self.capacity_gib, self.throughput_mb_per_tib)
        return self


class EksSettings(_Model):
    """The EKS backend: cluster, system nodes and the software on the cluster."""

    endpoint_access: Literal["public-and-private", "private"] = Field(
        "private", description="API server endpoint: private only (reach it from the VPC, a VPN or SSM), or "
        "public and private with public_access_cidrs."
    )
    public_access_cidrs: tuple[str, ...] = Field(
        (), description="IPv4 CIDRs allowed to reach a public endpoint (required with public-and-private)."
    )
    admin_role_arns: tuple[str, ...] = Field(
        (), description="IAM roles given cluster admin through access entries: yours, to use kubectl and trn "
        "(the stack is created by CloudFormation's role, which is the only admin otherwise)."
    )
    access_host: bool = Field(
        True, description="With a private endpoint: a t4g.nano reached by SSM only, through which `trn connect` "
        "forwards the API endpoint to the workstation."
    )
    system_instance_type: str = Field("m7i.large", description="Instance type of the system node group.")
    system_nodes: int = Field(defaults.SYSTEM_NODES, description="Nodes of the system node group (cluster add-ons).")
    neuron_scheduler_extension: bool = Field(False, description="Install the Neuron scheduler extension.")
    neuron_monitor: bool = Field(False, description="Install neuron-monitor with a Prometheus endpoint.")
    log_retention_days: LogRetentionDays = Field(
        defaults.LOG_RETENTION_DAYS, description="Retention of the control-plane log group and the kubectl provider's Lambda logs, days."
    )
    capacity: Literal["karpenter", "managed"] = Field(
        "karpenter", description="How Trainium nodes come and go: karpenter (a NodePool per compute group, "
        "nodes launched for pending pods), or managed (a managed node group per group, scaled by Cluster "
        "Autoscaler). Both start at zero nodes."
    )
    consolidate_after: str = Field(
        "10m", description="How long a Trainium node stays empty before it is removed (Karpenter "
        "consolidateAfter, Cluster Autoscaler scale-down-unneeded-time), such as 10m or 1h."
    )

    @field_validator("consolidate_after")
    @classmethod
    def _consolidate_after(cls, value: str) -> str:
        if not re.fullmatch(r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$", value) or not value:
            raise ValueError("a duration such as 30s, 10m or 1h30m")
        return value

    @field_validator("admin_role_arns")
    @classmethod
    def _roles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arn in value:
            if not re.fullmatch(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$", arn):
                raise ValueError(f"{arn!r} is not an IAM role ARN (arn:aws:iam::123456789012:role/name)")
        return value

    @model_validator(mode="after")
    def _endpoint(self) -> EksSettings:
        for i, cidr in enumerate(self.public_access_cidrs):
            check_ingress_cidr(f"public_access_cidrs[{i}]", cidr, example="203.0.113.0/24")
        if self.endpoint_access == "public-and-private" and not self.public_access_cidrs:
            raise ConfigError(
                "public_access_cidrs", [], "the CIDRs allowed to reach the public endpoint (or endpoint_access: private)"
            )
        if self.endpoint_access == "private" and self.public_access_cidrs:
            raise ConfigError("public_access_cidrs", list(self.public_access_cidrs), "only with endpoint_access: public-and-private")
        return self

    @property
    def access_host_deployed(self) -> bool:
        """The API access host exists: with a private endpoint, unless ``access_host`` turns it off."""
        return self.endpoint_access == "private" and self.access_host

    @field_validator("system_nodes")
    @classmethod
    def _system_nodes(cls, value: int) -> int:
        if not 1 <= value <= defaults.MAX_SYSTEM_NODES:
            raise ValueError(f"between 1 and {defaults.MAX_SYSTEM_NODES}")
        return value


class BatchSettings(_Model):
    """The AWS Batch backend: multi-node parallel jobs on the compute groups."""

    image_uri: Image | None = Field(
        None, description="Training image; default: the MLP example image, built at deploy time (Docker) on the "
        "track's AWS Neuron PyTorch training container (versions.py)."
    )
    command: tuple[str, ...] | None = Field(
        None, description="Command of each node; default: torchrun of the job definition's script parameter (the "
        "example's train.py in the example image, else /fsx/code/train.py) on all NeuronCores."
    )
    job_timeout_minutes: int = Field(
        10080, description="A job attempt is stopped after this many minutes (default 7 days). After an "
        "infrastructure update (a Neuron pin, the AMI) running jobs go on this long, at most 360 (AWS Batch's "
        "limit), then stop and retry from their checkpoint."
    )
    retry_attempts: int = Field(
        defaults.BATCH_RETRY_ATTEMPTS, description=f"Attempts of a job (1 to {BATCH_MAX_ATTEMPTS})."
    )
    log_retention_days: LogRetentionDays = Field(
        defaults.LOG_RETENTION_DAYS, description="Retention of the job log group, days."
    )
    ami_id: AmiId | None = Field(
        None,
        description="AMI of the nodes (ECS-optimized, with the Neuron driver); default: the track's ECS-optimized "
        "AL2023 Neuron AMI, read from AWS's public per-AMI-name parameter (versions.py).",
    )

    @field_validator("retry_attempts")
    @classmethod
    def _attempts(cls, value: int) -> int:
        if not 1 <= value <= BATCH_MAX_ATTEMPTS:
            raise ValueError(f"between 1 and {BATCH_MAX_ATTEMPTS} (AWS Batch limit)")
        return value

    @field_validator("job_timeout_minutes")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if value < 1:
            raise ValueError("at least 1 minute")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not value:
            raise ValueError("the training script and its arguments, or leave it out")
        return value


class ParallelClusterSettings(_Model):
    """The AWS ParallelCluster (Slurm) backend: one Slurm queue per compute group."""

    head_node_instance_type: str = Field("m7i.xlarge", description="Instance type of the Slurm head node.")
    head_node_subnet: Literal["public", "private"] = Field(
        "private", description="Head node in a public subnet, or a private one reached with SSM."
    )
    ssh_key_name: str | None = Field(None, description="EC2 key pair for SSH; default none (SSM only).")
    ssh_allowed_cidr: str | None = Field(
        None, description="IPv4 CIDR allowed to SSH to the head node; default: the VPC CIDR (never the internet)."
    )
    head_node_root_volume_gib: int = Field(200, description="Encrypted gp3 root volume of the head node, GiB.")
    deletion_policy: Literal["Delete", "Retain"] = Field(
        "Delete", description="What deleting the stack does to the cluster (ParallelCluster's DeletionPolicy)."
    )
    custom_ami: str | None = Field(
        None,
        description=(
            "AMI of the compute nodes, built with `pcluster build-image` from "
            "`dist/parallelcluster/<project>-image.yaml`: the Neuron driver is built into it, so scale-up installs "
            "nothing. Default none: ParallelCluster's official AMI, on which every new compute node installs the "
            "Neuron packages and builds the driver (DKMS)."
        ),
    )

    @field_validator("custom_ami")
    @classmethod
    def _custom_ami(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"ami-(?:[0-9a-f]{8}|[0-9a-f]{17})", value):
            raise ValueError(f"{value!r} is not an AMI id such as ami-0123456789abcdef0")
        return value

    @field_validator("head_node_instance_type")
    @classmethod
    def _head_node_type(cls, value: str) -> str:
        if not re.fullmatch(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", value):
            raise ValueError("an EC2 instance type such as m7i.xlarge")
        return value

    @field_validator("ssh_key_name")
    @classmethod
    def _key_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,255}", value):
            raise ValueError("an EC2 key pair name: 1 to 255 letters, digits, '.', '_' and '-'")
        return value

    @field_validator("ssh_allowed_cidr")
    @classmethod
    def _ssh_cidr(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                check_ingress_cidr("ssh_allowed_cidr", value, example="203.0.113.0/24")
            except ConfigError as error:
                raise ValueError(error.allowed) from None  # pydantic names the field
        return value

    @field_validator("head_node_root_volume_gib")
    @classmethod
    def _head_root(cls, value: int) -> int:
        if not 40 <= value <= GP3_MAX_GIB:
            raise ValueError(f"between 40 and {GP3_MAX_GIB} GiB (gp3; the ParallelCluster AMI needs 40)")
        return value


class InstanceSettings(_Model):
    """The single development instance."""

    instance_type: str = Field("trn1.2xlarge", description="An instance type of the catalog.")
    az_id: AzId | None = Field(None, description="AZ ID; default: the first VPC AZ known to offer the type.")
    root_volume_gib: int = Field(
        defaults.ROOT_VOLUME_GIB, description="Encrypted gp3 root volume, GiB (Neuron asks for 512 or more)."
    )
    dlami: str | None = Field(
        None,
        description="Neuron DLAMI flavour such as multi-framework/ubuntu-24.04 or base/amazon-linux-2023; its image "
        "of the track's Neuron SDK release is found at deploy (by name and description) and kept. Default: the "
        "track's DLAMI (versions.py).",
    )
    ami_id: AmiId | None = Field(
        None, description="AMI to boot instead (of the same OS as dlami); default: the DLAMI found at deploy."
    )
    instance_connect_endpoint: bool = Field(False, description="Add an EC2 Instance Connect endpoint.")
    mount_storage: bool = Field(True, description="Mount the FSx file system at /fsx when storage is deployed.")

    @field_validator("az_id")
    @classmethod
    def _az_id(cls, value: str | None) -> str | None:
        return value if value is None else check_az_id(value)

    @field_validator("root_volume_gib")
    @classmethod
    def _root_volume(cls, value: int) -> int:
        low = defaults.ROOT_VOLUME_GIB
        if not low <= value <= GP3_MAX_GIB:
            raise ValueError(f"between {low} and {GP3_MAX_GIB} GiB (the Neuron setup guides ask for at least {low} GiB)")
        return value

    @field_validator("dlami")
    @classmethod
    def _dlami(cls, value: str | None) -> str | None:
        if value is not None and dlami_name(value) is None:
            raise ValueError(DLAMI_FLAVOUR_RULE)
        return value


class NeuronSettings(_Model):
    """The Neuron software track of every backend (versions.py holds one table per track)."""

    track: Literal["xla", "native"] = Field(
        "xla",
        description="xla: Neuron 2.29.1, PyTorch/XLA (trn1, trn1n, trn2); native: Neuron 2.33.0, TorchNeuron beta (trn2).",
    )


# The example image's script; torchrun runs it with python (a command starting with python3 works too).
EXAMPLE_COMMAND = ("/opt/trainium-cdk/examples/mlp/train.py",)


class TrainingJobSettings(_Model):
    """A training job the EKS stack runs (and `make synth` writes to dist/eks/workloads)."""

    name: str = Field(description="Job name, a DNS label of at most 40 characters.")
    group: str | None = Field(None, description="Compute group it runs on; default: the first.")
    nodes: int | None = Field(None, description="Nodes; default: the group's nodes. Above 1: a gang-scheduled job.")
    processes_per_node: int | None = Field(None, description="Processes per node; default: every NeuronCore.")
    command: tuple[str, ...] = Field(
        EXAMPLE_COMMAND, description="Program and arguments as one process runs them (train.py ...); the launcher "
        "runs them under torchrun on every node."
    )
    image: Image | None = Field(None, description="Image; default: workloads.image.")
    cache_set: str | None = Field(
        None, description="Neuron compile cache directory /fsx/neuron-cache/<cache_set>; default: the group's name."
    )
    precompile: bool = Field(False, description="Run under neuron_parallel_compile first, then train.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment.")
    retries: int = Field(3, description="Restarts of the whole job after a failure.")


class DataLoaderSettings(_Model):
    """A Job that copies an S3 prefix into the file system (for file systems without a data repository)."""

    s3_uri: str = Field(description="s3://bucket/prefix to copy.")
    path: RelativePath = Field("datasets", description="Directory under /fsx.")

    @field_validator("s3_uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        bucket, _, prefix = value.removeprefix("s3://").partition("/")
        if not (value.startswith("s3://") and re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket)
                and S3_PREFIX.fullmatch(prefix)):
            raise ValueError("an S3 URI such as s3://my-bucket/datasets/ (the prefix in S3's safe characters)")
        return value

    @property
    def bucket(self) -> str:
        return self.s3_uri.removeprefix("s3://").split("/", 1)[0]


class WorkloadSettings(_Model):
    """What runs on the EKS cluster beyond the device plugins."""

    image: Image | None = Field(
        None, description="Training image; default: the MLP example image the EKS stack builds (dist/: ${TRAINING_IMAGE})."
    )
    jobs: tuple[TrainingJobSettings, ...] = Field((), description="Training jobs the stack runs on deploy.")
    volcano: bool = Field(True, description="Install Volcano (gang scheduling, needed by multi-node jobs) and its queue.")
    queue: str = Field(QUEUE_NAME, description="The Volcano queue.")
    data_loader: DataLoaderSettings | None = Field(None, description="Copy an S3 prefix into /fsx.")
    tensorboard: bool = Field(False, description="TensorBoard on the file system's runs/ directory (ClusterIP).")
    shell: bool = Field(False, description="An interactive pod with /fsx mounted.")


class PipelineEnvironment(_Model):
    """One deployment target of the pipeline: an account in the config's region."""

    name: Name = Field(description="Stage name, such as dev or prod.")
    account: AccountId = Field(description="12-digit AWS account id, bootstrapped to trust the pipeline account.")
    manual_approval: bool = Field(False, description="Wait for a manual approval in the pipeline before this stage.")


class PipelineSettings(_Model):
    """CDK Pipelines deployment (`cdk synth -c pipeline=true`): a self-mutating pipeline in CodePipeline."""

    repository: str = Field(description="Source repository as owner/name.")
    account: AccountId = Field(description="12-digit AWS account id of the pipeline itself (stages trust it).")
    branch: str = Field("main", description="Branch that triggers the pipeline.")
    connection_arn: str = Field(description="ARN of the CodeConnections connection to the repository.")
    environments: tuple[PipelineEnvironment, ...] = Field(description="Stages in order, each an account.")

    @field_validator("repository")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not re.fullmatch(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", value):
            raise ValueError("owner/name of the repository")
        return value

    @field_validator("connection_arn")
    @classmethod
    def _connection(cls, value: str) -> str:
        if not re.fullmatch(r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z0-9-]+:[0-9]{12}:connection/.+$", value):
            raise ValueError("a CodeConnections connection ARN (arn:aws:codeconnections:REGION:ACCOUNT:connection/ID)")
        return value

    @field_validator("environments")
    @classmethod
    def _environments(cls, value: tuple[PipelineEnvironment, ...]) -> tuple[PipelineEnvironment, ...]:
        names = [e.name for e in value]
        if not value or len(set(names)) != len(names):
            raise ValueError("at least one environment, each name once")
        return value


class CustomInstanceType(_Model):
    """An instance type the catalog does not know, with the facts the constructs need."""

    name: str = Field(description="EC2 instance type name.")
    accelerator: str = Field("Trainium", description="Accelerator, for documentation.")
    neuron_devices: int = Field(description="Neuron devices (aws.amazon.com/neuron per node).")
    neuron_cores: int = Field(description="NeuronCores a process can own: torchrun --nproc_per_node.")
    efa_interfaces: int = Field(0, description="EFA interfaces, one per network card; 0 for none.")
    network_cards: int = Field(1, description="Network cards of the instance.")
    vcpus: int = Field(description="vCPUs.")
    memory_gib: int = Field(description="Memory, GiB.")
    network_gbps: int = Field(25, description="Network bandwidth, Gbps.")
    offered_az_ids: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Region -> AZ IDs known to offer the type."
    )

    def spec(self) -> InstanceSpec:
        return InstanceSpec(**self.model_dump())


class Config(_Model):
    """A whole deployment."""

    project: Name = Field("trainium", description="Prefix of every stack name.")
    region: str = Field("us-west-2", description="AWS region of every stack.")
    backends: tuple[str, ...] = Field(
        ("eks",), description="Compute backends to deploy: " + ", ".join(BACKENDS) + "."
    )
    network: NetworkSettings = Field(default_factory=NetworkSettings)
    compute_groups: tuple[ComputeGroup, ...] = Field((ComputeGroup(),), description="At least one compute group.")
    storage: StorageSettings = Field(default_factory=StorageSettings)
    eks: EksSettings = Field(default_factory=EksSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    parallelcluster: ParallelClusterSettings = Field(default_factory=ParallelClusterSettings)
    instance: InstanceSettings = Field(default_factory=InstanceSettings)
    workloads: WorkloadSettings = Field(default_factory=WorkloadSettings)
    neuron: NeuronSettings = Field(default_factory=NeuronSettings)
    pipeline: PipelineSettings | None = Field(None, description="CDK Pipelines deployment; synthesized with -c pipeline=true.")
    instance_offerings: dict[str, dict[str, tuple[str, ...]]] = Field(
        default_factory=dict,
        description="AZ IDs offering an instance type per region, beyond the catalog (`trn azs --write` writes "
        "these): instance type -> region -> AZ IDs, e.g. `{trn2.48xlarge: {us-east-2: [use2-az3]}}`.",
    )
    custom_instance_types: tuple[CustomInstanceType, ...] = Field(
        (), description="Instance types the catalog does not know."
    )
    tags: dict[str, str] = Field(default_factory=dict, description="Tags on every resource.")

    @field_validator("instance_offerings", mode="before")
    @classmethod
    def _offerings_shape(cls, value: Any) -> Any:
        """The shape, checked here: pydantic alone takes region -> type (both strings) without a word."""
        check_offerings_shape(value)
        return value

    @field_validator("backends", mode="before")
    @classmethod
    def _backends(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        registered = backend_registry.names()
        for item in value:
            if item not in registered:
                raise ValueError(f"unknown backend {item!r}; " + one_of(registered))
        if len(set(value)) != len(value):
            raise ValueError("each backend at most once")
        return value

    @model_validator(mode="after")
    def _whole(self) -> Config:
        # Once every section is valid on its own: the checks across sections (validation.py).
        check_deployment(self)
        check_backends(self)
        check_track(self)
        check_single_node_types(self)
        return self

    @property
    def neuron_track(self) -> NeuronTrack:
        return NEURON_TRACKS[self.neuron.track]

    # -- derived facts ------------------------------------------------------------------------------

    @cached_property
    def catalog(self) -> Catalog:
        catalog = Catalog(BUILTIN_INSTANCE_TYPES)
        for i, custom in enumerate(self.custom_instance_types):
            try:
                catalog.register(custom.spec())
            except ConfigError as err:
                raise ConfigError(f"custom_instance_types[{i}]", custom.name, err.allowed) from None
        return catalog

    def spec(self, group: ComputeGroup) -> InstanceSpec:
        return self.catalog.get(group.instance_type)

    def offered_az_ids(self, spec: InstanceSpec) -> tuple[str, ...] | None:
        known = spec.az_ids_in(self.region)
        extra = self.instance_offerings.get(spec.name, {}).get(self.region)
        if known is None and extra is None:
            return None
        return tuple(dict.fromkeys((known or ()) + tuple(extra or ())))

    @property
    def vpc_az_ids(self) -> tuple[str, ...]:
        """The VPC's AZs: as configured, or the compute AZs followed by other AZs offering their types."""
        if self.network.az_ids is not None:
            return self.network.az_ids
        compute = list(dict.fromkeys(a for g in self.compute_groups for a in g.az_ids))
        spare = [
            a
            for g in self.compute_groups
            for a in self.offered_az_ids(self.catalog.get(g.instance_type)) or ()
            if a not in compute
        ]
        return tuple(compute + list(dict.fromkeys(spare))[: max(0, 2 - len(compute))])

    def dev_instance_az_id(self) -> str:
        """``instance.az_id``, or the first AZ of the VPC known to offer the instance type."""
        settings = self.instance
        spec = self.catalog.get(settings.instance_type, field="instance.instance_type")
        offered = self.offered_az_ids(spec)
        vpc_az_ids = self.vpc_az_ids
        if settings.az_id is not None:
            if settings.az_id not in vpc_az_ids:
                raise ConfigError("instance.az_id", settings.az_id, "an AZ ID of the VPC; " + one_of(vpc_az_ids))
            if offered is not None and settings.az_id not in offered:
                raise ConfigError(
                    "instance.az_id", settings.az_id,
                    f"does not offer {spec.name} (per the catalog and instance_offerings); " + one_of(offered),
                )
            return settings.az_id
        for az_id in vpc_az_ids:
            if offered and az_id in offered:
                return az_id
        raise ConfigError(
            "instance.az_id", None,
            f"no AZ of the VPC ({', '.join(vpc_az_ids)}) is known to offer {spec.name}: set instance.az_id, list "
            f"the type's AZs under instance_offerings (`trn azs`), or add one of them to network.az_ids",
        )

    def group(self, name: str | None) -> ComputeGroup:
        """A compute group by name; None: the first."""
        return next(g for g in self.compute_groups if name is None or g.name == name)

    def job_spec(self, job: TrainingJobSettings, *, image: str) -> JobSpec:
        """The validated job a TrainingJobSettings describes, on its group's instance type."""
        group = self.group(job.group)
        return JobSpec(
            name=job.name,
            instance=self.spec(group),
            group=group.name,
            command=job.command,
            image=job.image or self.workloads.image or image,
            nodes=job.nodes if job.nodes is not None else group.nodes,
            max_nodes=group.maximum,
            processes_per_node=job.processes_per_node,
            cache_set=job.cache_set or group.name,
            precompile=job.precompile,
            env=job.env,
            retries=job.retries,
            shared_storage=self.storage.enabled,
            neuron_track=self.neuron_track,
        )

    @property
    def storage_group(self) -> ComputeGroup:
        name = self.storage.compute_group or self.compute_groups[0].name
        return next(g for g in self.compute_groups if g.name == name)

    def stack_name(self, part: str) -> str:
        return f"{self.project}-{part}"
