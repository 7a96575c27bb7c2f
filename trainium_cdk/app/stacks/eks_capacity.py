"""How Trainium nodes come and go on the EKS cluster: the adapter from ``eks.capacity`` to constructs.

``karpenter``: the Karpenter controller and a NodePool per compute group; ``managed``: Cluster
Autoscaler (the stack adds the managed node groups themselves). Either way no Trainium node runs
until a pod asks for one.
"""

from __future__ import annotations

import cdk8s
from constructs import Construct

from trainium_cdk.app.adapters.eks import cluster_name as eks_cluster_name
from trainium_cdk.app.adapters.eks import node_pool_props
from trainium_cdk.app.config import Config
from trainium_cdk.charts.karpenter import NODE_POOLS_CHART_ID, TrainiumNodePools
from trainium_cdk.constructs.cluster_autoscaler import ClusterAutoscaler, ClusterAutoscalerOptions
from trainium_cdk.constructs.eks_cluster import TrainiumCluster
from trainium_cdk.constructs.karpenter import KarpenterController, KarpenterOptions
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.facts.names import SYSTEM_NODE_LABELS


def trainium_capacity(
    scope: Construct, *, config: Config, network: TrainingNetwork, training: TrainiumCluster,
    storage: LustreMount | None = None,
) -> Construct:
    """The autoscaler of ``config.eks.capacity``; with Karpenter, its node pools too (``.node_pools``)."""
    cluster = training.cluster_ref
    cluster_name = eks_cluster_name(config)
    after = [training.system_nodes, training.addons["eks-pod-identity-agent"]]
    if config.eks.capacity == "managed":
        return ClusterAutoscaler(
            scope, "ClusterAutoscaler", cluster=cluster, cluster_name=cluster_name, after=after,
            options=ClusterAutoscalerOptions(
                node_selector=SYSTEM_NODE_LABELS, scale_down_unneeded_time=config.eks.consolidate_after
            ),
        )
    karpenter = KarpenterController(
        scope, "Karpenter", cluster=cluster, cluster_name=cluster_name, after=after,
        cni_association=training.cni_association,
        options=KarpenterOptions(node_selector=SYSTEM_NODE_LABELS, replicas=min(2, config.eks.system_nodes)),
    )
    pools = []
    for group in config.compute_groups:
        placement_group = network.placement_group(group.name)
        pools.append(node_pool_props(
            config, group,
            node_role=karpenter.node_role.role_name,
            subnet_ids=[s.subnet_id for s in network.compute_subnets(group.name)],
            security_group_ids=[network.efa_security_group.security_group_id, cluster.cluster_security_group_id],
            placement_group=placement_group.placement_group_name if placement_group is not None else None,
            storage=storage,
        ))
    chart = TrainiumNodePools(cdk8s.App(), NODE_POOLS_CHART_ID, pools=pools)
    # The CRDs come with the Karpenter chart; its webhook-free v1 API takes the objects once installed.
    karpenter.node_pools = cluster.add_cdk8s_chart(NODE_POOLS_CHART_ID, chart)
    karpenter.node_pools.node.add_dependency(karpenter.chart, karpenter.node_access)
    return karpenter
