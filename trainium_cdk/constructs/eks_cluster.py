"""TrainiumCluster: the EKS control plane, system nodes, managed add-ons and the cluster software a
Trainium pod needs (the training namespace, the Neuron and EFA device plugins, FSx storage).

Not Auto Mode: Trainium nodes need launch templates with every EFA interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import cdk8s
import jsii
from aws_cdk import Names, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct

from trainium_cdk.charts import FSX_CHART_ID, NAMESPACE_CHART_ID, FsxStorage, FsxStorageProps, cluster_charts
from trainium_cdk.constructs.efa_launch_template import METADATA_HOP_LIMIT, ROOT_DEVICE_NAME
from trainium_cdk.constructs.eks_cluster_import import ImportedTrainiumCluster, ITrainiumCluster
from trainium_cdk.constructs.eks_nodegroup import CNI_POLICY, NODE_MANAGED_POLICIES, without_cni_policy
from trainium_cdk.constructs.fsx_csi import FSX_CSI_ADDON, fsx_csi_addon, fsx_csi_role
from trainium_cdk.constructs.log_encryption import encrypt_log_groups
from trainium_cdk.constructs.nag import (
    acknowledge,
    acknowledge_custom_resource_lambda,
    acknowledge_default_policy,
)
from trainium_cdk.constructs.pod_identity import pod_identity_role
from trainium_cdk.constructs.service_trust import restrict_service_trust
from trainium_cdk.constructs.storage import ILustreStorage
from trainium_cdk.constructs.volcano import add_volcano
from trainium_cdk.errors import ConfigError, names_construct_path
from trainium_cdk.facts import defaults, versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, Catalog
from trainium_cdk.facts.defaults.cdk import LOG_RETENTION
from trainium_cdk.facts.names import SYSTEM_NODE_DISK_GIB, SYSTEM_NODE_LABELS
from trainium_cdk.facts.versions import EKS_NODEGROUP_RELEASE_VERSION, eks_addon_version

# Add-ons EKS manages for us, each at the version versions.EKS_ADDON_VERSIONS pins for the cluster's minor:
# EKS does not move them when the cluster version changes ("Update an Amazon EKS add-on").
ADDONS = ("vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent")
# EKS installs a self-managed VPC CNI (the aws-node DaemonSet) with every cluster; the managed add-on takes
# it over, and with the default (NONE) its creation fails on any field the two set differently. OVERWRITE
# replaces the self-managed values with the add-on's ("Create the Amazon VPC CNI (Amazon EKS add-on)").
ADDON_RESOLVE_CONFLICTS = {"vpc-cni": "OVERWRITE"}
CNI_SERVICE_ACCOUNT = "aws-node"
# The VPC CNI enforces NetworkPolicies (its network policy agent, eBPF): the training namespace's
# (charts/namespace.py) keeps its pods from the instance metadata service.
ADDON_CONFIGURATION = {"vpc-cni": {"enableNetworkPolicy": "true"}}
# Add-ons that run a Deployment: with no node to run it, EKS reports them DEGRADED and the stack fails.
# They wait for the system node group; the DaemonSet-only ones report ACTIVE with no nodes.
ADDONS_NEEDING_NODES = ("coredns", FSX_CSI_ADDON)
DEFAULT_SYSTEM_INSTANCE_TYPE = ec2.InstanceType("m7i.large")
DEFAULT_SYSTEM_NODES = defaults.SYSTEM_NODES
MAX_SYSTEM_NODES = defaults.MAX_SYSTEM_NODES
DEFAULT_LOG_RETENTION = LOG_RETENTION

@jsii.implements(ec2.IConnectable)
class TrainiumCluster(Construct):
    """An EKS cluster for Trainium training that can run a Neuron pod as it comes.

    Access entries (API authentication), all control-plane logs, secrets encrypted with a KMS key,
    nodes in private subnets, a small system node group, the managed add-ons vpc-cni, coredns,
    kube-proxy, eks-pod-identity-agent and aws-fsx-csi-driver (its IAM through pod identity, its node
    DaemonSet tolerating the Neuron taint), Volcano (gang scheduling), and the cluster charts: the
    training namespace and the Neuron and EFA device plugins (``manifests``, by chart id). :meth:`add_lustre_storage` adds a
    file system's StorageClass and bound claim. Trainium nodes come from :class:`TrainiumNodeGroup`
    or Karpenter node pools.

    :param vpc: the training VPC.
    :param subnets: private subnets of the control plane and system nodes (at least two AZs).
    :param cluster_name: the cluster's name. It names the control-plane log group this construct
        creates (``/aws/eks/<name>/cluster``), so it is known at synth time. Default: derived from
        the construct's path. Changing it replaces the cluster.
    :param public_access_cidrs: IPv4 CIDRs allowed to reach a public API endpoint. Default: none,
        the endpoint is private (reach it from the VPC, a VPN or SSM).
    :param admin_role_arns: IAM roles given cluster admin through access entries: the cluster's only admins
        besides the kubectl provider's role (which applies the stack's manifests), so list the role you work as.
        Default: none.
    :param creator_admin: leave the identity that creates the cluster (the role CloudFormation deploys with) a
        cluster admin for good (EKS's ``bootstrapClusterCreatorAdminPermissions``). Changing it replaces the
        cluster (CloudFormation: "Update requires: Replacement"), which CloudFormation refuses for a named one:
        True only for a cluster created with it. Default: False.
    :param system_instance_type: instance type of the system node group. Default: m7i.large.
    :param system_nodes: nodes of the system node group, 1 to 10. Default: 2.
    :param log_retention: retention of the control-plane and kubectl provider logs. Default: one month.
    :param device_plugins: install the Neuron device plugin and, when ``catalog`` has EFA types, the EFA
        device plugin. Without them no pod can ask for a NeuronCore or an EFA device. Default: True.
    :param catalog: the instance types the device plugins' node affinity lists. Default: the built-in catalog.
    :param neuron_scheduler_extension: install the Neuron scheduler extension. Default: False.
    :param neuron_monitor: install neuron-monitor with a Prometheus endpoint. Default: False.
    :param metrics_exporters: install neuron-monitor and the node exporter (EFA counters, job textfiles) that a
        Prometheus collector scrapes (charts/metrics_exporters.py). Default: False.
    :param volcano: install Volcano (``.volcano``), the gang scheduler of multi-node jobs: all pods of
        a job or none. Default: True.
    :param system_release_version: the EKS AMI release of the system nodes. Default: the release the
        Trainium nodes are pinned to (versions.py), so that a redeploy never moves them.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        cluster_name: str | None = None,
        public_access_cidrs: Sequence[str] = (),
        admin_role_arns: Sequence[str] = (),
        creator_admin: bool = False,
        system_instance_type: ec2.InstanceType = DEFAULT_SYSTEM_INSTANCE_TYPE,
        system_nodes: int = DEFAULT_SYSTEM_NODES,
        log_retention: logs.RetentionDays = DEFAULT_LOG_RETENTION,
        device_plugins: bool = True,
        catalog: Catalog = DEFAULT_CATALOG,
        neuron_scheduler_extension: bool = False,
        neuron_monitor: bool = False,
        metrics_exporters: bool = False,
        system_release_version: str = EKS_NODEGROUP_RELEASE_VERSION,
        volcano: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        if not 1 <= system_nodes <= MAX_SYSTEM_NODES:
            raise ConfigError("system_nodes", system_nodes, f"between 1 and {MAX_SYSTEM_NODES}")
        if not device_plugins and (neuron_scheduler_extension or neuron_monitor or metrics_exporters):
            raise ConfigError(
                "device_plugins", device_plugins, "True with neuron_scheduler_extension or neuron_monitor (they "
                "ship in the Neuron device plugin's chart)"
            )
        cluster_name = cluster_name or Names.unique_resource_name(self, max_length=100, separator="-")
        self.cluster_name = cluster_name
        self._control_plane(vpc, subnets, public_access_cidrs, creator_admin, log_retention)
        for i, arn in enumerate(admin_role_arns):
            self.cluster.grant_cluster_admin(f"Admin{i}", arn)
        self._vpc_cni()
        self._system_node_group(subnets, system_instance_type, system_nodes, system_release_version)
        self._addons()
        self.volcano: eks.HelmChart | None = add_volcano(self.cluster_ref, after=self.system_nodes) if volcano else None

        # The same charts `make synth` writes to dist/, here with the deployed values as tokens.
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        charts = cluster_charts(
            cdk8s.App(), region=Stack.of(self).region, catalog=catalog,
            scheduler_extension=neuron_scheduler_extension, monitor=neuron_monitor, prometheus=metrics_exporters,
            collector_cidr=vpc.vpc_cidr_block,
        )
        for chart in charts:
            if device_plugins or chart.node.id == NAMESPACE_CHART_ID:
                self._add_chart(chart)

    def _control_plane(
        self, vpc: ec2.IVpc, subnets: Sequence[ec2.ISubnet], public_access_cidrs: Sequence[str], creator_admin: bool,
        retention: logs.RetentionDays,
    ) -> None:
        cluster_name = self.cluster_name
        # EKS writes control-plane logs to /aws/eks/<name>/cluster and creates that group, without a
        # retention, unless it exists: create it first, named, so that it expires.
        self.control_plane_logs = logs.LogGroup(
            self, "ControlPlaneLogs", log_group_name=f"/aws/eks/{cluster_name}/cluster", retention=retention,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.secrets_key = kms.Key(self, "SecretsKey", enable_key_rotation=True, description="EKS secrets")
        # Private by default: a public endpoint is opened only to the CIDRs given.
        private_endpoint = not public_access_cidrs
        endpoint = (
            eks.EndpointAccess.PRIVATE
            if private_endpoint
            else eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*public_access_cidrs)
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            # versions.KUBERNETES_VERSION, read here (a test moves it to model an upgrade). The kubectl layer is
            # 1.35's: kubectl is supported within one minor of the API server (Kubernetes version skew policy).
            version=eks.KubernetesVersion.of(versions.KUBERNETES_VERSION),
            cluster_name=cluster_name,
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=list(subnets))],
            endpoint_access=endpoint,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            cluster_logging=list(eks.ClusterLoggingTypes),
            secrets_encryption_key=self.secrets_key,
            # Off: EKS would make the cluster's creator, CloudFormation's execution role, a permanent admin that
            # nothing here needs. aws-eks-v2 gives its kubectl provider's role, which applies every manifest and
            # Helm chart, an access entry of its own (AmazonEKSClusterAdminPolicy, "ClusterAdminRoleAccess").
            bootstrap_cluster_creator_admin_permissions=creator_admin,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=KubectlV35Layer(self, "KubectlLayer"),
                private_subnets=list(subnets) if private_endpoint else None,
            ),
        )
        # The same cluster as an eks.ICluster, for what takes one: aws-cdk-lib's Python stubs leave
        # kubectl_provider_options off Cluster (it has it), so a type checker does not see it as one.
        self.cluster_ref = cast(eks.ICluster, self.cluster)
        # EKS assumes the cluster role for this cluster only (confused deputy: service_trust.py). By name, not
        # by the cluster's ARN attribute: the cluster depends on its role.
        cluster_arn = Stack.of(self).format_arn(service="eks", resource="cluster", resource_name=cluster_name)
        restrict_service_trust(self.cluster.role.node.default_child, {"eks.amazonaws.com": cluster_arn})  # type: ignore[arg-type]
        self.cluster.node.add_dependency(self.control_plane_logs)
        # The group aws-eks-v2 makes for the API endpoint's interfaces and nothing else (the cluster security
        # group, also in ``cluster.connections``, is on every node too): it has no accessor, only this id.
        control_plane_group = self.cluster.node.find_child("ControlPlaneSecurityGroup")
        assert isinstance(control_plane_group, ec2.SecurityGroup)
        self.api_security_group: ec2.ISecurityGroup = control_plane_group
        self._log_lambdas_with_retention(retention)
        encrypt_log_groups(self)
        self._acknowledge_cdk_internals()

    def _vpc_cni(self) -> None:
        # The VPC CNI (aws-node) gets its own role through Pod Identity: on the node role, its policy (ENIs and
        # addresses of the whole VPC) was every pod's that reaches the metadata service.
        self.cni_role, self.cni_association = pod_identity_role(
            self, "VpcCni", cluster=self.cluster_ref, namespace="kube-system", service_account=CNI_SERVICE_ACCOUNT,
            description="VPC CNI (aws-node): ENIs and addresses of the nodes (EKS pod identity)",
        )
        self.cni_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(CNI_POLICY))
        acknowledge(
            self.cni_role, "AwsSolutions-IAM4", [f"Policy::arn:<AWS::Partition>:iam::aws:policy/{CNI_POLICY}"],
            "The policy AWS documents for the VPC CNI, kept current by AWS as the plugin's calls change.",
        )

    def _system_node_group(
        self, subnets: Sequence[ec2.ISubnet], instance_type: ec2.InstanceType, nodes: int, release_version: str,
    ) -> None:
        # A launch template for IMDSv2 with one hop (EKS's own allows two): the data shell, TensorBoard and the
        # data loader run as root here and must not take the node role; what runs here reads the metadata
        # service from the host network or not at all. Its encrypted gp3 root volume replaces EKS's disk size.
        self.system_launch_template = ec2.LaunchTemplate(
            self, "SystemNodesLaunchTemplate",
            require_imdsv2=True,
            http_put_response_hop_limit=METADATA_HOP_LIMIT,
            block_devices=[ec2.BlockDevice(
                device_name=ROOT_DEVICE_NAME,
                volume=ec2.BlockDeviceVolume.ebs(SYSTEM_NODE_DISK_GIB, volume_type=ec2.EbsDeviceVolumeType.GP3, encrypted=True),
            )],
        )
        # "SystemNodeGroup", not the "SystemNodes" of releases without the launch template: EKS refuses a launch
        # template for a node group created without one, so the group is a new one (CloudFormation creates it,
        # then deletes the old; their pods move).
        self.system_nodes = eks.Nodegroup(
            self,
            "SystemNodeGroup",
            cluster=self.cluster_ref,
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.system_launch_template.launch_template_id or "",
                version=self.system_launch_template.latest_version_number,
            ),
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            release_version=release_version,
            instance_types=[instance_type],
            subnets=ec2.SubnetSelection(subnets=list(subnets)),
            min_size=nodes,
            desired_size=nodes,
            max_size=nodes * 2,
            labels=dict(SYSTEM_NODE_LABELS),
        )
        # The node group names the role, so it waits for the association too.
        without_cni_policy(self.system_nodes.role, self.cni_association)
        acknowledge(
            self.system_nodes.role,
            "AwsSolutions-IAM4",
            [f"Policy::arn:<AWS::Partition>:iam::aws:policy/{p}" for p in NODE_MANAGED_POLICIES],
            "EKS managed nodes need the AWS-managed worker and ECR read-only policies, kept current by AWS.",
        )

    def _addons(self) -> None:
        self.addons = {
            name: eks.Addon(self, f"Addon-{name}", cluster=self.cluster_ref, addon_name=name,
                            addon_version=eks_addon_version(name),
                            configuration_values=ADDON_CONFIGURATION.get(name))
            for name in ADDONS
        }
        for name, resolution in ADDON_RESOLVE_CONFLICTS.items():
            # The L2 Addon has no prop for it: set on its CfnAddon.
            cast(eks.CfnAddon, self.addons[name].node.default_child).resolve_conflicts = resolution
        self.fsx_csi_role, self.fsx_csi_association = fsx_csi_role(self, self.cluster_ref)
        self.addons[FSX_CSI_ADDON] = fsx_csi_addon(self, self.cluster_ref)
        # Its controller authenticates through the pod identity agent.
        self.addons[FSX_CSI_ADDON].node.add_dependency(self.fsx_csi_association, self.addons["eks-pod-identity-agent"])
        for name in ADDONS_NEEDING_NODES:
            self.addons[name].node.add_dependency(self.system_nodes)

    @staticmethod
    def from_cluster_attributes(
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        cluster_security_group_id: str,
        vpc: ec2.IVpc,
        kubectl_provider: eks.IKubectlProvider | None = None,
        device_plugins: bool = False,
        catalog: Catalog = DEFAULT_CATALOG,
    ) -> ITrainiumCluster:
        """An EKS cluster made elsewhere, for Trainium nodes: ``TrainiumNodeGroup(cluster=imported.cluster_ref,
        ...)``, ``KarpenterController(cluster=imported.cluster_ref, cluster_name=imported.cluster_name, ...)``,
        ``imported.connections``. Its control plane, add-ons and access entries stay its owner's.

        :param cluster_name: the cluster's name, a literal.
        :param cluster_security_group_id: the cluster security group EKS made (``aws eks describe-cluster --query
            cluster.resourcesVpcConfig.clusterSecurityGroupId``): node launch templates add it to every interface.
        :param vpc: the cluster's VPC.
        :param kubectl_provider: the cluster's kubectl provider, imported with its role
            (``eks.KubectlProvider.from_kubectl_provider_attributes``): manifests and Helm charts (Karpenter's,
            ``device_plugins``) go through it. Default: none (node groups only).
        :param device_plugins: install the training namespace and the Neuron and EFA device plugins, as
            :class:`TrainiumCluster` does; needs ``kubectl_provider``. Default: False (the cluster has them).
        :param catalog: the instance types the device plugins' node affinity lists. Default: the built-in catalog.
        :raises ConfigError: a name that is not a literal EKS name, a malformed group id, device plugins without
            a kubectl provider.
        """
        return ImportedTrainiumCluster(
            scope, construct_id, cluster_name=cluster_name, cluster_security_group_id=cluster_security_group_id,
            vpc=vpc, kubectl_provider=kubectl_provider, device_plugins=device_plugins, catalog=catalog,
        )

    @property
    def connections(self) -> ec2.Connections:
        """The cluster's ``connections``, aws-eks-v2's: the cluster security group (every node) and the API
        endpoint's group, default port 443. ``add_lustre_storage`` already opens Lustre to the nodes."""
        return self.cluster.connections

    @property
    def namespace(self) -> eks.KubernetesManifest:
        """The training namespace's manifest: everything in the namespace comes after it."""
        return self.manifests[NAMESPACE_CHART_ID]

    def _add_chart(self, chart: cdk8s.Chart) -> eks.KubernetesManifest:
        manifest = self.cluster.add_cdk8s_chart(chart.node.id, chart)
        if chart.node.id != NAMESPACE_CHART_ID:
            manifest.node.add_dependency(self.namespace)
        self.manifests[chart.node.id] = manifest
        return manifest

    def add_lustre_storage(
        self, storage: ILustreStorage, *, subnet: ec2.ISubnet, rules_scope: Construct | None = None
    ) -> eks.KubernetesManifest:
        """Let pods mount ``storage``: its StorageClass (dynamic file systems in ``subnet``), a static
        volume and the claim jobs mount (``fsx-lustre``), and Lustre open between the file system and
        the cluster security group, which every node carries (system nodes run the data pods).

        :param storage: the file system: a :class:`LustreStorage`, or one made elsewhere
            (``LustreStorage.from_file_system_attributes``).
        :param subnet: the subnet of file systems the StorageClass creates (the compute subnet).
        :param rules_scope: where the security group rules live. Default: this cluster's stack, so
            that a storage stack never depends on the cluster's.
        """
        storage.allow_client(
            rules_scope or Stack.of(self), "LustreFromCluster", self.cluster.cluster_security_group
        )
        props = FsxStorageProps.of(
            storage, subnet_id=subnet.subnet_id, security_group_id=storage.security_group.security_group_id
        )
        return self._add_chart(FsxStorage(cdk8s.App(), FSX_CHART_ID, **props.as_kwargs()))

    def _log_lambdas_with_retention(self, retention: logs.RetentionDays) -> None:
        """Give every Lambda function of the cluster (CDK's kubectl provider) a log group of ours: left
        alone, Lambda creates /aws/lambda/<function> on first run, outside the stack and never expiring."""
        functions = [c for c in self.cluster.node.find_all() if isinstance(c, lambda_.CfnFunction)]
        for function in functions:
            # An app with @aws-cdk/aws-lambda:useCdkManagedLogGroup (what `cdk init` sets) has CDK make one, kept
            # two years under the same id, which nothing refers to: ours replaces it.
            scope = function.node.scope
            assert isinstance(scope, Construct)  # the function's own construct
            scope.node.try_remove_child("LogGroup")
            group = logs.LogGroup(
                scope, "LogGroup", retention=retention, removal_policy=RemovalPolicy.DESTROY
            )
            function.add_property_override("LoggingConfig.LogGroup", group.log_group_name)

    def _acknowledge_cdk_internals(self) -> None:
        acknowledge(
            self.cluster.role,
            "AwsSolutions-IAM4",
            ["Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy"],
            "The EKS service role policy is the one AWS documents for clusters and keeps current.",
        )
        # The kubectl provider is CDK's own: its Lambda runtime, roles and invoke policy are chosen by
        # aws-eks-v2 and move with aws-cdk-lib upgrades.
        provider = self.cluster.node.find_child("KubectlProvider")
        # cdk-nag names the handler and its condition by logical id, which embeds this construct's path: ask
        # the stack, so that the acknowledgments hold under any construct id.
        handler = provider.node.find_child("Handler")
        stack = Stack.of(self)
        function_id = stack.get_logical_id(handler.node.find_child("Resource"))  # type: ignore[arg-type]
        condition_id = stack.get_logical_id(handler.node.find_child("HasEcrPublic"))  # type: ignore[arg-type]
        public_ecr = (
            f'{{"Fn::If":["{condition_id}",{{"Fn::Join":["",["arn:",'
            '{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},'
            '{"Ref":"AWS::NoValue"}]}'
        )
        acknowledge(
            provider,
            "AwsSolutions-IAM4",
            [
                "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
                "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole",
                "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
                f"Policy::{public_ecr}",
            ],
            "CDK's kubectl provider Lambda: logging, VPC access and pulling its own image, as aws-eks-v2 builds it.",
        )
        acknowledge(
            provider,
            "AwsSolutions-IAM5",
            [f"Resource::<{function_id}.Arn>:*"],
            "CDK's provider framework invokes any version of its own kubectl handler.",
        )
        acknowledge(
            provider,
            "AwsSolutions-L1",
            None,
            "CDK's kubectl handler runtime is pinned by aws-eks-v2 to the one its kubectl layer supports.",
        )
        what = "CDK's kubectl provider (aws-eks-v2: its kubectl handler and the provider framework's onEvent function)"
        acknowledge_custom_resource_lambda(provider, what)
        acknowledge_default_policy(provider, what)


if TYPE_CHECKING:  # mypy holds both to the interface
    def _both_are_trainium_clusters(made: TrainiumCluster, imported: ImportedTrainiumCluster) -> list[ITrainiumCluster]:
        return [made, imported]
