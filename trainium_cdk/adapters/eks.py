"""The EKS backend's adapter: the config mapped to the props of the cluster, its Trainium node groups or
node pools, and its workloads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cdk8s
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs

from trainium_cdk import eks_user_data, versions
from trainium_cdk.adapters.groups import GroupNodes, group_nodes
from trainium_cdk.catalog import Catalog
from trainium_cdk.charts.karpenter import NodePoolProps
from trainium_cdk.charts.node_health import NodeHealthProps
from trainium_cdk.config import ComputeGroup, Config
from trainium_cdk.constructs.defaults import retention
from trainium_cdk.constructs.eks_workloads import BERT_EXAMPLE_DIR, TrainingWorkloadsOptions
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.examples import offers_bert_example
from trainium_cdk.lustre_tuning import eks_node_script
from trainium_cdk.workloads import workload_charts


@dataclass(frozen=True)
class ClusterProps:
    """TrainiumCluster's props of one deployment (see TrainiumCluster for each)."""

    cluster_name: str
    public_access_cidrs: Sequence[str]
    admin_role_arns: Sequence[str]
    creator_admin: bool
    system_instance_type: ec2.InstanceType
    system_nodes: int
    log_retention: logs.RetentionDays
    catalog: Catalog
    neuron_scheduler_extension: bool
    neuron_monitor: bool
    volcano: bool
    system_release_version: str


@dataclass(frozen=True)
class NodeGroupProps:
    """One compute group's TrainiumNodeGroup props (see TrainiumNodeGroup for each)."""

    nodes: GroupNodes
    min_nodes: int
    release_version: str
    user_data: str | None
    root_volume_throughput: int | None


def cluster_name(config: Config) -> str:
    return config.stack_name("eks")


def cluster_props(config: Config) -> ClusterProps:
    eks = config.eks
    return ClusterProps(
        cluster_name=cluster_name(config),
        public_access_cidrs=eks.public_access_cidrs if eks.endpoint_access == "public-and-private" else (),
        admin_role_arns=eks.admin_role_arns,
        creator_admin=eks.creator_admin,
        system_instance_type=ec2.InstanceType(eks.system_instance_type),
        system_nodes=eks.system_nodes,
        log_retention=retention(eks.log_retention_days),
        catalog=config.catalog,
        neuron_scheduler_extension=eks.neuron_scheduler_extension,
        neuron_monitor=eks.neuron_monitor,
        volcano=config.workloads.volcano,
        # The system nodes on the Trainium nodes' EKS AMI release: one release per cluster, the track's.
        system_release_version=config.neuron_track.eks_nodegroup_release_version,
    )


def node_group_props(config: Config, group: ComputeGroup, storage: LustreMount | None = None) -> NodeGroupProps:
    return NodeGroupProps(
        nodes=group_nodes(config, group),
        min_nodes=group.min_nodes,
        release_version=config.neuron_track.eks_nodegroup_release_version,
        user_data=node_user_data(config, group, storage),
        root_volume_throughput=eks_user_data.root_volume_throughput(fast_image_pull=config.eks.fast_image_pull),
    )


def node_user_data(config: Config, group: ComputeGroup, storage: LustreMount | None) -> str | None:
    """A group's Trainium nodes' user data (the same for Karpenter's EC2NodeClass and the node groups' launch
    templates): each feature's MIME parts, joined once by ``eks_user_data.mime``: the NodeConfig (fast image
    pull), with storage the FSx client's tuning for the instance type and the stripe layout (lustre_tuning.py,
    before the CSI driver mounts), and the image pre-pull."""
    tuning = ([(eks_user_data.SHELL_CONTENT_TYPE, eks_node_script(config.spec(group), storage.mount_name))]
              if storage is not None else [])
    return eks_user_data.mime([
        *eks_user_data.node_config_parts(fast_image_pull=config.eks.fast_image_pull),
        *tuning,
        *eks_user_data.prepull_parts(prepull_parameter(config) if config.eks.prepull_images else None,
                                     region=config.region),
    ])


def prepull_parameter(config: Config) -> str:
    """The SSM parameter that lists the images Trainium nodes pull at boot (the stack writes it)."""
    return f"/{config.stack_name('eks')}/prepull-images"


def prepull_images(config: Config) -> list[str]:
    """The images Trainium nodes pull at boot that the config knows: the track's Neuron training image (every
    image the project builds starts FROM it: the examples, `trn image init`, the recipes; it is most of their
    size), then the images the config names (workloads.image, each job's image), each once. The stack adds the
    example images, whose URIs are known only at deploy."""
    named = [config.workloads.image, *(job.image for job in config.workloads.jobs)]
    images = [versions.neuron_public_training_image(config.neuron_track.name), *(i for i in named if i)]
    return list(dict.fromkeys(images))


def node_pool_props(
    config: Config,
    group: ComputeGroup,
    *,
    node_role: str,
    subnet_ids: Sequence[str],
    security_group_ids: Sequence[str],
    placement_group: str | None,
    storage: LustreMount | None = None,
) -> NodePoolProps:
    """One compute group's Karpenter NodePool and EC2NodeClass; the ids are the stack's tokens."""
    nodes = group_nodes(config, group)
    return NodePoolProps(
        name=group.name,
        instance_type=nodes.spec.name,
        efa_interfaces=nodes.spec.efa_interfaces,
        vcpus=nodes.spec.vcpus,
        max_nodes=nodes.max_nodes,
        node_role=node_role,
        subnet_ids=list(subnet_ids),
        security_group_ids=list(security_group_ids),
        placement_group=placement_group,
        capacity=group.capacity.type,
        reservation_id=nodes.capacity_reservation_id,
        root_volume_gib=nodes.root_volume_gib,
        ami_alias=config.neuron_track.karpenter_ami_alias,
        consolidate_after=config.eks.consolidate_after,
        user_data=node_user_data(config, group, storage),
        root_volume_throughput=eks_user_data.root_volume_throughput(fast_image_pull=config.eks.fast_image_pull),
    )


def node_health_props(config: Config) -> list[NodeHealthProps]:
    """What each compute group's nodes must show before they take work (the catalog of the group's type)."""
    return [
        NodeHealthProps(group=group.name, devices=spec.neuron_devices, cores=spec.neuron_core_counts,
                        efa_interfaces=spec.efa_interfaces, min_driver=config.neuron_track.driver)
        for group in config.compute_groups
        for spec in [config.spec(group)]
    ]


def workloads_options(config: Config) -> TrainingWorkloadsOptions:
    """The example image on the configured Neuron track (and the BERT-large example's image where the
    config offers that example), the data loader's bucket and the Hugging Face token's secret."""
    loader = config.workloads.data_loader
    return TrainingWorkloadsOptions(
        data_loader_bucket=loader.bucket if loader is not None else None,
        data_loader_prefix=loader.prefix if loader is not None else "",
        bert_image_directory=BERT_EXAMPLE_DIR if offers_bert_example(config) else None,
        base_image_tag=config.neuron_track.training_image_tag,
        hf_token_secret=config.hugging_face.token_secret,
    )


def workloads(config: Config, *, image: str) -> dict[str, cdk8s.Chart]:
    """The configured workload charts (the ones ``make synth`` writes to dist/) with ``image`` (the stack's
    example image URI, a token) as the default training image, each in a cdk8s App of its own."""
    return workload_charts(cdk8s.App(), config, image=image)
