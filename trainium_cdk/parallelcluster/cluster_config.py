"""The ParallelCluster 3 cluster configuration of a deployment, from the project's config.

One function builds it (:func:`cluster_configuration`): the :class:`SlurmCluster` construct passes
CDK tokens for the ids that other stacks own, and :func:`render_cluster_yaml` passes ``${NAME}``
placeholders (filled with `envsubst` from the stack outputs) for users of the pcluster CLI. Both
describe the same cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from trainium_cdk import envsubst
from trainium_cdk.config import ComputeGroup, Config
from trainium_cdk.errors import ConfigError
from trainium_cdk.names import SHARED_MOUNT
from trainium_cdk.node.neuron_metrics import NAMESPACE as NEURON_METRICS_NAMESPACE
from trainium_cdk.parallelcluster.parts import (
    HEAD_NODE_SCRIPT_NAME, NEURON_METRICS_NAME, NEURON_METRICS_POLICY_NAME, PROLOG_NAME, SETUP_SCRIPT_NAME,
    ClusterIds, NeuronMetrics, S3Object,
)
from trainium_cdk.session_manager import POLICY_FILE_NAME as SESSION_MANAGER_POLICY_FILE
from trainium_cdk.versions import PARALLELCLUSTER_VERSION, XLA_TRACK, NeuronTrack

# The OS comes from the Neuron track (versions.py): Ubuntu 24.04 for PyTorch 2.9 and later (the Neuron
# AL2023 images cannot run them: glibc 2.34 < 2.35; Ubuntu 22.04 is end of support on Neuron).
OS_USER = "ubuntu"
SHARED_STORAGE_NAME = "fsx"
# /home is exported by the head node to every node: one venv per set of Neuron pins, built once for the whole
# cluster, and this stable link to the current one, which the batch scripts activate (neuron_setup.sh:
# a pin change builds a new venv beside the one running jobs use, then switches the link).
VENV = f"/home/{OS_USER}/neuron-venv"
# How a queue change reaches running nodes: DRAIN lets running jobs finish, then replaces the nodes
# (TERMINATE would kill multi-day training runs; the default needs the whole fleet stopped first).
QUEUE_UPDATE_STRATEGY = "DRAIN"
_CAPACITY_TYPE = {"on-demand": "ONDEMAND", "reservation": "ONDEMAND", "capacity-block": "CAPACITY_BLOCK"}


def cluster_name(config: Config) -> str:
    """The cluster's name; ParallelCluster needs it to differ from the name of any stack of ours."""
    return f"{config.project}-cluster"


def queue_name(group: ComputeGroup) -> str:
    return group.name


def compute_resource_name(group: ComputeGroup) -> str:
    return group.instance_type.replace(".", "-")


def batch_script_name(group: ComputeGroup) -> str:
    return f"train-{group.name}.sbatch"


def setup_args(
    batch_scripts: Mapping[str, S3Object],
    track: NeuronTrack = XLA_TRACK,
    prologs: Mapping[str, S3Object] | None = None,
) -> list[str]:
    """Arguments of the setup script: every version from the track's table, so the script never changes,
    the batch scripts the head node copies (compute nodes get none: a new script must not replace them)
    and the Slurm prologs it installs."""
    args = ["--sdk", track.neuron_release, "--venv", VENV, *apt_args(track)]
    for name, version in track.pip_packages.items():
        args += ["--pip", f"{name}=={version}"]
    for name, obj in batch_scripts.items():
        args += ["--sbatch", f"{name}={obj.url}"]
    for name, obj in (prologs or {}).items():
        args += ["--prolog", f"{name}={obj.url}"]
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
    return ["--metrics-program", metrics.program.url, "--metrics-namespace", NEURON_METRICS_NAMESPACE,
            "--metrics-deployment", metrics.deployment]


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


def cluster_configuration(config: Config, ids: ClusterIds) -> dict[str, Any]:
    """The ParallelCluster 3 configuration: a head node and one Slurm queue per compute group."""
    # Queue names ParallelCluster forbids are rejected by the config (SLURM_RESERVED_QUEUE_NAMES).
    for group in config.compute_groups:
        if group.name not in ids.compute_subnet_ids:
            raise ConfigError("compute_subnet_ids", sorted(ids.compute_subnet_ids), f"a subnet for group {group.name}")
    settings = config.parallelcluster
    scripts = [ids.setup_script, ids.head_node_script, *ids.batch_scripts.values(), *ids.prologs.values()]
    if ids.neuron_metrics is not None:
        scripts.append(ids.neuron_metrics.program)
    s3_access = read_access(scripts)
    track = config.neuron_track
    action = {"OnNodeConfigured": {"Script": ids.setup_script.url,
                                   "Args": setup_args({}, track) + metrics_args(ids.neuron_metrics)}}
    # ParallelCluster cannot update a head node's OnNodeConfigured: it is a fixed script that runs the
    # head node's OnNodeUpdated (which may change, and which ParallelCluster reruns after an update).
    head_actions = {
        "OnNodeConfigured": {"Script": ids.head_node_script.url},
        "OnNodeUpdated": {"Script": ids.setup_script.url, "Args": setup_args(ids.batch_scripts, track, ids.prologs)},
    }
    ssh: dict[str, Any] = {"AllowedIps": settings.ssh_allowed_cidr or config.network.cidr}
    if settings.ssh_key_name:
        ssh["KeyName"] = settings.ssh_key_name
    head_node = {
        "InstanceType": settings.head_node_instance_type,
        "Networking": {
            "SubnetId": ids.head_node_subnet_id,
            "AdditionalSecurityGroups": [ids.efa_security_group_id],
        },
        "Ssh": ssh,
        "LocalStorage": {
            "RootVolume": {"Size": settings.head_node_root_volume_gib, "Encrypted": True, "VolumeType": "gp3"}
        },
        "Iam": {"AdditionalIamPolicies": _head_node_policies(ids), "S3Access": copy.deepcopy(s3_access)},
        "Imds": {"Secured": True},
        "CustomActions": head_actions,
    }
    return {
        "Region": config.region,
        "Image": {"Os": track.parallelcluster_os},
        "HeadNode": head_node,
        "Scheduling": {
            "Scheduler": "slurm",
            "SlurmSettings": {"QueueUpdateStrategy": QUEUE_UPDATE_STRATEGY},
            "SlurmQueues": [_queue(config, group, ids, action, s3_access) for group in config.compute_groups],
        },
        "SharedStorage": [_shared_storage(config, ids.file_system_id)],
        "Imds": {"ImdsSupport": "v2.0"},
        "Tags": [{"Key": "project", "Value": config.project}]
        + [{"Key": k, "Value": v} for k, v in sorted(config.tags.items())],
    }


def _queue(
    config: Config, group: ComputeGroup, ids: ClusterIds, action: dict[str, Any], s3_access: list[dict[str, Any]]
) -> dict[str, Any]:
    spec = config.spec(group)
    capacity = group.capacity
    compute_resource: dict[str, Any] = {
        "Name": compute_resource_name(group),
        "InstanceType": group.instance_type,
        "MinCount": 0,
        "MaxCount": group.maximum,
        "Efa": {"Enabled": spec.has_efa},
    }
    if capacity.type == "capacity-block":
        # ParallelCluster runs a capacity block as static nodes: MinCount must equal MaxCount (> 0).
        compute_resource["MinCount"] = group.maximum
    if capacity.reserved:
        compute_resource["CapacityReservationTarget"] = {"CapacityReservationId": capacity.reservation_id}
    queue: dict[str, Any] = {
        "Name": queue_name(group),
        "CapacityType": _CAPACITY_TYPE[capacity.type],
        "ComputeResources": [compute_resource],
        "ComputeSettings": {
            "LocalStorage": {"RootVolume": {"Size": group.root_volume_gib, "Encrypted": True, "VolumeType": "gp3"}}
        },
        "Networking": {
            # EFA needs every node of a job in one subnet; the group has exactly one.
            "SubnetIds": [ids.compute_subnet_ids[group.name]],
            # A placement group fights reservations and capacity blocks; ParallelCluster wants an
            # explicit Enabled: false for EFA queues without one.
            "PlacementGroup": _placement_group(group),
            "AdditionalSecurityGroups": [ids.efa_security_group_id],
        },
        "Iam": {"AdditionalIamPolicies": _compute_policies(ids), "S3Access": copy.deepcopy(s3_access)},
        "CustomActions": copy.deepcopy(action),
    }
    if config.parallelcluster.custom_ami is not None:
        # The compute nodes only (parallelcluster/image.py builds it): a queue's image is updated with the
        # queue update strategy (drained), while the cluster's and the head node's cannot be updated.
        queue["Image"] = {"CustomAmi": config.parallelcluster.custom_ami}
    return queue


def _head_node_policies(ids: ClusterIds) -> list[dict[str, str]]:
    """Session Manager's minimal policy (the README reaches the head node with it), not
    AmazonSSMManagedInstanceCore: its ssm:GetParameter* on * would let any job read every parameter."""
    return [{"Policy": ids.session_manager_policy_arn}] if ids.session_manager_policy_arn else []


def _compute_policies(ids: ClusterIds) -> list[dict[str, str]]:
    """Compute nodes are reached from the head node (ssh, srun): no Session Manager; the metrics policy."""
    return [{"Policy": ids.neuron_metrics.policy_arn}] if ids.neuron_metrics is not None else []


def _placement_group(group: ComputeGroup) -> dict[str, Any]:
    if group.capacity.placement_group is not None:  # the reservation's own: ParallelCluster uses it by name
        return {"Enabled": True, "Name": group.capacity.placement_group}
    return {"Enabled": group.placement_group}


def _shared_storage(config: Config, file_system_id: str | None) -> dict[str, Any]:
    storage: dict[str, Any] = {"Name": SHARED_STORAGE_NAME, "StorageType": "FsxLustre", "MountDir": SHARED_MOUNT}
    if file_system_id is not None:
        storage["FsxLustreSettings"] = {"FileSystemId": file_system_id}
        return storage
    settings = config.storage
    lustre: dict[str, Any] = {"StorageCapacity": settings.capacity_gib, "DeploymentType": settings.deployment_type}
    if settings.throughput_mb_per_tib is not None:
        lustre["PerUnitStorageThroughput"] = settings.throughput_mb_per_tib
    if settings.compression == "LZ4":
        lustre["DataCompressionType"] = "LZ4"
    # ParallelCluster offers Delete or Retain for a file system it creates; a snapshot policy keeps it.
    lustre["DeletionPolicy"] = "Delete" if settings.removal_policy == "destroy" else "Retain"
    storage["FsxLustreSettings"] = lustre
    return storage


# -- the pcluster CLI alternative ------------------------------------------------------------------

SCRIPTS_PREFIX = "trainium"
EXAMPLE_SCRIPT_NAME = "mlp_train.py"  # the MLP example beside the batch scripts (parallelcluster/sbatch.py)
SCRIPTS_BUCKET = "SCRIPTS_BUCKET"  # the placeholder of the bucket the scripts are uploaded to


def placeholder(name: str) -> str:
    return envsubst.placeholder(name)


def subnet_placeholder(group: ComputeGroup) -> str:
    return "COMPUTE_SUBNET_ID_" + group.name.upper().replace("-", "_")


def placeholder_names(config: Config) -> dict[str, str]:
    """Placeholder -> where its value comes from after `cdk deploy` of the network (and storage) stacks."""
    names = {
        "HEAD_NODE_SUBNET_ID": (
            f"the public subnet in AZ ID {config.storage_group.az_id} of {config.stack_name('network')} "
            "(tag aws-cdk:subnet-name=public)"
            if config.parallelcluster.head_node_subnet == "public"
            else f"output ComputeSubnet-{config.storage_group.name} of {config.stack_name('network')}"
        ),
        "EFA_SECURITY_GROUP_ID": f"output EfaSecurityGroupId of {config.stack_name('network')}",
        SCRIPTS_BUCKET: f"an S3 bucket of yours; upload this directory to s3://$SCRIPTS_BUCKET/{SCRIPTS_PREFIX}/",
    }
    for group in config.compute_groups:
        names[subnet_placeholder(group)] = f"output ComputeSubnet-{group.name} of {config.stack_name('network')}"
    if config.storage.enabled:
        names["FSX_FILE_SYSTEM_ID"] = f"output FileSystemId of {config.stack_name('storage')}"
    names["SESSION_MANAGER_POLICY_ARN"] = (
        f"a managed policy of yours with the document {SESSION_MANAGER_POLICY_FILE} (Session Manager's minimal "
        "instance policy: the head node is reached with `aws ssm start-session`)"
    )
    names["NEURON_METRICS_POLICY_ARN"] = (
        f"a managed policy of yours with the document {NEURON_METRICS_POLICY_NAME} (cloudwatch:PutMetricData "
        f"in namespace {NEURON_METRICS_NAMESPACE} only)"
    )
    return names


def placeholder_ids(config: Config) -> ClusterIds:
    bucket = placeholder(SCRIPTS_BUCKET)
    return ClusterIds(
        head_node_subnet_id=placeholder("HEAD_NODE_SUBNET_ID"),
        compute_subnet_ids={g.name: placeholder(subnet_placeholder(g)) for g in config.compute_groups},
        efa_security_group_id=placeholder("EFA_SECURITY_GROUP_ID"),
        file_system_id=placeholder("FSX_FILE_SYSTEM_ID") if config.storage.enabled else None,
        setup_script=S3Object(bucket, f"{SCRIPTS_PREFIX}/{SETUP_SCRIPT_NAME}"),
        head_node_script=S3Object(bucket, f"{SCRIPTS_PREFIX}/{HEAD_NODE_SCRIPT_NAME}"),
        batch_scripts={
            name: S3Object(bucket, f"{SCRIPTS_PREFIX}/{name}")
            for name in [*(batch_script_name(g) for g in config.compute_groups), EXAMPLE_SCRIPT_NAME]
        },
        prologs={PROLOG_NAME: S3Object(bucket, f"{SCRIPTS_PREFIX}/{PROLOG_NAME}")},
        neuron_metrics=NeuronMetrics(
            program=S3Object(bucket, f"{SCRIPTS_PREFIX}/{NEURON_METRICS_NAME}"),
            policy_arn=placeholder("NEURON_METRICS_POLICY_ARN"), deployment=cluster_name(config),
        ),
        session_manager_policy_arn=placeholder("SESSION_MANAGER_POLICY_ARN"),
    )


def render_cluster_yaml(config: Config, ids: ClusterIds | None = None) -> str:
    """The cluster configuration as YAML for `pcluster create-cluster`, with ``${NAME}`` placeholders
    for ids known only after deploy (or the concrete ``ids`` given)."""
    body = yaml.safe_dump(cluster_configuration(config, ids or placeholder_ids(config)), sort_keys=False)
    header = [
        f"# ParallelCluster {PARALLELCLUSTER_VERSION} configuration of {cluster_name(config)}, generated by trainium-cdk",
        "# (the same cluster the ParallelCluster stack deploys).",
    ]
    if ids is None:
        sources = placeholder_names(config)
        names = envsubst.placeholders_in(body, sources)
        header += envsubst.header(names, f"dist/parallelcluster/{cluster_file_name(config)}", "> cluster.yaml",
                                  sources=sources)
        header.append("# then:")
    header.append(
        f"#   pcluster create-cluster --region {config.region} --cluster-name {cluster_name(config)} "
        "--cluster-configuration cluster.yaml"
    )
    return "\n".join(header) + "\n" + body


def cluster_file_name(config: Config) -> str:
    """The cluster configuration's name in dist/parallelcluster/."""
    return f"{config.project}-cluster.yaml"
