"""TrainiumNodeGroup: an EKS managed node group of one compute group, wired for EFA.

The node group is built directly (not with ``cluster.add_nodegroup_capacity``), so that CDK does
not install its own Neuron device plugin next to ours, and its instance type lives in the launch
template, where the Neuron AMI type is accepted for Trainium.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from trainium_cdk.charts.karpenter import compute_node_labels
from trainium_cdk.constructs.cluster_autoscaler import node_template_tags
from trainium_cdk.constructs.efa_launch_template import EfaLaunchTemplate
from trainium_cdk.constructs.nag import acknowledge, acknowledge_default_policy
from trainium_cdk.errors import ConfigError, names_construct_path
from trainium_cdk.facts.capacity import GroupNodes
from trainium_cdk.facts.names import HEALTH_TAINT_KEY, HEALTH_TAINT_VALUE, NEURON_TAINT_KEY, NEURON_TAINT_VALUE
from trainium_cdk.facts.versions import EKS_NODEGROUP_RELEASE_VERSION

# What the L2 node group attaches to its node role; the CNI's goes to the VPC CNI's own Pod Identity role
# when the cluster has one (TrainiumCluster.cni_association): every pod of a node could act with it.
CNI_POLICY = "AmazonEKS_CNI_Policy"
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")
NODE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", CNI_POLICY, "AmazonEC2ContainerRegistryReadOnly")


def without_cni_policy(role: iam.IRole, cni_association: IConstruct) -> None:
    """Take the CNI policy off a node role the L2 node group made (an escape hatch: the L2 attaches it, and
    a role of our own would be a new NodeRole, which replaces the node group), once the VPC CNI has its own."""
    cfn_role = role.node.default_child
    assert isinstance(cfn_role, iam.CfnRole)
    partition = Stack.of(role).partition
    cfn_role.add_property_override("ManagedPolicyArns", [f"arn:{partition}:iam::aws:policy/{p}" for p in NODE_POLICIES])
    role.node.add_dependency(cni_association)

DEFAULT_MIN_NODES = 0  # no idle Trainium node unless asked: Cluster Autoscaler scales up from zero
# The EKS-optimized Neuron AMI release of the default Neuron track (versions.py): never "latest".
DEFAULT_RELEASE_VERSION = EKS_NODEGROUP_RELEASE_VERSION


class TrainiumNodeGroup(Construct):
    """Nodes of one compute group: one subnet, every EFA interface, the placement group, the Neuron
    AMI, and the Neuron taint so that only pods asking for Neuron land there.

    :param cluster: the EKS cluster; an imported one (``eks.Cluster.from_cluster_attributes``) needs its
        ``cluster_security_group_id``, which the launch template adds to every interface.
    :param group: the compute group's nodes: its name (the nodes' group label, what jobs select), instance type,
        most nodes, root volume and capacity (a capacity block's group stays at zero nodes until you scale it up
        once the block starts).
    :param subnets: the group's compute subnets (exactly one for an EFA type).
    :param security_groups: the EFA group; the cluster security group is added here.
    :param placement_group: the group's cluster placement group, or None.
    :param min_nodes: nodes kept when idle. Default: 0.
    :param release_version: the EKS AMI release of the nodes (``1.35.8-20260930``). Default: the pinned
        release of the default Neuron track.
    :param cni_association: the VPC CNI's Pod Identity association (``TrainiumCluster.cni_association``):
        the node role then goes without the CNI policy. Default: None (the node role keeps it).
    :param user_data: the nodes' user data, MIME multi-part (EKS requires it in the launch template of a node
        group with an AMI type, and merges its own NodeConfig: trainium_cdk.runtime.eks_user_data). Default: none.
    :param root_volume_throughput: the root volume's gp3 throughput, MiB/s. Default: gp3's baseline.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        group: GroupNodes,
        subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        placement_group: ec2.IPlacementGroup | None,
        min_nodes: int = DEFAULT_MIN_NODES,
        release_version: str = DEFAULT_RELEASE_VERSION,
        cni_association: IConstruct | None = None,
        user_data: str | None = None,
        root_volume_throughput: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        spec, max_nodes, capacity_block = group.spec, group.max_nodes, group.capacity.is_capacity_block
        if not 0 <= min_nodes <= max_nodes or max_nodes < 1:
            raise ConfigError("min_nodes, max_nodes", [min_nodes, max_nodes], "0 <= min_nodes <= max_nodes, max_nodes >= 1")
        self.spec = spec
        self.launch_template = EfaLaunchTemplate(
            self,
            "LaunchTemplate",
            spec=spec,
            # A launch template that names security groups replaces the cluster group: add it back.
            security_groups=[*security_groups, cluster.cluster_security_group],
            placement_group=placement_group,
            root_volume_gib=group.root_volume_gib,
            capacity=group.capacity,
            user_data=user_data,
            root_volume_throughput=root_volume_throughput,
        )
        self.labels = compute_node_labels(group.group_name, spec.name, spec.has_efa)
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NEURON,
            release_version=release_version,
            capacity_type=eks.CapacityType.CAPACITY_BLOCK if capacity_block else eks.CapacityType.ON_DEMAND,
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.launch_template_id, version=self.launch_template.latest_version
            ),
            subnets=ec2.SubnetSelection(subnets=list(subnets)),
            # EKS updates a capacity-block node group only at desired size 0, and nodes cannot launch
            # before the block starts: scale it up then (README, "Capacity blocks"). Otherwise the group
            # starts at its minimum (0 by default) and Cluster Autoscaler sizes it for pending pods.
            min_size=0 if capacity_block else min_nodes,
            desired_size=0 if capacity_block else min_nodes,
            max_size=max_nodes,
            labels=self.labels,
            # What Cluster Autoscaler needs to scale the group up from zero (it reads DescribeNodegroup).
            tags=node_template_tags(spec, self.labels, {NEURON_TAINT_KEY: f"{NEURON_TAINT_VALUE}:NoSchedule"}),
            # The health taint too (charts/node_health.py): EKS applies node group taints when a node registers
            # (kubelet --register-with-taints) and does not put a removed one back, so the checker can take it
            # off. It stays out of the Cluster Autoscaler tags above: a startup taint (its prefix) is one
            # Cluster Autoscaler ignores when it simulates the group's nodes.
            taints=[
                eks.TaintSpec(effect=eks.TaintEffect.NO_SCHEDULE, key=NEURON_TAINT_KEY, value=NEURON_TAINT_VALUE),
                eks.TaintSpec(effect=eks.TaintEffect.NO_SCHEDULE, key=HEALTH_TAINT_KEY, value=HEALTH_TAINT_VALUE),
            ],
            enable_node_auto_repair=True,
        )
        if cni_association is not None:
            without_cni_policy(self.nodegroup.role, cni_association)
        acknowledge_default_policy(self.nodegroup.role, "the node group's nodes")
        acknowledge(
            self.nodegroup.role,
            "AwsSolutions-IAM4",
            [f"Policy::arn:<AWS::Partition>:iam::aws:policy/{p}" for p in NODE_MANAGED_POLICIES],
            "EKS managed nodes need the AWS-managed worker and ECR read-only policies (and the CNI's, unless the "
            "VPC CNI has its own Pod Identity role), kept current by AWS.",
        )
