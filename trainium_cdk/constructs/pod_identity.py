"""An IAM role bound to a Kubernetes service account through EKS Pod Identity."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


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
    principal = iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)
    role = iam.Role(scope, f"{name}Role", assumed_by=principal, description=description)
    # Pod identity sessions are tagged: the trust policy must allow sts:TagSession too.
    role.assume_role_policy.add_statements(  # type: ignore[union-attr]
        iam.PolicyStatement(actions=["sts:TagSession"], principals=[principal])
    )
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
