"""An IAM role bound to a Kubernetes service account through EKS Pod Identity."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_cdk.constructs.nag import acknowledge_default_policy

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
# The session tags EKS Pod Identity sets when it assumes a role (EKS User Guide, "Create IAM role with trust
# policy required by EKS Pod Identity" and "Enable or disable session tags"): the documented way to tie a
# role to one cluster (eks-cluster-arn is the cluster's ARN, what aws:SourceArn names for other services)
# and to the service account the association binds.
CLUSTER_ARN_TAG = "aws:RequestTag/eks-cluster-arn"
NAMESPACE_TAG = "aws:RequestTag/kubernetes-namespace"
SERVICE_ACCOUNT_TAG = "aws:RequestTag/kubernetes-service-account"


def pod_identity_conditions(cluster_arn: str, namespace: str, service_account: str) -> dict:
    """The trust conditions of a Pod Identity role: its cluster (whose ARN names the account) and its one
    service account, as the session tags EKS Pod Identity documents. No ``aws:SourceAccount``: the EKS docs do
    not say that Pod Identity sets it, and a condition on a key the request lacks denies every pod its
    credentials (the VPC CNI's among them)."""
    return {
        "StringEquals": {
            NAMESPACE_TAG: namespace,
            SERVICE_ACCOUNT_TAG: service_account,
        },
        "ArnEquals": {CLUSTER_ARN_TAG: cluster_arn},
    }


def pod_identity_role(
    scope: Construct,
    name: str,
    *,
    cluster: eks.ICluster,
    namespace: str,
    service_account: str,
    description: str,
) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
    """``<name>Role``, assumable by pods of ``namespace/service_account``, and its
    ``<name>PodIdentity`` association. Grant the role what the pods need."""
    # Pod identity sessions are tagged: the trust policy must allow sts:TagSession too (one statement, so
    # that the conditions below hold for both actions).
    principal = iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL).with_conditions(
        pod_identity_conditions(cluster.cluster_arn, namespace, service_account)
    ).with_session_tags()
    role = iam.Role(scope, f"{name}Role", assumed_by=principal, description=description)
    acknowledge_default_policy(role, f"the pods of {namespace}/{service_account} (EKS Pod Identity)")
    # L1: the association binds the role to a service account that the add-on or a chart creates,
    # so the L2 ServiceAccount (which applies its own manifest) does not fit.
    association = eks.CfnPodIdentityAssociation(
        scope,
        f"{name}PodIdentity",
        cluster_name=cluster.cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.role_arn,
    )
    return role, association
