"""Prometheus-format metrics into Amazon Managed Service for Prometheus (AMP): the workspace, and its managed
collector for an EKS cluster.

- :class:`MetricsWorkspace`: one AMP workspace per deployment (``AWS::APS::Workspace``); hosts (Batch,
  ParallelCluster) remote-write into it with SigV4 (:meth:`MetricsWorkspace.grant_remote_write`).
- :class:`ClusterScraper`: the AWS managed collector (``AWS::APS::Scraper``) for an EKS cluster: ENIs in the
  cluster's subnets with its security group (AMP user guide, "Using an AWS managed collector": the subnets and
  security group of the cluster; at least two subnets in two AZs), an EKS access entry for its service-linked
  role, user ``aps-collector-user``, bound by the RBAC of the same guide ("Configuring your Amazon EKS cluster").
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Fn, Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

# The Kubernetes user the collector's role maps to, and its ClusterRole (AMP user guide, "Configuring your
# Amazon EKS cluster": the ClusterRole aps-collector-role and a binding to the user aps-collector-user).
COLLECTOR_USER = "aps-collector-user"
COLLECTOR_ROLE = "aps-collector-role"
COLLECTOR_RULES = [
    {"apiGroups": [""], "resources": ["nodes", "nodes/proxy", "nodes/metrics", "services", "endpoints", "pods",
                                      "ingresses", "configmaps"], "verbs": ["describe", "get", "list", "watch"]},
    {"apiGroups": ["extensions", "networking.k8s.io"], "resources": ["ingresses/status", "ingresses"],
     "verbs": ["describe", "get", "list", "watch"]},
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
]
REMOTE_WRITE_PATH = "api/v1/remote_write"


class MetricsWorkspace(Construct):
    """An AMP workspace.

    :param alias: the workspace's alias (the deployment's name).
    """

    def __init__(self, scope: Construct, construct_id: str, *, alias: str) -> None:
        super().__init__(scope, construct_id)
        self.workspace = aps.CfnWorkspace(self, "Workspace", alias=alias)
        self.workspace_arn = self.workspace.attr_arn
        # The workspace's endpoint ends in a slash (https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/).
        self.remote_write_url = Fn.join("", [self.workspace.attr_prometheus_endpoint, REMOTE_WRITE_PATH])

    def grant_remote_write(self, grantee: iam.IGrantable) -> iam.Grant:
        """aps:RemoteWrite into this workspace only."""
        return iam.Grant.add_to_principal(grantee=grantee, actions=["aps:RemoteWrite"], resource_arns=[self.workspace_arn])


class ClusterScraper(Construct):
    """The AMP managed collector of an EKS cluster, writing into ``workspace``.

    :param cluster: the EKS cluster.
    :param subnets: the cluster's subnets (two to five, in at least two AZs).
    :param security_group: a group that reaches the pods it scrapes (the cluster security group).
    :param workspace: where the metrics go.
    :param scrape_configuration: the Prometheus configuration (YAML) of what it scrapes.
    """

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, subnets: Sequence[ec2.ISubnet],
                 security_group: ec2.ISecurityGroup, workspace: MetricsWorkspace, scrape_configuration: str) -> None:
        super().__init__(scope, construct_id)
        self.scraper = aps.CfnScraper(
            self, "Scraper",
            source=aps.CfnScraper.SourceProperty(eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                cluster_arn=cluster.cluster_arn, subnet_ids=[s.subnet_id for s in subnets][:5],
                security_group_ids=[security_group.security_group_id])),
            destination=aps.CfnScraper.DestinationProperty(amp_configuration=aps.CfnScraper.AmpConfigurationProperty(
                workspace_arn=workspace.workspace_arn)),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(configuration_blob=scrape_configuration),
        )
        stack = Stack.of(self)
        # The scraper's role is the service-linked role arn:...:role/aws-service-role/scraper.aps.amazonaws.com/
        # AWSServiceRoleForAmazonPrometheusScraper_<id>; the access entry takes it without its path, as the AMP
        # guide's create-access-entry step writes it (the path is fixed for this service: element 3 after "/").
        role_name = Fn.select(3, Fn.split("/", self.scraper.attr_role_arn))
        principal = f"arn:{stack.partition}:iam::{stack.account}:role/{role_name}"
        self.access_entry = eks.CfnAccessEntry(
            self, "AccessEntry", cluster_name=cluster.cluster_name, principal_arn=principal, username=COLLECTOR_USER,
            type="STANDARD",
        )
        self.rbac = eks.KubernetesManifest(self, "Rbac", cluster=cluster, manifest=[
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": COLLECTOR_ROLE},
             "rules": COLLECTOR_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": COLLECTOR_ROLE},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COLLECTOR_ROLE},
             "subjects": [{"kind": "User", "name": COLLECTOR_USER, "apiGroup": "rbac.authorization.k8s.io"}]},
        ])
