"""ClusterAutoscaler: Cluster Autoscaler for managed node groups (``eks.capacity: managed``).

It finds the node groups by the tags EKS puts on their Auto Scaling groups
(``k8s.io/cluster-autoscaler/enabled`` and ``k8s.io/cluster-autoscaler/<cluster>``) and, for a group
at zero nodes, learns what a node would offer from the node group's ``node-template`` tags through
eks:DescribeNodegroup (Cluster Autoscaler AWS provider README, "Scaling a node group to 0"):
:func:`node_template_tags` writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Duration, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from trainium_cdk.constructs import vendored_charts
from trainium_cdk.constructs.nag import acknowledge, nag_form
from trainium_cdk.constructs.pod_identity import pod_identity_role
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import EFA_RESOURCE, NEURON_RESOURCE, NEURONCORE_RESOURCE, InstanceSpec

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"
HELM_WAIT = Duration.minutes(10)


def node_template_tags(
    spec: InstanceSpec, labels: Mapping[str, str], taints: Mapping[str, str]
) -> dict[str, str]:
    """Node-group tags that tell Cluster Autoscaler what a node of an empty group offers: the Neuron
    and EFA devices (extended resources it cannot know from the instance type), the labels pods select
    and the taints they must tolerate (``key: value:Effect``)."""
    tags = {
        f"{NODE_TEMPLATE}/resources/{NEURON_RESOURCE}": str(spec.neuron_devices),
        f"{NODE_TEMPLATE}/resources/{NEURONCORE_RESOURCE}": str(spec.neuron_cores),
    }
    if spec.has_efa:
        tags[f"{NODE_TEMPLATE}/resources/{EFA_RESOURCE}"] = str(spec.efa_interfaces)
    tags.update({f"{NODE_TEMPLATE}/label/{k}": v for k, v in labels.items()})
    tags.update({f"{NODE_TEMPLATE}/taint/{k}": v for k, v in taints.items()})
    return tags


@dataclass(frozen=True)
class ClusterAutoscalerOptions:
    """:param node_selector: labels of the nodes it runs on (the system nodes).
    :param scale_down_unneeded_time: how long a node stays unneeded before it is removed. Default: 10m."""

    node_selector: Mapping[str, str]
    scale_down_unneeded_time: str = "10m"


class ClusterAutoscaler(Construct):
    """Cluster Autoscaler from its pinned Helm chart, with its IAM through Pod Identity.

    :param cluster: the EKS cluster (``TrainiumCluster.cluster``, or one imported with
        ``eks.Cluster.from_cluster_attributes`` and its kubectl provider: the chart is a Helm release).
    :param cluster_name: its name, known at synth (the ASG tag condition uses it).
    :param options: where it runs and how fast it scales down.
    :param after: what must exist first (the system node group, the pod identity agent). Default: nothing.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        cluster_name: str,
        options: ClusterAutoscalerOptions,
        after: Sequence[IConstruct] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role, self.association = pod_identity_role(
            self, "Controller", cluster=cluster, namespace=NAMESPACE, service_account=SERVICE_ACCOUNT,
            description="Cluster Autoscaler (EKS pod identity)",
        )
        self.role.add_to_policy(iam.PolicyStatement(
            actions=[
                "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
                "autoscaling:DescribeTags", "ec2:DescribeImages", "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplateVersions", "ec2:GetInstanceTypesFromInstanceRequirements",
            ],
            resources=["*"],
        ))
        # It changes only the Auto Scaling groups of this cluster's node groups.
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
            resources=["*"],
            conditions={"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}},
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["eks:DescribeNodegroup"],
            resources=[f"arn:{stack.partition}:eks:{stack.region}:{stack.account}:nodegroup/{cluster_name}/*"],
        ))
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            ["Resource::*", "Resource::" + nag_form(
                stack, f"arn:{stack.partition}:eks:{stack.region}:{stack.account}:nodegroup/{cluster_name}/*")],
            "Describe calls have no resource-level permissions; scaling is limited to Auto Scaling groups "
            "tagged as the cluster's, and DescribeNodegroup to the cluster's node groups.",
        )
        self.chart = cluster.add_helm_chart(
            "ClusterAutoscaler",
            chart_asset=vendored_charts.chart_asset(self, "Chart", "cluster-autoscaler", cluster),
            namespace=NAMESPACE,
            release="cluster-autoscaler",
            wait=True,
            timeout=HELM_WAIT,
            values={
                "cloudProvider": "aws",
                "awsRegion": stack.region,
                "autoDiscovery": {"clusterName": cluster_name},
                "image": {"tag": versions.cluster_autoscaler_image_tag()},
                "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
                "nodeSelector": dict(options.node_selector),
                "extraArgs": {
                    "scale-down-unneeded-time": options.scale_down_unneeded_time,
                    # Trainium groups differ in subnet and placement group: never treat them as one.
                    "balance-similar-node-groups": False,
                    "expander": "least-waste",
                },
            },
        )
        self.chart.node.add_dependency(self.association, *after)
