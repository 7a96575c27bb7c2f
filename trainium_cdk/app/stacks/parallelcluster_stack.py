"""The ParallelCluster backend stack: a Slurm cluster through ParallelCluster's custom resource."""

from __future__ import annotations

from aws_cdk import CfnOutput, CfnResource, DefaultStackSynthesizer, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sns as sns
from constructs import Construct

from trainium_cdk.app.adapters.parallelcluster import cluster_name, cluster_settings
from trainium_cdk.app.config import Config
from trainium_cdk.app.parallelcluster.health import render_prolog
from trainium_cdk.app.parallelcluster.sbatch import head_node_files
from trainium_cdk.constructs.alerts import notify, parallelcluster_alarm_message, parallelcluster_alarms
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.observability import NeuronNodeMetrics
from trainium_cdk.constructs.parallelcluster import DELETION_POLICIES, SlurmCluster
from trainium_cdk.constructs.prometheus import MetricsWorkspace
from trainium_cdk.constructs.slurm_database import SlurmAccountingDatabase
from trainium_cdk.constructs.storage import LustreStorage
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts.names import (
    OUTPUT_ACCOUNTING_DATABASE_SECRET_ARN,
    OUTPUT_CLUSTER_NAME,
    OUTPUT_DASHBOARD_NAME,
    OUTPUT_HEAD_NODE_INSTANCE_ID,
    OUTPUT_HEAD_NODE_SESSION,
    OUTPUT_VALIDATION_MESSAGES,
)
from trainium_cdk.parallelcluster.accounting import database_name

# ParallelCluster's DeletionPolicy (the config's words) -> the construct's removal policy.
REMOVAL_POLICIES = {deletion: removal for removal, deletion in DELETION_POLICIES.items()}
# Logical ids of Slurm's accounting database (a cluster with teams) that must never change: a new one replaces the
# database, and the teams' usage and the jobs' history with it. The stack pins them, not the construct
# (tests/app/test_logical_ids.py records them).
DATABASE_LOGICAL_IDS = {
    "cluster": "SlurmAccountingDatabase",
    "writer": "SlurmAccountingDatabaseWriter",
    "subnets": "SlurmAccountingDatabaseSubnets",
    "parameters": "SlurmAccountingDatabaseParameters",
    "secret": "SlurmAccountingDatabasePassword",
    "security_group": "SlurmAccountingDatabaseSecurityGroup",
    "client_security_group": "SlurmAccountingDatabaseClients",
}


class ParallelClusterStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        network: TrainingNetwork,
        storage: LustreStorage | None,
        alarm_topic: sns.ITopic,
        metrics_workspace: MetricsWorkspace | None = None,
        **kwargs,
    ) -> None:
        # The scripts the nodes read go under a key prefix of the cluster's own, which the nodes' S3Access
        # names once (cluster_config.read_access): listed one by one, every queue's copy of the list grew with
        # the queues, past CloudFormation's 1 MB template at 50 queues. CDK's own asset upload, no
        # BucketDeployment: that would add a Lambda function with write access to the bucket.
        kwargs.setdefault("synthesizer", DefaultStackSynthesizer(bucket_prefix=scripts_key_prefix(config)))
        super().__init__(
            scope, construct_id, description="trainium-cdk: AWS ParallelCluster (Slurm) with Trainium queues", **kwargs
        )
        # Teams share the cluster through Slurm's accounting (fair share, an account per team): its database.
        self.accounting_database = SlurmAccountingDatabase(
            self, "AccountingDatabase", vpc=network.vpc, subnets=network.private_subnets,
            database_name=database_name(cluster_name(config)),
        ) if config.teams else None
        self.slurm = SlurmCluster(
            self,
            "Slurm",
            cluster_name=cluster_name(config),
            settings=cluster_settings(config),
            head_node_subnet=head_node_subnet(config, network),
            compute_subnets={g.name: network.compute_subnet(g.name) for g in config.compute_groups},
            security_group=network.efa_security_group,
            file_system_id=storage.file_system_id if storage is not None else None,
            batch_scripts=head_node_files(config),
            health_prolog=render_prolog(config),
            removal_policy=REMOVAL_POLICIES[config.parallelcluster.deletion_policy],
            metrics_deployment=cluster_name(config),
            metrics_workspace=metrics_workspace,
            database=self.accounting_database.for_cluster() if self.accounting_database is not None else None,
        )
        if self.accounting_database is not None:
            self._pin_database_ids(self.accounting_database)
            CfnOutput(self, OUTPUT_ACCOUNTING_DATABASE_SECRET_ARN, value=self.accounting_database.secret.secret_arn)
        self.metrics = NeuronNodeMetrics(
            self, "NeuronMetrics", deployment=cluster_name(config),
            file_system_id=storage.file_system_id if storage is not None else None, alarm_topic=alarm_topic,
        )
        # ParallelCluster's own alarms have no actions (its configuration offers none): their state changes are mailed.
        self.cluster_alarms = notify(
            self, "ClusterAlarms", topic=alarm_topic, pattern=parallelcluster_alarms(cluster_name(config)),
            message=parallelcluster_alarm_message(cluster_name(config)),
            description=f"ParallelCluster alarms of {cluster_name(config)} (its head node) to the deployment's topic",
        )
        CfnOutput(self, OUTPUT_DASHBOARD_NAME, value=self.metrics.dashboard.dashboard_name)
        CfnOutput(self, OUTPUT_CLUSTER_NAME, value=self.slurm.cluster_name)
        CfnOutput(self, OUTPUT_HEAD_NODE_INSTANCE_ID, value=self.slurm.head_node_instance_id)
        CfnOutput(
            self,
            OUTPUT_HEAD_NODE_SESSION,
            value=f"aws ssm start-session --region {config.region} --target {self.slurm.head_node_instance_id}",
        )
        CfnOutput(self, OUTPUT_VALIDATION_MESSAGES, value=self.slurm.validation_messages)


    @staticmethod
    def _pin_database_ids(database: SlurmAccountingDatabase) -> None:
        cluster = database.cluster
        children = {
            "cluster": cluster.node.default_child,
            "writer": cluster.node.find_child("Writer").node.default_child,
            "subnets": cluster.node.find_child("Subnets").node.default_child,
            "parameters": cluster.node.find_child("ParameterGroup").node.default_child,
            "secret": database.secret.node.default_child,
            "security_group": database.security_group.node.default_child,
            "client_security_group": database.client_security_group.node.default_child,
        }
        for name, resource in children.items():
            assert isinstance(resource, CfnResource), name
            resource.override_logical_id(DATABASE_LOGICAL_IDS[name])


def scripts_key_prefix(config: Config) -> str:
    """The key prefix of the stack's assets in the CDK asset bucket: the cluster's name, unique in the region."""
    return f"{cluster_name(config)}/"


def head_node_subnet(config: Config, network: TrainingNetwork) -> ec2.ISubnet:
    """The head node's subnet, next to the file system (the storage group's AZ): Lustre traffic and /home
    stay in one AZ."""
    if config.parallelcluster.head_node_subnet == "private":
        return network.compute_subnet(config.storage_group.name)
    az_id = config.storage_group.az_id
    by_az = {s.availability_zone: s for s in network.vpc.public_subnets}
    if az_id not in by_az:
        raise ConfigError("parallelcluster.head_node_subnet", "public", "a public subnet in " + one_of(by_az))
    return by_az[az_id]
