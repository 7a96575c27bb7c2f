"""The configuration's models: one per section of the YAML file, and :class:`Config`, the whole.

Each model checks its own fields; the checks across sections are in :mod:`.validation`, the
checks several fields share in :mod:`.fields`.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trainium_cdk.app import backends as backend_registry

# The sections of the backends and of what runs have modules of their own; their names stay importable here.
from trainium_cdk.app.config.backend_settings import (
    BatchSettings,
    EksSettings,
    InstanceSettings,
    ParallelClusterSettings,
)
from trainium_cdk.app.config.base import _Model
from trainium_cdk.app.config.fields import AZ_ID_RULE, AzId, BucketName, LogRetentionDays, Name, check_tags
from trainium_cdk.app.config.notification_settings import NotificationSettings
from trainium_cdk.app.config.observability_settings import ObservabilitySettings
from trainium_cdk.app.config.storage_settings import (  # noqa: F401 (REMOVAL_POLICIES, DataRepository: re-exported)
    REMOVAL_POLICIES,
    DataRepository,
    StorageSettings,
)
from trainium_cdk.app.config.team_settings import TeamSettings
from trainium_cdk.app.config.validation import (
    check_backends,
    check_deployment,
    check_offerings_shape,
    check_single_node_types,
    check_track,
)
from trainium_cdk.app.config.workload_settings import (
    PipelineSettings,
    TrainingJobSettings,
    WorkloadSettings,
)
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts import defaults
from trainium_cdk.facts.addressing import check_subnets_fit, check_vpc_cidr
from trainium_cdk.facts.capacity import CapacityKind, GroupNodes, NodeCapacity
from trainium_cdk.facts.catalog import (
    AZ_ID,
    BUILTIN_INSTANCE_TYPES,
    GP3_MAX_GIB,
    MAX_NODES_PER_GROUP,
    Catalog,
    InstanceSpec,
)
from trainium_cdk.facts.teams import share_identifier
from trainium_cdk.facts.versions import NEURON_TRACKS, NeuronTrack
from trainium_cdk.runtime.jobs import JobSpec

BACKENDS = backend_registry.names()  # trainium_cdk/app/backends.py, in stack order


class Capacity(_Model):
    """How the nodes of a compute group are bought."""

    type: CapacityKind = Field(
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

    @property
    def is_capacity_block(self) -> bool:
        return self.type == "capacity-block"


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
        if self.maximum > MAX_NODES_PER_GROUP:
            raise ConfigError(
                "max_nodes" if self.max_nodes is not None else "nodes", self.maximum,
                f"at most {MAX_NODES_PER_GROUP:,} nodes a group, the most any backend's service takes (EKS clusters "
                "of up to 100,000 nodes; an AWS Batch multi-node job 1,000 by default)",
            )
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
    s3_buckets: tuple[BucketName, ...] = Field(
        (), description="Buckets of other accounts that jobs and nodes use through the S3 gateway endpoint, whose "
        "policy allows the account's own buckets, the configured data buckets and the AWS-owned ones nodes read."
    )

    @model_validator(mode="after")
    def _fits(self) -> NetworkSettings:
        check_vpc_cidr(self.cidr, self.public_subnet_mask, self.private_subnet_mask)
        return self

    def check_fits(self, az_count: int) -> None:
        """Every AZ gets one public and one private subnet: they must fit in the VPC CIDR."""
        check_subnets_fit(self.cidr, self.public_subnet_mask, self.private_subnet_mask, az_count, prefix="network.")


class NeuronSettings(_Model):
    """The Neuron software of every backend: its track (versions.py holds one table per track), and precompile."""

    track: Literal["xla", "native"] = Field(
        "xla",
        description="xla: Neuron 2.29.1, PyTorch/XLA (trn1, trn1n, trn2); native: Neuron 2.34.0, TorchNeuron beta (trn2).",
    )
    precompile_steps: int = Field(
        defaults.PRECOMPILE_STEPS, strict=True,
        description="Steps of precompile's graph extraction (neuron_parallel_compile): every job gets it as "
        "TRN_PRECOMPILE_STEPS, for the training script to stop at; a job's env or precompile_steps overrides it.",
    )

    @field_validator("precompile_steps")
    @classmethod
    def _steps(cls, value: int) -> int:
        if value < 1:
            raise ValueError("a whole number of training steps, 1 or more (Neuron's guide: a few, such as 10)")
        return value


class HuggingFaceSettings(_Model):
    """The Hugging Face hub as jobs use it: a token for gated models and datasets, kept in Secrets Manager."""

    token_secret: str | None = Field(
        None, description="Name of a Secrets Manager secret (in the config's region) holding a Hugging Face token: "
        "the jobs' role may read that secret only, and the recipes' data jobs read it at run time; default: none.",
    )

    @field_validator("token_secret")
    @classmethod
    def _secret_name(cls, value: str | None) -> str | None:
        # Secrets Manager's CreateSecret rule for Name: 1 to 512 of these characters.
        if value is not None and not re.fullmatch(r"[A-Za-z0-9/_+=.@-]{1,512}", value):
            raise ValueError("a Secrets Manager secret name: 1 to 512 letters, digits and /_+=.@- (not an ARN)")
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
    device_memory_gib: int | None = Field(
        None, description="Memory (HBM) of one Neuron device, GiB (Trainium3: 144); default: unknown, and `trn fit` "
        "says it cannot check a job's memory on the type.")
    device_bf16_tflops: float | None = Field(
        None, description="Dense BF16 peak of one Neuron device, TFLOPS (Trainium3: 671); default: unknown, and a "
        "recipe's log lines carry no MFU on the type.")
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
        ("eks",), description="Compute backends to deploy, at least one: " + ", ".join(BACKENDS) + "."
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
    hugging_face: HuggingFaceSettings = Field(default_factory=HuggingFaceSettings)
    notifications: NotificationSettings = Field(default_factory=NotificationSettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)
    pipeline: PipelineSettings | None = Field(None, description="CDK Pipelines deployment; synthesized with -c pipeline=true.")
    instance_offerings: dict[str, dict[str, tuple[str, ...]]] = Field(
        default_factory=dict,
        description="AZ IDs offering an instance type per region, beyond the catalog (`trn azs --write` writes "
        "these): instance type -> region -> AZ IDs, e.g. `{trn2.48xlarge: {us-east-2: [use2-az3]}}`.",
    )
    custom_instance_types: tuple[CustomInstanceType, ...] = Field(
        (), description="Instance types the catalog does not know."
    )
    teams: tuple[TeamSettings, ...] = Field(
        (), description="Teams that share the compute groups, each with its share: AWS Batch queues schedule by fair "
        "share between them and `trn submit --team` names a job's (docs/guide/teams.md); none: one tenant, FIFO queues."
    )
    tags: dict[str, str] = Field(
        default_factory=dict, description="Tags on every resource: at most 40, keys of 1-128 and values of at most 256 "
        "letters, digits, spaces and + - = . _ : / @, neither starting with aws: (reserved)."
    )

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
        if not value:
            # `-c backends=` (empty) deployed the network and storage only, without a word.
            raise ValueError("at least one compute backend; " + one_of(registered))
        for item in value:
            if item not in registered:
                raise ValueError(f"unknown backend {item!r}; " + one_of(registered))
        if len(set(value)) != len(value):
            raise ValueError("each backend at most once")
        return value

    @model_validator(mode="after")
    def _whole(self) -> Config:
        # Once every section is valid on its own: the checks across sections (validation.py).
        check_tags(self.tags)
        names = [team.name for team in self.teams]
        if len(set(names)) != len(names):
            raise ConfigError("teams", names, "each team's name once")
        check_deployment(self)
        check_backends(self)
        check_track(self)
        check_single_node_types(self)
        self.notifications.check_region(self.region)
        return self

    def team_shares(self) -> dict[str, int] | None:
        """Each team's share by its AWS Batch share identifier; None without teams (FIFO queues)."""
        return {share_identifier(team.name): team.share for team in self.teams} or None

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

    def group_nodes(self, group: ComputeGroup) -> GroupNodes:
        """A compute group's nodes as every backend's node construct takes them: the one place a per-group
        field of the config reaches the constructs (docs/contributing/adding-a-backend.md)."""
        capacity = group.capacity
        return GroupNodes(
            group_name=group.name,
            spec=self.spec(group),
            max_nodes=group.maximum,
            root_volume_gib=group.root_volume_gib,
            capacity=NodeCapacity(capacity.type, capacity.reservation_id, capacity.placement_group),
        )

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
            nodes=job.nodes if job.nodes is not None else 1 if job.cpu_only else group.nodes,
            max_nodes=group.maximum,
            processes_per_node=job.processes_per_node,
            cache_set=job.cache_set or group.name,
            precompile=job.precompile,
            precompile_steps=job.precompile_steps if job.precompile_steps is not None else self.neuron.precompile_steps,
            env=job.env,
            retries=job.retries,
            shared_storage=self.storage.enabled,
            neuron_track=self.neuron_track,
            service_account=job.service_account,
            cpu_only=job.cpu_only,
        )

    @property
    def storage_group(self) -> ComputeGroup:
        name = self.storage.compute_group or self.compute_groups[0].name
        return next(g for g in self.compute_groups if g.name == name)

    def stack_name(self, part: str) -> str:
        return f"{self.project}-{part}"
