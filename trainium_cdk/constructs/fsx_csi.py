"""The FSx for Lustre CSI driver as an EKS managed add-on: its controller's IAM role through EKS Pod Identity,
allowed to create, update and delete only the file systems it made (dynamic volumes), and its node DaemonSet
tolerating the Neuron taint, so that Trainium nodes mount Lustre."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_cdk.constructs.nag import acknowledge, nag_form
from trainium_cdk.constructs.pod_identity import pod_identity_role
from trainium_cdk.facts.names import NEURON_TAINT_KEY
from trainium_cdk.facts.versions import eks_addon_version

NEURON_TOLERATION = {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
CRITICAL_ADDONS_TOLERATION = {"key": "CriticalAddonsOnly", "operator": "Exists"}
FSX_CSI_ADDON = "aws-fsx-csi-driver"
FSX_CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
# Services whose service-linked roles the FSx CSI controller may create (the second for S3 links).
FSX_SERVICE_LINKED_ROLES = ("fsx.amazonaws.com", "s3.data-source.lustre.fsx.amazonaws.com")
# The FSx CSI controller tags every file system it creates with CSIVolumeName (aws-fsx-csi-driver
# pkg/cloud): it may create only file systems so tagged, and update or delete only those, never the
# storage stack's file system (a static volume, which needs no IAM at all).
FSX_CSI_TAG = "CSIVolumeName"
FSX_CSI_CREATE_ACTIONS = ("fsx:CreateFileSystem", "fsx:TagResource")
FSX_CSI_OWN_ACTIONS = ("fsx:DeleteFileSystem", "fsx:UpdateFileSystem")
# Describe calls have no resource-level permissions.
FSX_CSI_DESCRIBE_ACTIONS = (
    "fsx:DescribeFileSystems",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeNetworkInterfaces",
)
FSX_CSI_ACTIONS = (*FSX_CSI_CREATE_ACTIONS, *FSX_CSI_OWN_ACTIONS, *FSX_CSI_DESCRIBE_ACTIONS)


def fsx_csi_role(scope: Construct, cluster: eks.ICluster) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
    """The controller's role (``FsxCsiRole`` in ``scope``) and its pod identity association."""
    role, association = pod_identity_role(
        scope, "FsxCsi", cluster=cluster, namespace="kube-system", service_account=FSX_CSI_SERVICE_ACCOUNT,
        description="FSx for Lustre CSI controller (EKS pod identity)",
    )
    role.add_to_policy(iam.PolicyStatement(actions=list(FSX_CSI_DESCRIBE_ACTIONS), resources=["*"]))
    role.add_to_policy(iam.PolicyStatement(
        actions=list(FSX_CSI_CREATE_ACTIONS), resources=["*"],
        conditions={"Null": {f"aws:RequestTag/{FSX_CSI_TAG}": "false"}},
    ))
    role.add_to_policy(iam.PolicyStatement(
        actions=list(FSX_CSI_OWN_ACTIONS), resources=["*"],
        conditions={"Null": {f"aws:ResourceTag/{FSX_CSI_TAG}": "false"}},
    ))
    stack = Stack.of(scope)
    linked_roles = [f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/{service}/*"
                    for service in FSX_SERVICE_LINKED_ROLES]
    role.add_to_policy(iam.PolicyStatement(
        actions=["iam:CreateServiceLinkedRole", "iam:AttachRolePolicy", "iam:PutRolePolicy"], resources=linked_roles,
    ))
    acknowledge(
        role,
        "AwsSolutions-IAM5",
        # As the template shows them: references, or the literals of a stack with an account (and, with
        # @aws-cdk/core:enablePartitionLiterals, a partition).
        ["Resource::*", *("Resource::" + nag_form(stack, arn) for arn in linked_roles)],
        "The FSx CSI controller creates file systems whose IDs do not exist yet (only with its "
        "CSIVolumeName tag, and deletes or updates only those), Describe calls have no resource-level "
        "permissions, and the FSx service-linked roles have names AWS chooses.",
    )
    return role, association


def fsx_csi_addon(scope: Construct, cluster: eks.ICluster) -> eks.Addon:
    """The managed add-on (``Addon-aws-fsx-csi-driver`` in ``scope``) at the version versions.py pins."""
    return eks.Addon(
        scope,
        f"Addon-{FSX_CSI_ADDON}",
        cluster=cluster,
        addon_name=FSX_CSI_ADDON,
        addon_version=eks_addon_version(FSX_CSI_ADDON),
        # Trainium nodes carry the Neuron taint: the node DaemonSet must run there to mount Lustre.
        configuration_values={"node": {"tolerations": [NEURON_TOLERATION, CRITICAL_ADDONS_TOLERATION]}},
    )
