"""The checks across sections of a :class:`~trainium_cdk.app.config.models.Config`, run by its validators.

Every check here needs more than one section: an AZ ID against the region and the catalog, a job
against its compute group, a backend against the instance types and names it cannot deploy. Each
raises a :class:`ConfigError` naming the field from the top of the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainium_cdk.app import backends as backend_registry
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts.catalog import (
    AZ_ID,
    BATCH_MAX_COMPUTE_GROUPS,
    PARALLELCLUSTER_MAX_COMPUTE_RESOURCES,
    PARALLELCLUSTER_MAX_QUEUES,
    REGION_CODE,
    SLURM_RESERVED_QUEUE_NAMES,
    az_id_prefix,
)
from trainium_cdk.facts.versions import NEURON_TRACKS, PARALLELCLUSTER_VERSION

if TYPE_CHECKING:
    from trainium_cdk.app.config.models import Config

OFFERINGS_SHAPE = "instance type -> region -> AZ IDs, e.g. {trn2.48xlarge: {us-east-2: [use2-az3, use2-az2]}}"


def check_offerings_shape(value: Any) -> None:
    """``instance_offerings`` is instance type -> region -> AZ IDs of that region."""
    if not isinstance(value, Mapping):
        raise ConfigError("instance_offerings", value, OFFERINGS_SHAPE)
    for instance_type, regions in value.items():
        if REGION_CODE.fullmatch(str(instance_type)):
            raise ConfigError(str(instance_type), regions, "an instance type here, not a region; " + OFFERINGS_SHAPE)
        if not isinstance(regions, Mapping):
            raise ConfigError(str(instance_type), regions, OFFERINGS_SHAPE)
        for region, az_ids in regions.items():
            if not REGION_CODE.fullmatch(str(region)):
                raise ConfigError(f"{instance_type}.{region}", az_ids, "a region code here; " + OFFERINGS_SHAPE)
            listed = [az_ids] if isinstance(az_ids, str) else az_ids
            prefix = az_id_prefix(str(region)) + "-"
            if not isinstance(listed, list | tuple) or not listed or not all(
                isinstance(a, str) and AZ_ID.fullmatch(a) and a.startswith(prefix) for a in listed
            ):
                raise ConfigError(
                    f"{instance_type}.{region}", az_ids, f"a list of AZ IDs of {region} ({prefix}az1, ...); "
                    + OFFERINGS_SHAPE,
                )


def check_deployment(config: Config) -> None:
    """What no single section can check: AZs against the region and the catalog, the VPC against its
    AZs, names across sections, jobs against their groups, workloads against the storage."""
    prefix = az_id_prefix(config.region)
    catalog = config.catalog
    if not config.compute_groups:
        raise ConfigError("compute_groups", [], "at least one compute group")
    for instance_type in config.instance_offerings:
        catalog.get(instance_type, field=f"instance_offerings.{instance_type}")
    names = [g.name for g in config.compute_groups]
    for i, group in enumerate(config.compute_groups):
        where = f"compute_groups[{i}]"
        if group.name in names[:i]:
            raise ConfigError(f"{where}.name", group.name, "unique among compute groups")
        spec = catalog.get(group.instance_type, field=f"{where}.instance_type")
        if spec.has_efa and len(group.az_ids) > 1:
            raise ConfigError(
                f"{where}.az_ids", list(group.az_ids),
                f"exactly one AZ ID: {spec.name} uses EFA, which needs every node in one subnet",
            )
        offered = config.offered_az_ids(spec)
        for j, az_id in enumerate(group.az_ids):
            if not az_id.startswith(prefix + "-"):
                raise ConfigError(
                    f"{where}.az_ids[{j}]", az_id, f"an AZ ID of region {config.region} ({prefix}-az1, ...)"
                )
            if offered is None:
                raise ConfigError(
                    f"{where}.az_ids[{j}]", az_id,
                    f"no AZ of {config.region} is known to offer {spec.name}: run `trn azs --instance-type "
                    f"{spec.name} --region {config.region}` or list them under instance_offerings",
                )
            if az_id not in offered:
                raise ConfigError(
                    f"{where}.az_ids[{j}]", az_id,
                    f"does not offer {spec.name} (per the catalog and instance_offerings); "
                    + one_of(offered),
                )
    vpc_az_ids = config.vpc_az_ids
    for j, az_id in enumerate(vpc_az_ids):
        if not az_id.startswith(prefix + "-"):
            raise ConfigError(f"network.az_ids[{j}]", az_id, f"an AZ ID of region {config.region}")
    if len(vpc_az_ids) < 2 or len(set(vpc_az_ids)) != len(vpc_az_ids):
        raise ConfigError(
            "network.az_ids", list(vpc_az_ids), "at least two distinct AZ IDs (EKS needs subnets in two AZs)"
        )
    for i, group in enumerate(config.compute_groups):
        missing = [a for a in group.az_ids if a not in vpc_az_ids]
        if missing:
            raise ConfigError(
                "network.az_ids", list(vpc_az_ids),
                f"must include the AZ IDs of compute_groups[{i}] ({', '.join(missing)})",
            )
    config.network.check_fits(len(vpc_az_ids))
    job_names = [j.name for j in config.workloads.jobs]
    for i, job in enumerate(config.workloads.jobs):
        where = f"workloads.jobs[{i}]"
        if job.name in job_names[:i]:
            raise ConfigError(f"{where}.name", job.name, "unique among jobs")
        if job.group is not None and job.group not in names:
            raise ConfigError(f"{where}.group", job.group, "a compute group; " + one_of(names))
        try:
            job_spec = config.job_spec(job, image="validation")
        except ConfigError as err:
            raise ConfigError(f"{where}.{err.field}", err.value, err.allowed) from None
        if job_spec.distributed and not config.workloads.volcano:
            raise ConfigError(f"{where}.nodes", job_spec.nodes, "1 unless workloads.volcano is on (gang scheduling)")
    if not config.storage.enabled:
        for name, value in (
            ("data_loader", config.workloads.data_loader),
            ("tensorboard", config.workloads.tensorboard),
            ("shell", config.workloads.shell),
        ):
            if value:
                raise ConfigError(
                    f"workloads.{name}", value if isinstance(value, bool) else value.s3_uri,
                    "off (null or false) while storage.enabled is false: it needs the shared file system",
                )
    if config.storage.compute_group is not None and config.storage.compute_group not in names:
        raise ConfigError("storage.compute_group", config.storage.compute_group, "a compute group; " + one_of(names))


def check_single_node_types(config: Config) -> None:
    """A training group of a type without EFA (trn1.2xlarge) with ``nodes`` above 1 would be a
    "distributed" group whose jobs every backend quietly runs on one node (a Batch container job, a
    one-pod EKS job, a one-node Slurm script): refused, naming the field. Inference types run no
    training jobs, so their ``nodes`` is only a node count."""
    for i, group in enumerate(config.compute_groups):
        spec = config.spec(group)
        if spec.for_training and not spec.has_efa and group.nodes > 1:
            raise ConfigError(
                f"compute_groups[{i}].nodes", group.nodes,
                f"1: {spec.name} has no EFA, so a job cannot span nodes on any backend (max_nodes may stay "
                f"higher: that many one-node jobs at once; -c nodes=1)",
            )


def check_backends(config: Config) -> None:
    """What a backend cannot deploy, rejected here rather than by its construct during synth: each
    deployed backend's own check (its ``check`` in trainium_cdk/app/backends.py)."""
    for entry in backend_registry.deployed(config):
        entry.check_config(config)


def check_batch(config: Config) -> None:
    cpu_queue = config.batch.cpu_instance_type is not None  # a queue and compute environment of its own
    if len(config.compute_groups) + cpu_queue > BATCH_MAX_COMPUTE_GROUPS:
        raise ConfigError(
            "compute_groups", len(config.compute_groups),
            f"at most {BATCH_MAX_COMPUTE_GROUPS - cpu_queue} groups with the batch backend: each is an AWS Batch job "
            f"queue and compute environment{', as is the CPU queue (batch.cpu_instance_type: null leaves it out)' if cpu_queue else ''}, "
            f"and Batch allows {BATCH_MAX_COMPUTE_GROUPS} of each per account and region",
        )
    for i, group in enumerate(config.compute_groups):
        if not config.spec(group).for_training:
            raise ConfigError(
                f"compute_groups[{i}].instance_type", group.instance_type,
                "a training (Trainium) type with the batch backend, which runs training jobs; "
                + one_of(t.name for t in config.catalog if t.for_training),
            )


def check_eks(config: Config) -> None:
    for i, group in enumerate(config.compute_groups):
        if config.eks.capacity == "karpenter" and group.min_nodes > 0:
            raise ConfigError(
                f"compute_groups[{i}].min_nodes", group.min_nodes,
                "0 with eks.capacity karpenter (a NodePool keeps no idle nodes); eks.capacity: managed keeps them",
            )


def check_parallelcluster(config: Config) -> None:
    groups = len(config.compute_groups)
    limit = min(PARALLELCLUSTER_MAX_QUEUES, PARALLELCLUSTER_MAX_COMPUTE_RESOURCES)
    if groups > limit:
        raise ConfigError(
            "compute_groups", groups,
            f"at most {limit} groups with the parallelcluster backend: each is a Slurm queue with one compute "
            f"resource, and ParallelCluster {PARALLELCLUSTER_VERSION} allows {PARALLELCLUSTER_MAX_QUEUES} queues and "
            f"{PARALLELCLUSTER_MAX_COMPUTE_RESOURCES} compute resources per cluster",
        )
    for i, group in enumerate(config.compute_groups):
        if group.name in SLURM_RESERVED_QUEUE_NAMES:
            raise ConfigError(
                f"compute_groups[{i}].name", group.name,
                "another name: it is the group's Slurm queue, and ParallelCluster forbids "
                + ", ".join(SLURM_RESERVED_QUEUE_NAMES),
            )


def check_instance(config: Config) -> None:
    config.dev_instance_az_id()


def check_track(config: Config) -> None:
    """Every training type of the deployment must be one the Neuron track supports (a custom type is
    the user's word, and an inference type runs no training framework: neither is checked)."""
    track = NEURON_TRACKS[config.neuron.track]
    custom = {c.name for c in config.custom_instance_types}
    types = [(f"compute_groups[{i}].instance_type", g.instance_type) for i, g in enumerate(config.compute_groups)]
    if "instance" in config.backends:
        types.append(("instance.instance_type", config.instance.instance_type))
    for where, name in types:
        spec = config.catalog.get(name)
        if name not in custom and spec.for_training and spec.family not in track.instance_families:
            raise ConfigError(
                "neuron.track", track.name,
                f"a track that supports {name} ({where}): the {track.name} track runs on "
                + ", ".join(track.instance_families)
                + "; " + one_of(t.name for t in NEURON_TRACKS.values() if config.catalog.get(name).family in t.instance_families),
            )
    if track.name == "native" and "parallelcluster" in config.backends:
        # torch-neuronx v2.33.0 publishes TorchNeuron wheels for Ubuntu 26.04 only (GitHub release
        # notes), and ParallelCluster 3.16 offers no Ubuntu 26.04: the shared venv cannot be built.
        raise ConfigError(
            "neuron.track", track.name,
            "xla with the parallelcluster backend (TorchNeuron 2.33 wheels are for Ubuntu 26.04 only, "
            "which ParallelCluster does not offer); use eks or batch for the native track",
        )
