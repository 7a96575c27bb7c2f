"""The ParallelCluster 3 cluster configuration, rendered from typed settings (no config).

:func:`render_configuration` is the one renderer: the :class:`SlurmCluster` construct calls it with the
ids it supplies (CDK tokens), and the pcluster CLI's YAML (``cluster_config.render_cluster_yaml``) with
``${NAME}`` placeholders. The config is mapped to :class:`ClusterSettings` in one place,
``trainium_cdk.app.adapters.parallelcluster``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts import defaults, versions
from trainium_cdk.facts.capacity import CapacityKind, GroupNodes
from trainium_cdk.facts.names import CACHE_GROUP, SHARED_MOUNT
from trainium_cdk.facts.versions import XLA_TRACK, NeuronTrack
from trainium_cdk.node.neuron_metrics import NAMESPACE as NEURON_METRICS_NAMESPACE
from trainium_cdk.parallelcluster.accounting import SlurmAccounting, custom_slurm_settings
from trainium_cdk.parallelcluster.parts import ClusterIds, NeuronMetrics, PrometheusWriter, S3Object, SlurmDatabase

# The OS comes from the Neuron track (versions.py): Ubuntu 24.04 for PyTorch 2.9 and later (the Neuron
# AL2023 images cannot run them: glibc 2.34 < 2.35; Ubuntu 22.04 is end of support on Neuron).
OS_USER = "ubuntu"
SHARED_STORAGE_NAME = "fsx"
# /home is exported by the head node to every node: the cluster's own directory there holds what every user's
# job reads. Not the OS user's home: Ubuntu creates homes 750 since 21.04, so no other user could read it.
CLUSTER_HOME = "/home/trainium-cdk"
# One venv per set of Neuron pins, built once for the whole cluster, owned by root, and this stable link to
# the current one, which the batch scripts activate (neuron_setup.sh: a pin change builds a new venv beside
# the one running jobs use, then switches the link).
VENV = f"{CLUSTER_HOME}/neuron-venv"
# The batch scripts every user reads (the OS user also has them in ~/trainium).
SHARED_SCRIPTS = f"{CLUSTER_HOME}/trainium"
# How a queue change reaches running nodes: DRAIN lets running jobs finish, then replaces the nodes
# (TERMINATE would kill multi-day training runs; the default needs the whole fleet stopped first).
QUEUE_UPDATE_STRATEGY = "DRAIN"
# ParallelCluster's CapacityType of each kind: a reservation is bought on-demand (its CapacityReservationTarget
# says which), a block is CAPACITY_BLOCK.
_CAPACITY_TYPE: dict[CapacityKind, str] = {"on-demand": "ONDEMAND", "reservation": "ONDEMAND", "capacity-block": "CAPACITY_BLOCK"}


@dataclass(frozen=True)
class SlurmQueue:
    """One Slurm queue: one compute group's nodes.

    :param nodes: the group's nodes: its name (the queue's), instance type (EFA if the type has it), most nodes,
        root volume (encrypted gp3) and how they are bought (a capacity block runs as static nodes; a
        reservation's own placement group is used by name).
    :param placement_group: a cluster placement group of ParallelCluster's. Default: True.
    :param custom_ami: the compute nodes' AMI (``parallelcluster/image.py`` builds it). Default: none
        (ParallelCluster's official AMI).
    :param lustre_tuning: the arguments of the FSx client's tuning for the instance type
        (``lustre_tuning.install_args``), run by OnNodeStart when the ids name the script. Default: none
        (no OnNodeStart: a cluster without storage).
    """

    nodes: GroupNodes
    placement_group: bool = True
    custom_ami: str | None = None
    lustre_tuning: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.nodes.group_name

    @property
    def compute_resource_name(self) -> str:
        return self.nodes.spec.name.replace(".", "-")


@dataclass(frozen=True)
class HeadNode:
    """The head node.

    :param instance_type: its instance type.
    :param root_volume_gib: its encrypted gp3 root volume, GiB.
    :param ssh_allowed_cidr: the CIDR that may reach it by SSH.
    :param ssh_key_name: an EC2 key pair. Default: none (Session Manager only).
    """

    instance_type: str
    root_volume_gib: int
    ssh_allowed_cidr: str
    ssh_key_name: str | None = None


@dataclass(frozen=True)
class NewFileSystem:
    """The FSx for Lustre file system ParallelCluster creates when the cluster is given none.

    :param capacity_gib: its capacity.
    :param deployment_type: ``PERSISTENT_2`` or ``SCRATCH_2``.
    :param throughput_mb_per_tib: PERSISTENT_2 throughput, or None. Default: None.
    :param compression: ``LZ4`` or ``NONE``. Default: ``LZ4``.
    :param removal_policy: ``retain`` or ``destroy`` (ParallelCluster's Retain or Delete). Default: ``retain``.
    """

    capacity_gib: int
    deployment_type: str
    throughput_mb_per_tib: int | None = None
    compression: str = "LZ4"
    removal_policy: str = "retain"

    def __post_init__(self) -> None:
        if self.removal_policy not in defaults.REMOVAL_POLICIES:
            raise ConfigError("removal_policy", self.removal_policy, one_of(defaults.REMOVAL_POLICIES))


@dataclass(frozen=True)
class ClusterSettings:
    """Everything the cluster configuration says but the ids (:class:`ClusterIds`).

    :param region: the cluster's region.
    :param queues: one queue per compute group.
    :param head_node: the head node.
    :param new_file_system: the file system ParallelCluster creates when the ids name none.
    :param track: the Neuron track the nodes install. Default: the XLA track.
    :param tags: tags of every resource, in order. Default: none.
    :param accounting: the teams' Slurm accounts: accounting in the ids' database (``ClusterIds.database``),
        multifactor fair share, and the head node's sacctmgr commands (``ClusterIds.accounting``). Default: none (one
        tenant: no database, Slurm's basic priority).
    """

    region: str
    queues: tuple[SlurmQueue, ...]
    head_node: HeadNode
    new_file_system: NewFileSystem
    track: NeuronTrack = XLA_TRACK
    tags: tuple[tuple[str, str], ...] = field(default=())
    accounting: SlurmAccounting | None = None


def setup_args(
    batch_scripts: Mapping[str, S3Object],
    track: NeuronTrack = XLA_TRACK,
    prologs: Mapping[str, S3Object] | None = None,
    *,
    cache_group: str | None = None,
) -> list[str]:
    """Arguments of the setup script: every version from the track's table, so the script never changes,
    the batch scripts the head node copies (compute nodes get none: a new script must not replace them)
    and the Slurm prologs it installs; ``cache_group``: the group the head node shares the compile cache with."""
    args = ["--sdk", track.neuron_release, "--venv", VENV, *apt_args(track)]
    if cache_group is not None:
        args += ["--cache-group", cache_group]
    for pin in track.neuron_pip_pins:
        args += ["--pip", pin]
    for name, obj in batch_scripts.items():
        args += ["--sbatch", f"{name}={obj.checked_url}"]
    for name, obj in (prologs or {}).items():
        args += ["--prolog", f"{name}={obj.checked_url}"]
    return args


def apt_args(track: NeuronTrack) -> list[str]:
    """The setup script's ``--apt`` arguments: the track's Neuron host packages, each pinned."""
    args: list[str] = []
    for name, version in track.apt_packages.items():
        args += ["--apt", f"{name}={version}"]
    return args


def metrics_args(metrics: NeuronMetrics | None) -> list[str]:
    """The setup script's arguments that start neuron-monitor into CloudWatch on a compute node."""
    if metrics is None:
        return []
    return ["--metrics-program", metrics.program.checked_url, "--metrics-namespace", NEURON_METRICS_NAMESPACE,
            "--metrics-deployment", metrics.deployment]


def prometheus_args(prometheus: PrometheusWriter | None) -> list[str]:
    """The setup script's arguments that install the Prometheus-format exporters and agent on a compute node: the
    program, the workspace, and the releases versions.py pins (each URL with its SHA-256)."""
    if prometheus is None:
        return []
    releases = [(versions.NODE_EXPORTER_URL, versions.NODE_EXPORTER_SHA256),
                (versions.PROMETHEUS_URL, versions.PROMETHEUS_SHA256)]
    return ["--prometheus-program", prometheus.program.checked_url, "--prometheus-remote-write",
            prometheus.remote_write_url, "--prometheus-deployment", prometheus.deployment,
            *[part for url, sha in releases for part in ("--prometheus-release", f"{sha}@{url}")],
            "--prometheus-client", versions.PROMETHEUS_CLIENT_VERSION]


def read_access(objects: Iterable[S3Object]) -> list[dict[str, Any]]:
    """The nodes' S3Access to the scripts: one entry per key prefix (``prefix/*``), so that it does not grow
    with the scripts (every queue carries a copy, and IAM caps a role's inline policies at 10,240
    characters); an object at a bucket's root, where a wildcard would open the whole bucket, by its key."""
    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objects:
        prefix, slash, _ = obj.key.rpartition("/")
        key = f"{prefix}/*" if slash else obj.key
        entries.setdefault((obj.bucket, key), {"BucketName": obj.bucket, "KeyName": key, "EnableWriteAccess": False})
    return list(entries.values())


def render_configuration(settings: ClusterSettings, ids: ClusterIds) -> dict[str, Any]:
    """The ParallelCluster 3 configuration: a head node and one Slurm queue per compute group."""
    # Queue names ParallelCluster forbids are rejected by the config (SLURM_RESERVED_QUEUE_NAMES).
    for queue in settings.queues:
        if queue.name not in ids.compute_subnet_ids:
            raise ConfigError("compute_subnet_ids", sorted(ids.compute_subnet_ids), f"a subnet for group {queue.name}")
    scripts = [ids.setup_script, ids.head_node_script, *ids.batch_scripts.values(), *ids.prologs.values()]
    if ids.neuron_metrics is not None:
        scripts.append(ids.neuron_metrics.program)
    if ids.prometheus is not None:
        scripts.append(ids.prometheus.program)
    if ids.lustre_tuning is not None:
        scripts.append(ids.lustre_tuning)
    if ids.accounting is not None:
        scripts.append(ids.accounting)
    s3_access = read_access(scripts)
    track = settings.track
    # Compute nodes run the health prolog once at boot, with its on-node collective (parallelcluster/health.py).
    boot_checks = [arg for name in ids.prologs for arg in ("--boot-check", name)]
    action = {"OnNodeConfigured": {"Script": ids.setup_script.url,
                                   "Args": setup_args({}, track) + metrics_args(ids.neuron_metrics)
                                           + prometheus_args(ids.prometheus) + boot_checks}}
    # ParallelCluster cannot update a head node's OnNodeConfigured: it is a fixed script that runs the
    # head node's OnNodeUpdated (which may change, and which ParallelCluster reruns after an update).
    slurm_settings: dict[str, Any] = {"QueueUpdateStrategy": QUEUE_UPDATE_STRATEGY}
    head_args = setup_args(ids.batch_scripts, track, ids.prologs, cache_group=CACHE_GROUP)
    head_groups = [ids.efa_security_group_id]
    if settings.accounting is not None:
        database, commands = _accounting_ids(ids)
        slurm_settings["Database"] = {"Uri": database.uri, "UserName": database.user_name,
                                      "PasswordSecretArn": database.password_secret_arn,
                                      "DatabaseName": database.database_name}
        slurm_settings["CustomSlurmSettings"] = custom_slurm_settings()
        # The head node applies the teams' accounts once slurmdbd answers (neuron_setup.sh --accounting), and alone
        # reaches the database.
        head_args += ["--accounting", commands.checked_url]
        head_groups.append(database.client_security_group_id)
    head_actions = {
        "OnNodeConfigured": {"Script": ids.head_node_script.url},
        "OnNodeUpdated": {"Script": ids.setup_script.url, "Args": head_args},
    }
    head = settings.head_node
    ssh: dict[str, Any] = {"AllowedIps": head.ssh_allowed_cidr}
    if head.ssh_key_name:
        ssh["KeyName"] = head.ssh_key_name
    head_node = {
        "InstanceType": head.instance_type,
        "Networking": {
            "SubnetId": ids.head_node_subnet_id,
            "AdditionalSecurityGroups": head_groups,
        },
        "Ssh": ssh,
        "LocalStorage": {
            "RootVolume": {"Size": head.root_volume_gib, "Encrypted": True, "VolumeType": "gp3"}
        },
        "Iam": {"AdditionalIamPolicies": _head_node_policies(ids), "S3Access": copy.deepcopy(s3_access)},
        "Imds": {"Secured": True},
        "CustomActions": head_actions,
    }
    return {
        "Region": settings.region,
        "Image": {"Os": track.parallelcluster_os},
        "HeadNode": head_node,
        "Scheduling": {
            "Scheduler": "slurm",
            "SlurmSettings": slurm_settings,
            "SlurmQueues": [_queue(queue, ids, action, s3_access) for queue in settings.queues],
        },
        "SharedStorage": [_shared_storage(settings.new_file_system, ids.file_system_id)],
        "Imds": {"ImdsSupport": "v2.0"},
        "Tags": [{"Key": k, "Value": v} for k, v in settings.tags],
    }


def _accounting_ids(ids: ClusterIds) -> tuple[SlurmDatabase, S3Object]:
    """The database and the sacctmgr commands' file a cluster with teams needs."""
    if ids.database is None or ids.accounting is None:
        missing = "database" if ids.database is None else "accounting"
        raise ConfigError(f"ClusterIds.{missing}", None, "a Slurm accounting database and the head node's sacctmgr "
                          "commands: a cluster with teams (ClusterSettings.accounting) needs both")
    return ids.database, ids.accounting


def _queue(
    settings: SlurmQueue, ids: ClusterIds, action: dict[str, Any], s3_access: list[dict[str, Any]]
) -> dict[str, Any]:
    nodes, capacity = settings.nodes, settings.nodes.capacity
    compute_resource: dict[str, Any] = {
        "Name": settings.compute_resource_name,
        "InstanceType": nodes.spec.name,
        "MinCount": 0,
        "MaxCount": nodes.max_nodes,
        "Efa": {"Enabled": nodes.spec.has_efa},
    }
    if capacity.is_capacity_block:
        # ParallelCluster runs a capacity block as static nodes: MinCount must equal MaxCount (> 0).
        compute_resource["MinCount"] = nodes.max_nodes
    if capacity.reservation_id is not None:
        compute_resource["CapacityReservationTarget"] = {"CapacityReservationId": capacity.reservation_id}
    queue: dict[str, Any] = {
        "Name": settings.name,
        "CapacityType": _CAPACITY_TYPE[capacity.kind],
        "ComputeResources": [compute_resource],
        "ComputeSettings": {
            "LocalStorage": {"RootVolume": {"Size": nodes.root_volume_gib, "Encrypted": True, "VolumeType": "gp3"}}
        },
        "Networking": {
            # EFA needs every node of a job in one subnet; the group has exactly one.
            "SubnetIds": [ids.compute_subnet_ids[settings.name]],
            # A placement group fights reservations and capacity blocks; ParallelCluster wants an
            # explicit Enabled: false for EFA queues without one.
            "PlacementGroup": _placement_group(settings),
            "AdditionalSecurityGroups": [ids.efa_security_group_id],
        },
        "Iam": {"AdditionalIamPolicies": _compute_policies(ids), "S3Access": copy.deepcopy(s3_access)},
        "CustomActions": copy.deepcopy(action),
    }
    if ids.lustre_tuning is not None and settings.lustre_tuning:
        # OnNodeStart runs "before any node deployment bootstrap actions are started" (ParallelCluster user
        # guide, Custom bootstrap actions): before the file system's mount loads the Lustre modules.
        queue["CustomActions"]["OnNodeStart"] = {"Script": ids.lustre_tuning.url, "Args": list(settings.lustre_tuning)}
    if settings.custom_ami is not None:
        # The compute nodes only (parallelcluster/image.py builds it): a queue's image is updated with the
        # queue update strategy (drained), while the cluster's and the head node's cannot be updated.
        queue["Image"] = {"CustomAmi": settings.custom_ami}
    return queue


def _head_node_policies(ids: ClusterIds) -> list[dict[str, str]]:
    """Session Manager's minimal policy (the README reaches the head node with it), not
    AmazonSSMManagedInstanceCore: its ssm:GetParameter* on * would let any job read every parameter."""
    return [{"Policy": ids.session_manager_policy_arn}] if ids.session_manager_policy_arn else []


def _compute_policies(ids: ClusterIds) -> list[dict[str, str]]:
    """Compute nodes are reached from the head node (ssh, srun): no Session Manager; the metrics policy."""
    policies = [{"Policy": ids.neuron_metrics.policy_arn}] if ids.neuron_metrics is not None else []
    return policies + ([{"Policy": ids.prometheus.policy_arn}] if ids.prometheus is not None else [])


def _placement_group(queue: SlurmQueue) -> dict[str, Any]:
    existing = queue.nodes.capacity.placement_group
    if existing is not None:  # the reservation's own: ParallelCluster uses it by name
        return {"Enabled": True, "Name": existing}
    return {"Enabled": queue.placement_group}


def _shared_storage(settings: NewFileSystem, file_system_id: str | None) -> dict[str, Any]:
    storage: dict[str, Any] = {"Name": SHARED_STORAGE_NAME, "StorageType": "FsxLustre", "MountDir": SHARED_MOUNT}
    if file_system_id is not None:
        storage["FsxLustreSettings"] = {"FileSystemId": file_system_id}
        return storage
    lustre: dict[str, Any] = {"StorageCapacity": settings.capacity_gib, "DeploymentType": settings.deployment_type}
    if settings.throughput_mb_per_tib is not None:
        lustre["PerUnitStorageThroughput"] = settings.throughput_mb_per_tib
    if settings.compression == "LZ4":
        lustre["DataCompressionType"] = "LZ4"
    # ParallelCluster offers Delete or Retain for a file system it creates; a snapshot policy keeps it.
    lustre["DeletionPolicy"] = "Delete" if settings.removal_policy == "destroy" else "Retain"
    storage["FsxLustreSettings"] = lustre
    return storage
