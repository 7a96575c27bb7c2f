"""SlurmCluster: an AWS ParallelCluster 3 (Slurm) cluster deployed through CloudFormation.

ParallelCluster creates its clusters itself (its own stack, launch templates, Slurm daemons); its
official CloudFormation custom resource drives that from a template. We deploy the provider it
publishes per version and region as a nested stack and declare one ``Custom::PclusterCluster``
whose ``ClusterConfiguration`` is the document ``parallelcluster.configuration.render_configuration``
renders from the ``settings`` prop and the ids this construct supplies (the same function writes the
YAML for pcluster CLI users). The Neuron setup script and the batch scripts ship as S3 assets the
nodes may read: under the key prefix of the stack's assets (``DefaultStackSynthesizer(bucket_prefix=...)``,
as ParallelClusterStack sets it), the nodes read that prefix and nothing else of the asset bucket.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from aws_cdk import Annotations, Aws, CfnStack, CustomResource, RemovalPolicy, Stack, Stage
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from trainium_cdk import node
from trainium_cdk.constructs.nag import acknowledge, nag_text
from trainium_cdk.constructs.prometheus import MetricsWorkspace
from trainium_cdk.errors import ConfigError, names_construct_path, one_of
from trainium_cdk.facts.session_manager import session_manager_policy
from trainium_cdk.facts.versions import parallelcluster_provider_template_url
from trainium_cdk.node import neuron_metrics, prometheus_node
from trainium_cdk.parallelcluster.accounting import COMMANDS_FILE_NAME, render_commands
from trainium_cdk.parallelcluster.configuration import ClusterSettings, render_configuration
from trainium_cdk.parallelcluster.parts import (
    HEAD_NODE_SCRIPT,
    LUSTRE_TUNING_NAME,
    NODE_POLICY_PATH,
    PROLOG_NAME,
    SETUP_SCRIPT,
    ClusterIds,
    NeuronMetrics,
    PrometheusWriter,
    S3Object,
    SlurmDatabase,
    neuron_metrics_policy,
)

CLUSTER_RESOURCE_TYPE = "Custom::PclusterCluster"
# ParallelCluster's DeletionPolicy of the cluster: what deleting the stack does to it.
DELETION_POLICIES = {RemovalPolicy.DESTROY: "Delete", RemovalPolicy.RETAIN: "Retain"}
DEFAULT_REMOVAL_POLICY = RemovalPolicy.DESTROY


class SlurmCluster(Construct):
    """A ParallelCluster Slurm cluster: a head node and one queue per compute group, with the scripts
    its nodes run uploaded as assets.

    :param cluster_name: the cluster's name (it must differ from every stack name).
    :param settings: what the cluster configuration says besides the ids this construct supplies: the
        region, a queue per compute group, the head node, the Neuron track, tags
        (``trainium_cdk.app.adapters.parallelcluster.cluster_settings`` maps a config to them).
    :param head_node_subnet: the head node's subnet.
    :param compute_subnets: queue (compute group) name -> its one compute subnet.
    :param security_group: the group of every node (the EFA group, also the one FSx accepts clients from).
    :param file_system_id: the FSx for Lustre file system to mount. Default: none (the configuration
        then describes one ParallelCluster creates).
    :param batch_scripts: file name -> text of the batch scripts the head node copies to
        ``~/trainium``. Default: none.
    :param health_prolog: text of the Slurm prolog the head node installs (the node health check).
        Default: none.
    :param setup_script: the Neuron setup script (the queues' OnNodeConfigured and the head node's
        OnNodeUpdated). Default: the package's ``neuron_setup.sh``.
    :param head_node_script: the head node's OnNodeConfigured script, whose S3 key must never change
        (ParallelCluster cannot update it). Default: the package's ``head_node_setup.sh``.
    :param removal_policy: what deleting the stack does to the cluster: destroy (ParallelCluster's
        Delete) or retain. Default: destroy.
    :param metrics_deployment: the compute nodes publish neuron-monitor's metrics to CloudWatch
        (trainium_cdk/node/neuron_metrics.py, uploaded as an asset, with a managed policy that allows
        PutMetricData in its namespace only) with this ``Deployment`` dimension. Default: none (no metrics).
    :param metrics_workspace: with ``metrics_deployment``, the compute nodes also run the Prometheus-format
        exporters and agent (trainium_cdk/node/prometheus_node.py, an asset) and remote-write into this
        workspace (a managed policy with aps:RemoteWrite on it alone). Default: none.
    :param database: the database of Slurm's accounting (``SlurmAccountingDatabase.for_cluster()``), which
        ``settings.accounting`` (a cluster with teams) needs: the head node gets its client security group and
        applies the teams' accounts (their sacctmgr commands, an asset); ParallelCluster's provider may describe its
        secret (its configuration check). Default: none.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        settings: ClusterSettings,
        head_node_subnet: ec2.ISubnet,
        compute_subnets: Mapping[str, ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        file_system_id: str | None = None,
        batch_scripts: Mapping[str, str] | None = None,
        health_prolog: str | None = None,
        setup_script: Path = SETUP_SCRIPT,
        head_node_script: Path = HEAD_NODE_SCRIPT,
        removal_policy: RemovalPolicy = DEFAULT_REMOVAL_POLICY,
        metrics_deployment: str | None = None,
        metrics_workspace: MetricsWorkspace | None = None,
        database: SlurmDatabase | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if removal_policy not in DELETION_POLICIES:
            raise ConfigError("removal_policy", removal_policy, one_of(DELETION_POLICIES))
        if settings.accounting is not None and database is None:
            raise ConfigError("database", None, "a Slurm accounting database (SlurmAccountingDatabase): "
                              "settings.accounting gives the cluster teams, whose accounts live in it")
        self.cluster_name = cluster_name
        self._buckets: dict[str, str] = {}
        self._sha256: dict[str, str] = {}  # asset node id -> the sha256 of its file (what the nodes check)
        self._scripts(settings, database, setup_script, head_node_script, batch_scripts, health_prolog)
        metrics, prometheus = self._metrics(metrics_deployment, metrics_workspace)
        self._session_manager_policy()
        self.ids = ClusterIds(
            head_node_subnet_id=head_node_subnet.subnet_id,
            compute_subnet_ids={name: subnet.subnet_id for name, subnet in compute_subnets.items()},
            efa_security_group_id=security_group.security_group_id,
            file_system_id=file_system_id,
            setup_script=self._object(self.setup_script),
            head_node_script=self._object(self.head_node_script),
            batch_scripts={n: self._object(a) for n, a in self.batch_scripts.items()},
            prologs={PROLOG_NAME: self._object(self.prolog)} if self.prolog is not None else {},
            neuron_metrics=metrics,
            prometheus=prometheus,
            session_manager_policy_arn=self.session_manager_policy.managed_policy_arn,
            lustre_tuning=self._object(self.lustre_tuning),
            database=database if self.accounting_commands is not None else None,
            accounting=self._object(self.accounting_commands) if self.accounting_commands is not None else None,
        )
        if any("/" not in a.s3_object_key for a in self._assets()):
            Annotations.of(self).add_warning_v2(
                "trainium-cdk:scripts-key-prefix",
                "The scripts are at the asset bucket's root: every queue's S3Access lists each of them, so the "
                "configuration grows with queues x scripts. Give the stack DefaultStackSynthesizer(bucket_prefix=...).",
            )
        self.settings = settings
        self.configuration = render_configuration(settings, self.ids)

        self._provider(removal_policy)
        self.head_node_instance_id = self.cluster.get_att_string("headNode.instanceId")
        self.validation_messages = self.cluster.get_att_string("validationMessages")

    def _scripts(self, settings: ClusterSettings, database: SlurmDatabase | None, setup_script: Path,
                 head_node_script: Path, batch_scripts: Mapping[str, str] | None, health_prolog: str | None) -> None:
        """The files the nodes fetch: the setup scripts, the batch scripts, the health prolog, the teams' accounts."""
        self.setup_script = s3_assets.Asset(self, "NeuronSetupScript", path=str(setup_script))
        self.head_node_script = s3_assets.Asset(self, "HeadNodeSetupScript", path=str(head_node_script))
        # The queues' OnNodeStart, with each queue's arguments (settings.queues[].lustre_tuning).
        self.lustre_tuning = s3_assets.Asset(self, "LustreTuningScript", path=str(node.FOLDER / LUSTRE_TUNING_NAME))
        self.batch_scripts = {
            file_name: self._asset(f"BatchScript-{file_name}", self._stage(file_name, text))
            for file_name, text in (batch_scripts or {}).items()
        }
        self.prolog = (
            self._asset("HealthProlog", self._stage(PROLOG_NAME, health_prolog))
            if health_prolog is not None
            else None
        )
        # The teams' sacctmgr commands, which the head node applies (neuron_setup.sh --accounting).
        self.accounting_commands = (
            self._asset("SlurmAccounting", self._stage(COMMANDS_FILE_NAME, render_commands(settings.accounting)))
            if settings.accounting is not None and database is not None
            else None
        )

    def _metrics(self, metrics_deployment: str | None, metrics_workspace: MetricsWorkspace | None,
                 ) -> tuple[NeuronMetrics | None, PrometheusWriter | None]:
        """neuron-monitor into CloudWatch and the Prometheus-format exporters' remote write: programs and policies."""
        self.metrics_program: s3_assets.Asset | None = None
        self.metrics_policy: iam.ManagedPolicy | None = None
        metrics = None
        if metrics_deployment is not None:
            self.metrics_program = self._asset("NeuronMetricsProgram", Path(neuron_metrics.__file__))
            self.metrics_policy = iam.ManagedPolicy(
                self, "NeuronMetricsPolicy", description="Compute nodes: neuron-monitor metrics into CloudWatch",
                path=NODE_POLICY_PATH,
                document=iam.PolicyDocument.from_json(neuron_metrics_policy()),
            )
            acknowledge(
                self.metrics_policy, "AwsSolutions-IAM5", ["Resource::*"],
                "cloudwatch:PutMetricData has no resource-level permissions; the policy allows the Neuron metrics "
                "namespace only (cloudwatch:namespace condition).",
            )
            metrics = NeuronMetrics(
                program=self._object(self.metrics_program), policy_arn=self.metrics_policy.managed_policy_arn,
                deployment=metrics_deployment,
            )
        prometheus = None
        if metrics_workspace is not None and metrics_deployment is not None:
            program = self._asset("PrometheusNodeProgram", Path(prometheus_node.__file__))
            policy = iam.ManagedPolicy(self, "PrometheusRemoteWritePolicy", path=NODE_POLICY_PATH,
                                       description="Compute nodes: remote write into the deployment's metrics workspace")
            policy.add_statements(iam.PolicyStatement(actions=["aps:RemoteWrite"],
                                                      resources=[metrics_workspace.workspace_arn]))
            prometheus = PrometheusWriter(program=self._object(program), policy_arn=policy.managed_policy_arn,
                                          remote_write_url=metrics_workspace.remote_write_url,
                                          deployment=metrics_deployment)
        return metrics, prometheus

    def _session_manager_policy(self) -> None:
        # Session Manager for the head node (the README reaches it with `aws ssm start-session`) and Run Command
        # (`trn submit` runs sbatch through it): the minimal instance policy, as a managed policy because
        # ParallelCluster attaches managed policies only.
        self.session_manager_policy = iam.ManagedPolicy(
            self, "SessionManagerPolicy",
            description="Head node: SSM Session Manager and Run Command only (no parameter reads)",
            path=NODE_POLICY_PATH,
            document=iam.PolicyDocument.from_json(session_manager_policy(Stack.of(self).partition, run_command=True)),
        )
        acknowledge(
            self.session_manager_policy, "AwsSolutions-IAM5",
            ["Resource::*", "Resource::arn:<AWS::Partition>:ec2:*:*:instance/*"],
            "Session Manager's minimal instance policy: the agent registers the instance it runs on (known only at "
            "run time) and opens its message channels (no resource ARN); nothing readable.",
        )

    def _provider(self, removal_policy: RemovalPolicy) -> None:
        """ParallelCluster's provider (its own template) and the cluster, a custom resource of it."""
        # The provider's configuration validator reads every script the configuration names (UrlValidator:
        # HeadObject), and its own role reads only ParallelCluster's buckets: this policy lets it read the
        # scripts' key prefix, as the nodes do (S3Access), and nothing else. Unread, each script is a WARNING
        # in the cluster's validationMessages (an ERROR had the configuration given S3BucketOwner).
        scripts = [f"arn:{Aws.PARTITION}:s3:::{a['BucketName']}/{a['KeyName']}"
                   for a in self.configuration["HeadNode"]["Iam"]["S3Access"]]
        self.provider_policy = iam.ManagedPolicy(
            self, "ProviderReadsScripts", description="ParallelCluster's provider: read the cluster's scripts",
            statements=[iam.PolicyStatement(actions=["s3:GetObject"], resources=scripts)],
        )
        acknowledge(
            self.provider_policy, "AwsSolutions-IAM5",
            [f"Resource::{nag_text(Stack.of(self), s)}" for s in scripts if s.endswith("*")],
            "The objects under the cluster's own key prefix of the asset bucket: its scripts, which the nodes read too.",
        )
        provider_policies = [self.provider_policy.managed_policy_arn]
        self.provider_secret_policy: iam.ManagedPolicy | None = None
        if self.ids.database is not None:
            # The configuration check of SlurmSettings.Database describes the password's secret (its
            # PasswordSecretArnValidator); without this it is a WARNING in validationMessages. The head node's role
            # reads the secret by ParallelCluster's own grant (AllowGettingSlurmDbSecretValue).
            self.provider_secret_policy = iam.ManagedPolicy(
                self, "ProviderDescribesDatabaseSecret",
                description="ParallelCluster's provider: describe the Slurm accounting database's password secret",
                statements=[iam.PolicyStatement(actions=["secretsmanager:DescribeSecret"],
                                                resources=[self.ids.database.password_secret_arn])],
            )
            provider_policies.append(self.provider_secret_policy.managed_policy_arn)
        # L1: ParallelCluster publishes the provider as a plain template at an S3 URL; NestedStack is
        # for stacks written in CDK, and including the template would copy it into ours at synth.
        self.provider = CfnStack(
            self,
            "Provider",
            template_url=parallelcluster_provider_template_url(Stack.of(self).region, Aws.URL_SUFFIX),
            # Its AdditionalIamPolicies are attached to the provider's own role (the Lambda function that creates
            # the cluster: cluster.yaml, PclusterLambdaRole). The node roles' policies need no grant here: their
            # path lets the provider's role attach them (NODE_POLICY_PATH).
            parameters={"AdditionalIamPolicies": ",".join(provider_policies)},
        )
        # A custom resource of ParallelCluster's provider: no CloudFormation type describes a cluster.
        self.cluster = CustomResource(
            self,
            "Cluster",
            service_token=self.provider.get_att("Outputs.ServiceToken").to_string(),
            resource_type=CLUSTER_RESOURCE_TYPE,
            properties={
                "ClusterName": self.cluster_name,
                "ClusterConfiguration": self.configuration,
                "DeletionPolicy": DELETION_POLICIES[removal_policy],
            },
        )

    def _assets(self) -> list[s3_assets.Asset]:
        optional = [self.prolog, self.metrics_program, self.accounting_commands]
        return [self.setup_script, self.head_node_script, self.lustre_tuning, *self.batch_scripts.values(),
                *filter(None, optional)]

    def _object(self, asset: s3_assets.Asset) -> S3Object:
        # Each asset names its bucket with a token of its own: one token per bucket, so that the nodes' S3Access
        # (parallelcluster/cluster_config.py) sees the objects of one bucket as such.
        bucket = json.dumps(Stack.of(self).resolve(asset.s3_bucket_name), sort_keys=True)
        return S3Object(bucket=self._buckets.setdefault(bucket, asset.s3_bucket_name), key=asset.s3_object_key,
                        sha256=self._sha256.get(asset.node.id, ""))

    def _asset(self, construct_id: str, path: Path) -> s3_assets.Asset:
        """An asset the setup script fetches: the sha256 of its content is recorded for its S3Object."""
        self._sha256[construct_id] = hashlib.sha256(path.read_bytes()).hexdigest()
        return s3_assets.Asset(self, construct_id, path=str(path))

    def _stage(self, file_name: str, text: str) -> Path:
        # Rendered files need a path for an asset: stage them in the cloud assembly, by content.
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        stage = Stage.of(self)
        assert stage is not None  # a construct of an app: the app is a stage
        path = Path(stage.asset_outdir) / "trainium-cdk-sources" / digest / file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path
