"""The EKS backend's mapping from the config where it is more than passing a value: the Trainium nodes' user
data and pre-pulled images, the Karpenter node pools, the node health gates and the workloads. The stack passes
the rest (and each group's ``Config.group_nodes``) to the constructs as they are."""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s

from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.app.workloads import workload_charts
from trainium_cdk.charts.karpenter import NodePoolProps
from trainium_cdk.charts.node_health import NodeHealthProps
from trainium_cdk.constructs.eks_workloads import BERT_EXAMPLE_DIR, EXAMPLE_DIR, TrainingWorkloadsOptions
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.examples import offers_bert_example
from trainium_cdk.facts import versions
from trainium_cdk.runtime import eks_user_data
from trainium_cdk.runtime.lustre_tuning import eks_node_script


def cluster_name(config: Config) -> str:
    return config.stack_name("eks")


def node_user_data(config: Config, group: ComputeGroup, storage: LustreMount | None) -> str | None:
    """A group's Trainium nodes' user data (the same for Karpenter's EC2NodeClass and the node groups' launch
    templates): each feature's MIME parts, joined once by ``eks_user_data.mime``: the NodeConfig (fast image
    pull), the track's Neuron driver where the AMI predates it, with storage the FSx client's tuning for the instance type and the stripe layout (lustre_tuning.py,
    before the CSI driver mounts), and the image pre-pull."""
    tuning = ([(eks_user_data.SHELL_CONTENT_TYPE, eks_node_script(config.spec(group), storage.mount_name))]
              if storage is not None else [])
    track = config.neuron_track
    return eks_user_data.mime([
        *eks_user_data.node_config_parts(fast_image_pull=config.eks.fast_image_pull),
        *eks_user_data.driver_parts(track.driver if track.eks_ami_predates_driver else None),
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
    return NodePoolProps(
        nodes=config.group_nodes(group),
        node_role=node_role,
        subnet_ids=list(subnet_ids),
        security_group_ids=list(security_group_ids),
        placement_group=placement_group,
        ami_alias=config.neuron_track.karpenter_ami_alias,
        consolidate_after=config.eks.consolidate_after,
        user_data=node_user_data(config, group, storage),
        root_volume_throughput=eks_user_data.root_volume_throughput(fast_image_pull=config.eks.fast_image_pull),
    )


def node_health_props(config: Config) -> list[NodeHealthProps]:
    """What the nodes of each instance type of the compute groups must show before they take work (the catalog of
    the type): one per type, however many groups have it."""
    specs = {spec.name: spec for spec in map(config.spec, config.compute_groups)}
    return [
        NodeHealthProps(instance_type=spec.name, devices=spec.neuron_devices, cores=spec.neuron_core_counts,
                        efa_interfaces=spec.efa_interfaces, min_driver=config.neuron_track.driver)
        for spec in specs.values()
    ]


def node_health_probe_image(config: Config) -> str:
    """The image of the on-node collective's probe pod: the track's Neuron training image, the one every node pre-pulls
    at boot (prepull_images) and pulls without a registry login."""
    return versions.neuron_public_training_image(config.neuron_track.name)


def workloads_options(config: Config) -> TrainingWorkloadsOptions:
    """The example image on the configured Neuron track (and the BERT-large example's image where the
    config offers that example), the data loader's bucket and the Hugging Face token's secret."""
    loader = config.workloads.data_loader
    built = config.eks.example_images
    return TrainingWorkloadsOptions(
        data_loader_bucket=loader.bucket if loader is not None else None,
        data_loader_prefix=loader.prefix if loader is not None else "",
        # Without the build: the track's Neuron training image, the MLP example's code from its ConfigMap.
        image_directory=EXAMPLE_DIR if built else None,
        image=None if built else versions.neuron_public_training_image(config.neuron_track.name),
        bert_image_directory=BERT_EXAMPLE_DIR if offers_bert_example(config) else None,
        base_image_tag=config.neuron_track.training_image_tag,
        hf_token_secret=config.hugging_face.token_secret,
    )


def workloads(config: Config, *, image: str) -> dict[str, cdk8s.Chart]:
    """The configured workload charts (the ones ``make synth`` writes to dist/) with ``image`` (the stack's
    example image URI, a token) as the default training image, each in a cdk8s App of its own."""
    return workload_charts(cdk8s.App(), config, image=image)
