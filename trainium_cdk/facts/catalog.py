"""Instance facts: the only place in the project where they live.

Everything that depends on an instance type (EFA interfaces in a launch template, Neuron devices in a
pod request, `--nproc_per_node`, device paths in a Batch job) reads them from here. The numbers come
from the EC2 and Neuron documentation (see shared/REFERENCE.md); a user can register a type the
catalog does not know with :meth:`Catalog.register` or the config's ``custom_instance_types``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

from trainium_cdk.errors import ConfigError, one_of

NEURON_RESOURCE = "aws.amazon.com/neuron"
NEURONCORE_RESOURCE = "aws.amazon.com/neuroncore"
EFA_RESOURCE = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class NetworkInterfaceSlot:
    """Where one EFA interface goes in a launch template."""

    network_card_index: int
    device_index: int


@dataclass(frozen=True)
class InstanceSpec:
    """What the project needs to know about one instance type, without calling AWS.

    ``neuron_cores`` is the number of NeuronCores one process can own at the default logical
    NeuronCore setting: the default ``--nproc_per_node`` of a job. ``offered_az_ids`` maps a region
    to the AZ IDs known to offer the type; a region missing here is unknown, not excluded.
    ``device_memory_gib`` and ``device_bf16_tflops`` are one Neuron device's memory (HBM) and dense BF16
    peak (None: unknown, and `trn fit` says it cannot check the type).
    """

    name: str
    accelerator: str
    neuron_devices: int
    neuron_cores: int
    efa_interfaces: int
    network_cards: int
    vcpus: int
    memory_gib: int
    network_gbps: int
    for_training: bool = True
    offered_az_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    device_memory_gib: int | None = None
    device_bf16_tflops: float | None = None

    def __post_init__(self) -> None:
        for name in ("neuron_devices", "neuron_cores", "vcpus", "memory_gib", "network_cards"):
            if getattr(self, name) < 1:
                raise ConfigError(f"instance type {self.name}: {name}", getattr(self, name), "must be at least 1")
        if not 0 <= self.efa_interfaces <= self.network_cards:
            raise ConfigError(
                f"instance type {self.name}: efa_interfaces",
                self.efa_interfaces,
                f"must be between 0 and network_cards ({self.network_cards}): one EFA interface per card",
            )
        object.__setattr__(
            self, "offered_az_ids", MappingProxyType({r: tuple(a) for r, a in self.offered_az_ids.items()})
        )

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def has_efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def efa_slots(self) -> tuple[NetworkInterfaceSlot, ...]:
        """One EFA interface per network card: card 0 is the primary (device 0), every other card
        carries its interface on device index 1, as current EC2 guidance for multi-card instances says."""
        return tuple(
            NetworkInterfaceSlot(network_card_index=card, device_index=0 if card == 0 else 1)
            for card in range(self.efa_interfaces)
        )

    @property
    def neuron_core_counts(self) -> tuple[int, ...]:
        """The NeuronCore counts a healthy node shows (node/health_check.py): ``neuron_cores``, and on Trainium2 and
        later, whose logical NeuronCore is two physical ones at the default LNC=2, the physical count as well
        (the driver's sysfs counts physical cores; neuron-ls follows the LNC setting)."""
        if self.accelerator in ("Trainium", "Inferentia2"):
            return (self.neuron_cores,)
        return (self.neuron_cores, 2 * self.neuron_cores)

    @property
    def core_memory_gib(self) -> float | None:
        """Device memory one process owns: one NeuronCore at the default logical NeuronCore size (trn2 at LNC=2:
        96 GiB x 16 / 64 = 24 GiB)."""
        if self.device_memory_gib is None:
            return None
        return self.device_memory_gib * self.neuron_devices / self.neuron_cores

    @property
    def peak_bf16_tflops(self) -> float | None:
        """Dense BF16 peak of the whole instance (every Neuron device), the denominator of a job's MFU."""
        return None if self.device_bf16_tflops is None else self.device_bf16_tflops * self.neuron_devices

    @property
    def neuron_device_paths(self) -> tuple[str, ...]:
        return tuple(f"/dev/neuron{i}" for i in range(self.neuron_devices))

    @property
    def efa_device_paths(self) -> tuple[str, ...]:
        return tuple(f"/dev/infiniband/uverbs{i}" for i in range(self.efa_interfaces))

    def az_ids_in(self, region: str) -> tuple[str, ...] | None:
        """AZ IDs known to offer this type in ``region``, or None when the catalog does not know."""
        return self.offered_az_ids.get(region)


# Public Neuron samples name these AZ IDs for Trn1 (AZ names differ per account; IDs do not).
_TRN1_AZ_IDS = {"us-east-1": ("use1-az6", "use1-az5"), "us-west-2": ("usw2-az4", "usw2-az3")}

# One device's memory and dense BF16 peak. Trainium: 32 GiB, 190 TFLOPS (Neuron docs, "Trainium Architecture":
# "190 FP16/BF16/cFP8/TF32 TFLOPS", "32 GiB of device memory"; trn1.32xlarge 3,040 TFLOPS and 512 GiB, "Trn1/Trn1n
# Architecture"). Trainium2: 96 GiB, 667 TFLOPS ("Trainium2 Architecture": "667 BF16/FP16/TF32 TFLOPS", "96 GiB of
# device memory"). Inferentia2 is not for training here: left unknown.
BUILTIN_INSTANCE_TYPES: tuple[InstanceSpec, ...] = (
    InstanceSpec(
        name="trn1.2xlarge", accelerator="Trainium", neuron_devices=1, neuron_cores=2, efa_interfaces=0,
        network_cards=1, vcpus=8, memory_gib=32, network_gbps=25, offered_az_ids=_TRN1_AZ_IDS,
        device_memory_gib=32, device_bf16_tflops=190.0,
    ),
    InstanceSpec(
        name="trn1.32xlarge", accelerator="Trainium", neuron_devices=16, neuron_cores=32, efa_interfaces=8,
        network_cards=8, vcpus=128, memory_gib=512, network_gbps=800, offered_az_ids=_TRN1_AZ_IDS,
        device_memory_gib=32, device_bf16_tflops=190.0,
    ),
    InstanceSpec(
        name="trn1n.32xlarge", accelerator="Trainium", neuron_devices=16, neuron_cores=32, efa_interfaces=16,
        network_cards=16, vcpus=128, memory_gib=512, network_gbps=1600, offered_az_ids=_TRN1_AZ_IDS,
        device_memory_gib=32, device_bf16_tflops=190.0,
    ),
    # Trainium2: 128 physical NeuronCores, 64 logical at the default LNC=2. AZs not in the catalog:
    # `trn azs` writes them into the config.
    InstanceSpec(
        name="trn2.48xlarge", accelerator="Trainium2", neuron_devices=16, neuron_cores=64, efa_interfaces=16,
        network_cards=16, vcpus=192, memory_gib=2048, network_gbps=3200,
        device_memory_gib=96, device_bf16_tflops=667.0,
    ),
    InstanceSpec(
        name="trn2u.48xlarge", accelerator="Trainium2", neuron_devices=16, neuron_cores=64, efa_interfaces=16,
        network_cards=16, vcpus=192, memory_gib=2048, network_gbps=3200,
        device_memory_gib=96, device_bf16_tflops=667.0,
    ),
    # Trn3 (Trainium3) is not here: EC2 publishes no Trn3 instance type to key an entry on, nor its EFA
    # layout (checked 2026-11). What is public:
    # - 8 NeuronCore-v4 per Trainium3, with logical NeuronCores as on Trainium2 (Neuron docs, Trainium3
    #   Architecture:
    #   https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.1/about-neuron/arch/neuron-hardware/trainium3.html).
    # - Trn3 comes as UltraServers: Gen1 of 4 servers x 16 Trainium3 (768 vCPUs, 8,192 GiB, 12,800 Gbps
    #   EFA per UltraServer), Gen2 of 36 servers x 4 (2,304 vCPUs, 27,648 GiB, 28,800 Gbps) (Neuron docs,
    #   Amazon EC2 Trn3 Architecture:
    #   https://awsdocs-neuron.readthedocs-hosted.com/en/v2.28.1/about-neuron/arch/neuron-hardware/trn3-arch.html);
    #   per server that divides to 192 / 2,048 GiB / 3,200 Gbps and 64 / 768 GiB / 800 Gbps, which no page states.
    # - TorchNeuron (the native track) runs on Trn2 and Trn3 (Neuron 2.33.0 release notes, TorchNeuron).
    # Missing: the instance type names (the EC2 API model of botocore 1.44.5, cfn-lint 1.58 and moto 5.2.5
    # list no trn3 type; the Neuron driver's platform table, aws-neuron-driver v4/neuron_dhal_v4.c, names
    # trn3.48xlarge, trn3p.48xlarge, trn3e.24xlarge and trn3pd98.3xlarge beside internal -dev/-es variants,
    # none of them in EC2's documentation), EFA interfaces and network cards per type, AZs and prices.
    # Until EC2 publishes them, a Trn3 type goes under the config's custom_instance_types with the facts
    # `aws ec2 describe-instance-types` gives in the account that can launch it.
    InstanceSpec(
        name="inf2.xlarge", accelerator="Inferentia2", neuron_devices=1, neuron_cores=2, efa_interfaces=0,
        network_cards=1, vcpus=4, memory_gib=16, network_gbps=15, for_training=False,
    ),
    InstanceSpec(
        name="inf2.8xlarge", accelerator="Inferentia2", neuron_devices=1, neuron_cores=2, efa_interfaces=0,
        network_cards=1, vcpus=32, memory_gib=128, network_gbps=25, for_training=False,
    ),
    InstanceSpec(
        name="inf2.24xlarge", accelerator="Inferentia2", neuron_devices=6, neuron_cores=12, efa_interfaces=0,
        network_cards=1, vcpus=96, memory_gib=384, network_gbps=50, for_training=False,
    ),
    InstanceSpec(
        name="inf2.48xlarge", accelerator="Inferentia2", neuron_devices=12, neuron_cores=24, efa_interfaces=0,
        network_cards=1, vcpus=192, memory_gib=768, network_gbps=100, for_training=False,
    ),
)

SUPPORTED_TRAINING_TYPES: tuple[str, ...] = tuple(s.name for s in BUILTIN_INSTANCE_TYPES if s.for_training)
EFA_TRAINING_TYPES: tuple[str, ...] = tuple(
    s.name for s in BUILTIN_INSTANCE_TYPES if s.for_training and s.has_efa
)


class Catalog:
    """The instance types a deployment knows: the built-in ones plus those a user registers."""

    def __init__(self, specs: Iterable[InstanceSpec] = BUILTIN_INSTANCE_TYPES) -> None:
        self._specs: dict[str, InstanceSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: InstanceSpec) -> None:
        if spec.name in self._specs and self._specs[spec.name] != spec:
            raise ConfigError("custom_instance_types[].name", spec.name, "already in the catalog with other facts")
        self._specs[spec.name] = spec

    def get(self, name: str, *, field: str = "instance_type") -> InstanceSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise ConfigError(field, name, "unknown instance type; " + one_of(self.names())) from None

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._specs))

    def __iter__(self):
        return iter(self._specs.values())

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def neuron_types(self) -> tuple[str, ...]:
        """Every type with Neuron devices: where the Neuron device plugin must run."""
        return self.names()

    def efa_types(self) -> tuple[str, ...]:
        """Every type with EFA: the only nodes where the EFA device plugin may run."""
        return tuple(name for name in self.names() if self._specs[name].has_efa)


DEFAULT_CATALOG = Catalog()


# vCPU and memory (GiB) of the general-purpose types the system node group and the ParallelCluster
# head node may use (EC2 instance type pages): what a pod on those nodes can request at most.
GENERAL_PURPOSE_TYPES: Mapping[str, tuple[int, int]] = MappingProxyType({
    f"{family}.{size}": (vcpus, vcpus * 4)
    for family in ("m6i", "m7i", "m7a", "m8i")
    for size, vcpus in (("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16), ("8xlarge", 32))
})


def node_capacity(name: str, catalog: Catalog = DEFAULT_CATALOG) -> tuple[int, int]:
    """(vCPUs, memory GiB) of a node type: a Neuron type of the catalog or a general-purpose type."""
    if name in catalog:
        spec = catalog.get(name)
        return spec.vcpus, spec.memory_gib
    try:
        return GENERAL_PURPOSE_TYPES[name]
    except KeyError:
        raise ConfigError("instance_type", name, "unknown instance type; " + one_of(
            (*catalog.names(), *GENERAL_PURPOSE_TYPES))) from None


@dataclass(frozen=True)
class FabricReference:
    """What the fabric check (trainium_cdk/runtime/fabric.py) holds a type's bus bandwidth between hosts to: a figure
    in GiB/s (nccom-test's GB/s), where it comes from, and the fraction of it that passes. ``provisional``: no
    published Neuron figure, so the EFA line rate stands in and the fraction is a guess until a known-good pair
    of nodes is measured and recorded here with its date."""

    busbw_gib_s: float
    source: str
    fraction: float
    provisional: bool


# Published Neuron figures of bus bandwidth between two hosts (read 2026-11-27). The only one: the nccom-test
# guide's "Multiple Instances Example" (aws-neuron/aws-neuron-sdk, tools/neuron-sys-tools/nccom-test.rst, commit
# a3247f5b8c305f9b70a19993acb306122e736eec): a 64-rank fp32 all-reduce on two trn1 instances peaks at 47.09 GB/s
# busbw at 1 GiB. The guide's performance pages (about-neuron/benchmarks) publish model throughput, no collectives.
# Bus bandwidth normalizes for the operation (the guide's "Bus Bandwidth Calculation"), so all-gather and
# reduce-scatter are held to the all-reduce figure; 80%: the guide warns its example figures may be dated.
FABRIC_REFERENCES: Mapping[str, FabricReference] = MappingProxyType({
    "trn1.32xlarge": FabricReference(
        47.09, "Neuron nccom-test guide, Multiple Instances Example: 2 x trn1.32xlarge, 64-rank all-reduce "
        "at 1 GiB (tools/neuron-sys-tools/nccom-test.rst, read 2026-11-27)", 0.8, False),
})
# No published figure: this fraction of the EFA line rate, provisional (the check's pass line before this table).
PROVISIONAL_LINE_RATE_FRACTION = 0.4
# Where a figure for the other EFA types (trn1n.32xlarge, trn2.48xlarge, trn2u.48xlarge) was looked for, and when.
# None publishes inter-node bus bandwidth for them: the nccom-test guide (awsdocs-neuron v2.29.0 and latest,
# tools/neuron-sys-tools/nccom-test.html) still has one multi-instance example, the trn1 pair above; awsome-distributed-
# training's micro-benchmarks/nccom-tests (aws-samples/awsome-distributed-training) documents the tool's arguments and
# output, no results; AI on SageMaker HyperPod's "NCCOM Tests" pages (awslabs.github.io/ai-on-sagemaker-hyperpod)
# show how to run it on Slurm and EKS, no figures; the Neuron collectives release notes (aws-neuronx-collectives:
# trn1n's 16 EFA devices, hierarchical all-reduce) give features and latency gains, no bandwidth. Until a known-good
# pair of such nodes is measured and recorded above with its date, their pass line stays provisional.
PROVISIONAL_SEARCH = ("searched 2026-11-27: the Neuron nccom-test guide (v2.29.0), aws-samples/awsome-distributed-"
                      "training micro-benchmarks/nccom-tests, AI on SageMaker HyperPod's NCCOM tests, the Neuron "
                      "collectives release notes; none publishes one")


def fabric_reference(spec: InstanceSpec) -> FabricReference:
    """The type's published figure, else its EFA line rate with the provisional fraction."""
    if spec.name in FABRIC_REFERENCES:
        return FABRIC_REFERENCES[spec.name]
    return FabricReference(
        spec.network_gbps * 1e9 / 8 / 1024**3,
        f"no published Neuron figure for {spec.name} ({PROVISIONAL_SEARCH}): its EFA line rate, {spec.network_gbps} "
        "Gbps (EC2 instance types)",
        PROVISIONAL_LINE_RATE_FRACTION, True)


# AWS service facts the config checks against and the constructs and charts use.
# FSx for Lustre: what each deployment type accepts (FSx API reference).
# The config's fields are Literals of these (a type checker reads a Literal's values, not a tuple's): the
# tuples below are read from them.
LustreDeploymentType = Literal["PERSISTENT_2", "SCRATCH_2"]
LustreVersion = Literal["2.15"]  # what FSx creates today; the first is the default
LustreCompression = Literal["LZ4", "NONE"]  # dataCompressionType
LUSTRE_THROUGHPUT_MB_PER_TIB: dict[str, tuple[int, ...]] = {"PERSISTENT_2": (125, 250, 500, 1000), "SCRATCH_2": ()}
LUSTRE_CAPACITY_STEP_GIB = 2400
LUSTRE_MIN_CAPACITY_GIB = 1200
LUSTRE_MAX_CAPACITY_GIB = 2_400 * 1_000
LUSTRE_VERSIONS = get_args(LustreVersion)
LUSTRE_COMPRESSION_TYPES = get_args(LustreCompression)

# CloudWatch Logs retention periods, days -> the name of aws_logs.RetentionDays.
LOG_RETENTION_DAYS = dict(
    zip(
        (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653),
        (
            "ONE_DAY", "THREE_DAYS", "FIVE_DAYS", "ONE_WEEK", "TWO_WEEKS", "ONE_MONTH", "TWO_MONTHS",
            "THREE_MONTHS", "FOUR_MONTHS", "FIVE_MONTHS", "SIX_MONTHS", "ONE_YEAR", "THIRTEEN_MONTHS",
            "EIGHTEEN_MONTHS", "TWO_YEARS", "THREE_YEARS", "FIVE_YEARS", "SIX_YEARS", "SEVEN_YEARS",
            "EIGHT_YEARS", "NINE_YEARS", "TEN_YEARS",
        ),
        strict=True,
    )
)

# Region codes and AZ IDs (AWS Regions and Availability Zones guide): an AZ ID is the region's prefix
# (us-west-2 -> usw2) and a number, the same in every account, unlike AZ names.
REGION_CODE = re.compile(r"^([a-z]{2})-([a-z]+)-([0-9])$")
AZ_ID = re.compile(r"^([a-z]+[0-9])-az([0-9]+)$")
# EC2 image ids: 8 hex digits (older) or 17; matched whole (re.fullmatch).
AMI_ID = re.compile(r"ami-[0-9a-f]{8,17}")
AMI_ID_RULE = "an AMI id such as ami-0123456789abcdef0"


def check_ami_id(value: str, field: str = "ami_id") -> str:
    if not isinstance(value, str) or not AMI_ID.fullmatch(value):
        raise ConfigError(field, value, AMI_ID_RULE)
    return value
REGION_DIRECTIONS = MappingProxyType({
    "north": "n", "south": "s", "east": "e", "west": "w", "central": "c",
    "northeast": "ne", "northwest": "nw", "southeast": "se", "southwest": "sw",
})


def az_id_prefix(region: str) -> str:
    """'us-west-2' -> 'usw2': the prefix every AZ ID of the region carries."""
    match = REGION_CODE.fullmatch(region)
    if not match or match.group(2) not in REGION_DIRECTIONS:
        raise ConfigError("region", region, "a commercial AWS region code such as us-west-2 or us-east-1")
    return f"{match.group(1)}{REGION_DIRECTIONS[match.group(2)]}{match.group(3)}"


# Queue names ParallelCluster's own validator rejects (a compute group is a Slurm queue of its name).
SLURM_RESERVED_QUEUE_NAMES = ("default",)
# ParallelCluster's own maxima (pcluster/constants.py of the pinned version, versions.py): Slurm queues, and
# compute resources in the whole cluster. A compute group is one queue with one compute resource.
PARALLELCLUSTER_MAX_QUEUES = 50
PARALLELCLUSTER_MAX_COMPUTE_RESOURCES = 50
# A VPC's IPv4 CIDR block and a subnet's are /16 at most and /28 at least (Amazon VPC, CIDR blocks).
VPC_MIN_PREFIX = 16
SUBNET_MAX_PREFIX = 28
# The largest gp3 volume, GiB (Amazon EBS volume types).
GP3_MAX_GIB = 16384
# AWS Batch retries a job at most 10 attempts (RetryStrategy.attempts).
BATCH_MAX_ATTEMPTS = 10
# How long running jobs may go on after a compute environment's infrastructure update, minutes (AWS Batch API
# reference, UpdatePolicy jobExecutionTimeoutMinutes: 1 to 7200; older copies of the page say 360).
BATCH_MAX_UPDATE_TIMEOUT_MINUTES = 7200
# AWS Batch's quotas per account and region, which cannot be raised ("AWS Batch service quotas"): 50 job
# queues and 50 compute environments (and 3 environments per queue: a group's queue has one). Each compute
# group of the batch backend is one queue and one environment.
BATCH_MAX_JOB_QUEUES = 50
BATCH_MAX_COMPUTE_ENVIRONMENTS = 50
BATCH_MAX_COMPUTE_GROUPS = min(BATCH_MAX_JOB_QUEUES, BATCH_MAX_COMPUTE_ENVIRONMENTS)
# The most nodes one compute group may reach (nodes, max_nodes): what the largest of the backends' services
# takes. EKS: clusters of up to 100,000 nodes ("Amazon EKS enables ultra scale AI/ML workloads with support for
# 100K nodes per cluster", AWS Containers blog, 2025-07-16), above managed node groups' 450-node default quota
# ("Amazon EKS service quotas", adjustable) and Karpenter's NodePool limits (cpu and memory, unbounded by
# default). AWS Batch: 1,000 nodes per multi-node parallel job by default, the instances of an ECS cluster,
# adjustable ("Node groups", AWS Batch User Guide). ParallelCluster: MaxCount has no upper bound in its schema
# (pcluster/schemas/cluster_schema.py of the pinned version: Range(min=1)). No service takes a group above this;
# a larger number is a typo, not a plan (1,000,000,000 trn1.32xlarge: $21.5 billion an hour).
MAX_NODES_PER_GROUP = 100_000


def check_lustre(deployment_type: str, capacity_gib: int, throughput_mb_per_tib: int | None, *, prefix: str = "") -> None:
    """What FSx accepts for a deployment type: capacity steps and per-TiB throughputs (catalog facts).

    ``prefix`` goes before each field name in errors."""
    if deployment_type not in LUSTRE_THROUGHPUT_MB_PER_TIB:
        raise ConfigError(f"{prefix}deployment_type", deployment_type, one_of(LUSTRE_THROUGHPUT_MB_PER_TIB))
    cap = capacity_gib
    if not (cap == LUSTRE_MIN_CAPACITY_GIB or (cap % LUSTRE_CAPACITY_STEP_GIB == 0 and 0 < cap)) or (
        cap > LUSTRE_MAX_CAPACITY_GIB
    ):
        raise ConfigError(
            f"{prefix}capacity_gib", cap,
            f"{deployment_type} accepts 1200 GiB or a multiple of 2400 GiB (2400, 4800, ...)",
        )
    offered = LUSTRE_THROUGHPUT_MB_PER_TIB[deployment_type]
    if offered and throughput_mb_per_tib not in offered:
        raise ConfigError(
            f"{prefix}throughput_mb_per_tib", throughput_mb_per_tib,
            f"{deployment_type} offers " + ", ".join(map(str, offered)) + " MB/s/TiB",
        )
    if not offered and throughput_mb_per_tib is not None:
        raise ConfigError(
            f"{prefix}throughput_mb_per_tib", throughput_mb_per_tib,
            f"{deployment_type} has a fixed throughput: leave it out (null)",
        )
