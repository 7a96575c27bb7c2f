"""KarpenterController: Karpenter on the system nodes, its IAM through Pod Identity, its node role,
and the interruption queue with the EventBridge rules that feed it.

The IAM policy and the rules follow Karpenter's own getting-started CloudFormation template
(karpenter-provider-aws, website/content/en/docs/getting-started/getting-started-with-karpenter/
cloudformation.yaml, for the 1.14 line): node lifecycle scoped to the cluster's tags, the instance
profile actions, resource discovery, and the interruption queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Duration, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IConstruct

from trainium_cdk.constructs import vendored_charts
from trainium_cdk.constructs.eks_nodegroup import NODE_MANAGED_POLICIES, NODE_POLICIES
from trainium_cdk.constructs.nag import acknowledge, acknowledge_default_policy, nag_form
from trainium_cdk.constructs.pod_identity import pod_identity_role
from trainium_cdk.facts import versions

KARPENTER_NAMESPACE = "kube-system"
KARPENTER_SERVICE_ACCOUNT = "karpenter"
# Karpenter reads interruption messages within seconds; older ones describe instances already gone.
QUEUE_RETENTION = Duration.minutes(5)
# Its install waits for the controller pods (image pulls on fresh system nodes).
HELM_WAIT = Duration.minutes(10)
# EC2 and AWS Health events Karpenter acts on (the getting-started template's five rules).
INTERRUPTION_EVENTS: Mapping[str, tuple[str, str]] = {
    "ScheduledChange": ("aws.health", "AWS Health Event"),
    "SpotInterruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "Rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "InstanceStateChange": ("aws.ec2", "EC2 Instance State-change Notification"),
    "CapacityReservationInterruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


@dataclass(frozen=True)
class KarpenterOptions:
    """:param node_selector: labels of the nodes the controller runs on (the system nodes).
    :param replicas: controller replicas. Default: 2 (one per system node, leader-elected)."""

    node_selector: Mapping[str, str]
    replicas: int = 2


class KarpenterController(Construct):
    """Karpenter for one cluster.

    :param cluster: the EKS cluster (``TrainiumCluster.cluster``, or one imported with
        ``eks.Cluster.from_cluster_attributes`` and its kubectl provider: the chart is a Helm release).
    :param cluster_name: its name, known at synth (IAM conditions and the queue name use it).
    :param options: where and how many controllers run.
    :param after: what must exist first: the system node group and the pod identity agent. Default: nothing.
    :param cni_association: the VPC CNI's Pod Identity association (``TrainiumCluster.cni_association``): the
        node role then goes without the CNI policy. Default: None.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        cluster_name: str,
        options: KarpenterOptions,
        after: Sequence[IConstruct] = (),
        cni_association: IConstruct | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self._node_role(cluster, cni_association)
        self._interruption_queue()
        self.role, self.association = pod_identity_role(
            self,
            "Controller",
            cluster=cluster,
            namespace=KARPENTER_NAMESPACE,
            service_account=KARPENTER_SERVICE_ACCOUNT,
            description="Karpenter controller (EKS pod identity)",
        )
        self._grant(stack, cluster_name)
        self.queue.grant_consume_messages(self.role)

        self._charts(cluster, cluster_name, options)
        self.chart.node.add_dependency(self.association, self.crd_chart, *after)
        # The NodePools and EC2NodeClasses, applied after this chart (and so after the CRDs): set by the stack.
        self.node_pools: eks.KubernetesManifest | None = None

    def _node_role(self, cluster: eks.ICluster, cni_association: IConstruct | None) -> None:
        # The role of the nodes Karpenter launches: the EKS worker policies, and an access entry of
        # type EC2_LINUX so that its nodes may join (Karpenter creates the instance profile itself).
        policies = NODE_POLICIES if cni_association is not None else NODE_MANAGED_POLICIES
        self.node_role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in policies],
            description="Trainium nodes launched by Karpenter",
        )
        if cni_association is not None:
            self.node_role.node.add_dependency(cni_association)
        acknowledge_default_policy(self.node_role, "the nodes Karpenter launches")
        acknowledge(
            self.node_role,
            "AwsSolutions-IAM4",
            [f"Policy::arn:<AWS::Partition>:iam::aws:policy/{p}" for p in policies],
            "EKS nodes need the AWS-managed worker and ECR read-only policies (and the CNI's, unless the VPC CNI "
            "has its own Pod Identity role), kept current by AWS.",
        )
        self.node_access = eks.AccessEntry(
            self, "NodeAccess", cluster=cluster, principal=self.node_role.role_arn, access_policies=[],
            access_entry_type=eks.AccessEntryType.EC2_LINUX,
        )

    def _interruption_queue(self) -> None:
        self.queue = sqs.Queue(
            self,
            "InterruptionQueue",
            retention_period=QUEUE_RETENTION,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        acknowledge(
            self.queue,
            "AwsSolutions-SQS3",
            None,
            "Karpenter's interruption queue holds events for minutes; a message it cannot read is stale, not lost work.",
        )
        self.rules = {
            name: events.Rule(
                self,
                f"{name}Rule",
                event_pattern=events.EventPattern(source=[source], detail_type=[detail_type]),
                targets=[targets.SqsQueue(self.queue)],
            )
            for name, (source, detail_type) in INTERRUPTION_EVENTS.items()
        }

    def _charts(self, cluster: eks.ICluster, cluster_name: str, options: KarpenterOptions) -> None:
        stack = Stack.of(self)
        # The CRDs from their own chart, so that a Karpenter upgrade upgrades them too: Helm installs the
        # controller chart's crds/ once and never again (Karpenter's upgrade guide, "CRD Upgrades").
        self.crd_chart = cluster.add_helm_chart(
            "KarpenterCrd",
            chart_asset=vendored_charts.chart_asset(self, "KarpenterCrdChart", "karpenter-crd", cluster),
            namespace=KARPENTER_NAMESPACE,
            release="karpenter-crd",
            # Definitions only, no pods to wait for: it needs no node, and the controller chart that follows
            # waits for its own pods (by then the API server has established the CRDs).
            wait=False,
        )
        self.chart = cluster.add_helm_chart(
            "Karpenter",
            chart_asset=vendored_charts.chart_asset(self, "KarpenterChart", "karpenter", cluster),
            namespace=KARPENTER_NAMESPACE,
            release="karpenter",
            wait=True,
            timeout=HELM_WAIT,
            # Its crds/ are the karpenter-crd chart's, installed above.
            skip_crds=True,
            values={
                "serviceAccount": {"name": KARPENTER_SERVICE_ACCOUNT},
                "replicas": options.replicas,
                # On the system nodes, never on nodes it manages itself.
                "nodeSelector": dict(options.node_selector),
                "controller": {
                    "image": {"repository": versions.KARPENTER_IMAGE_REPOSITORY, "tag": versions.KARPENTER_VERSION,
                              "digest": None},
                    # Without a region Karpenter asks the metadata service and exits when it cannot: it runs
                    # in the pod network of system nodes that answer one hop only (operator.go, GetRegion).
                    "env": [{"name": "AWS_REGION", "value": stack.region}],
                },
                "settings": {
                    "clusterName": cluster_name,
                    "interruptionQueue": self.queue.queue_name,
                    # Node repair (alpha in 1.14, off by default): the AWS provider replaces a node whose
                    # AcceleratedHardwareReady (set by the EKS node monitoring agent on a Neuron error)
                    # has been False for 10 minutes, as managed node groups' nodeRepairConfig does.
                    "featureGates": {"nodeRepair": True},
                },
            },
        )

    def _grant(self, stack: Stack, cluster_name: str) -> None:
        statements = controller_statements(stack, cluster_name, node_role_arn=self.node_role.role_arn)
        for statement in statements:
            self.role.add_to_policy(statement)
        wildcards = sorted({r for st in statements for r in st.resources if r.endswith("*")})
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            [f"Resource::{nag_form(stack, r)}" for r in wildcards],
            "Karpenter launches and ends instances, launch templates and instance profiles whose ids do not "
            "exist yet: each action is scoped to the cluster's ownership tags and the region, as Karpenter's "
            "own CloudFormation template scopes it; Describe and pricing calls have no resource-level permissions.",
        )


def controller_statements(stack: Stack, cluster_name: str, *, node_role_arn: str) -> list[iam.PolicyStatement]:
    """The Karpenter controller's policy, as Karpenter's own CloudFormation template writes it for a cluster."""
    region, partition, account = stack.region, stack.partition, stack.account
    owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    requested = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    ec2 = f"arn:{partition}:ec2:{region}"
    created = [f"{ec2}:*:{kind}/*" for kind in (
        "fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")]
    profile = f"arn:{partition}:iam::{account}:instance-profile/*"
    return [*_ec2_statements(ec2, created, owned, requested, cluster_name),
            *_instance_profile_and_read_statements(stack, cluster_name, profile, owned, requested, node_role_arn)]


def _ec2_statements(ec2: str, created: list[str], owned: dict[str, str], requested: dict[str, str],
                    cluster_name: str) -> list[iam.PolicyStatement]:
    """Launching, tagging and ending the instances and launch templates of the cluster's NodePools."""
    return [
        iam.PolicyStatement(
            sid="AllowScopedEC2InstanceAccessActions",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[f"{ec2}::image/*", f"{ec2}::snapshot/*", f"{ec2}:*:security-group/*", f"{ec2}:*:subnet/*",
                       f"{ec2}:*:capacity-reservation/*", f"{ec2}:*:placement-group/*"],
        ),
        iam.PolicyStatement(
            sid="AllowScopedEC2LaunchTemplateAccessActions",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[f"{ec2}:*:launch-template/*"],
            conditions={"StringEquals": owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedEC2InstanceActionsWithTags",
            actions=["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            resources=created,
            conditions={"StringEquals": requested, "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedResourceCreationTagging",
            actions=["ec2:CreateTags"],
            resources=created,
            conditions={
                "StringEquals": {**requested, "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedResourceTagging",
            actions=["ec2:CreateTags"],
            resources=[f"{ec2}:*:instance/*"],
            conditions={
                "StringEquals": owned,
                "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedDeletion",
            actions=["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            resources=[f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
            conditions={"StringEquals": owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        ),
    ]


def _instance_profile_and_read_statements(
    stack: Stack, cluster_name: str, profile: str, owned: dict[str, str], requested: dict[str, str], node_role_arn: str,
) -> list[iam.PolicyStatement]:
    """Passing the node role, the instance profiles Karpenter makes for it, and the reads it needs."""
    region, partition, account = stack.region, stack.partition, stack.account
    return [
        iam.PolicyStatement(
            sid="AllowPassingInstanceRole",
            actions=["iam:PassRole"],
            resources=[node_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileCreationActions",
            actions=["iam:CreateInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {**requested, "aws:RequestTag/topology.kubernetes.io/region": region},
                "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileTagActions",
            actions=["iam:TagInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {
                    **owned, "aws:ResourceTag/topology.kubernetes.io/region": region, **requested,
                    "aws:RequestTag/topology.kubernetes.io/region": region,
                },
                "StringLike": {
                    "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                },
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileActions",
            actions=["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {**owned, "aws:ResourceTag/topology.kubernetes.io/region": region},
                "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowAPIServerEndpointDiscovery",
            actions=["eks:DescribeCluster"],
            resources=[f"arn:{partition}:eks:{region}:{account}:cluster/{cluster_name}"],
        ),
        iam.PolicyStatement(
            sid="AllowRegionalReadActions",
            actions=[
                "ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates", "ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets",
            ],
            resources=["*"],
            conditions={"StringEquals": {"aws:RequestedRegion": region}},
        ),
        iam.PolicyStatement(
            sid="AllowSSMReadActions",
            actions=["ssm:GetParameter"],
            resources=[f"arn:{partition}:ssm:{region}::parameter/aws/service/*"],
        ),
        iam.PolicyStatement(sid="AllowPricingReadActions", actions=["pricing:GetProducts"], resources=["*"]),
        iam.PolicyStatement(
            sid="AllowUnscopedInstanceProfileListAction", actions=["iam:ListInstanceProfiles"], resources=["*"]
        ),
        iam.PolicyStatement(sid="AllowInstanceProfileReadActions", actions=["iam:GetInstanceProfile"], resources=[profile]),
    ]
