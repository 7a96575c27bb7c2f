"""SlurmAccountingDatabase: the MySQL database of a ParallelCluster cluster's Slurm accounting (issue 46).

Aurora Serverless v2 (MySQL) in the given private subnets, reachable on its port only from a client security group
the construct makes for the cluster's head node (slurmdbd runs there), its password in Secrets Manager as plain text
(ParallelCluster's ``SlurmSettings.Database.PasswordSecretArn`` takes the secret's string as the password). Stateful:
job history and each team's use live in it, so it takes an explicit removal policy (default: a final snapshot). Its
logical ids follow the construct's path; an app that must keep them pins them in its own stack (the app's
ParallelCluster stack does).
"""

from __future__ import annotations

from collections.abc import Sequence

import jsii
from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from trainium_cdk.constructs.nag import NIST, acknowledge
from trainium_cdk.errors import ConfigError, names_construct_path, one_of
from trainium_cdk.facts.versions import AURORA_MYSQL_VERSION
from trainium_cdk.parallelcluster.accounting import DATABASE_MIN_CAPACITY_ACU
from trainium_cdk.parallelcluster.parts import SlurmDatabase

# MySQL's port: ParallelCluster's Database.Uri names it; only the client group reaches it.
DATABASE_PORT = 3306
DEFAULT_USER_NAME = "slurm"
# Aurora capacity units: 0.5 (1 GiB) while slurmdbd writes a few records a minute, up to 4 for a month's rollup.
# slurmdbd keeps its connection open, so the database never pauses: 0 would save nothing.
DEFAULT_MIN_CAPACITY = DATABASE_MIN_CAPACITY_ACU
DEFAULT_MAX_CAPACITY = 4.0
DEFAULT_BACKUP_RETENTION_DAYS = 7
# A final snapshot when the stack goes: the teams' history stays restorable, and nothing runs.
DEFAULT_REMOVAL_POLICY = RemovalPolicy.SNAPSHOT
REMOVAL_POLICIES = (RemovalPolicy.SNAPSHOT, RemovalPolicy.RETAIN, RemovalPolicy.DESTROY)
# The password's characters: letters and digits only. ParallelCluster writes it into slurmdbd.conf through sed and
# echo (its update_slurm_database_password.sh), and MySQL's clients read '#', quotes and spaces there.
PASSWORD_LENGTH = 32
# SchedMD's accounting guide: slurmdbd's rollups and purges hold locks for minutes on a large database; InnoDB's
# default of 50 s fails them (slurmdbd logs "Database settings not recommended values: innodb_lock_wait_timeout").
INNODB_LOCK_WAIT_TIMEOUT_S = 900


@jsii.implements(ec2.IConnectable)
class SlurmAccountingDatabase(Construct):
    """A MySQL database for slurmdbd, reachable only from :attr:`client_security_group`.

    :param vpc: the VPC.
    :param subnets: private subnets in at least two AZs (Aurora's subnet group needs two).
    :param database_name: the database slurmdbd creates in it (0-9, a-z and _, at most 64: ParallelCluster's
        Database.DatabaseName).
    :param user_name: the database user slurmdbd logs in as. Default: ``slurm``.
    :param min_capacity: Aurora Serverless v2's least capacity, in ACUs. Default: 0.5.
    :param max_capacity: its most capacity, in ACUs. Default: 4.
    :param backup_retention_days: days of automated backups (1-35). Default: 7.
    :param removal_policy: what deleting the stack does to the database: a final snapshot, retain or destroy.
        Default: a final snapshot.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        database_name: str,
        user_name: str = DEFAULT_USER_NAME,
        min_capacity: float = DEFAULT_MIN_CAPACITY,
        max_capacity: float = DEFAULT_MAX_CAPACITY,
        backup_retention_days: int = DEFAULT_BACKUP_RETENTION_DAYS,
        removal_policy: RemovalPolicy = DEFAULT_REMOVAL_POLICY,
    ) -> None:
        super().__init__(scope, construct_id)
        if removal_policy not in REMOVAL_POLICIES:
            raise ConfigError("removal_policy", removal_policy, one_of(REMOVAL_POLICIES))
        if not 1 <= backup_retention_days <= 35:
            raise ConfigError("backup_retention_days", backup_retention_days, "1 to 35 (Aurora's automated backups)")
        if not 0.5 <= min_capacity <= max_capacity <= 256:
            raise ConfigError("min_capacity, max_capacity", (min_capacity, max_capacity),
                              "0.5 <= min_capacity <= max_capacity <= 256 ACUs (Aurora Serverless v2)")
        self.database_name = database_name
        self.user_name = user_name
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=False,
            description="Slurm accounting database: MySQL from its clients (the head node) only",
        )
        self.client_security_group = ec2.SecurityGroup(
            self, "ClientSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description="Clients of the Slurm accounting database (the ParallelCluster head node)",
        )
        self.client_security_group.connections.allow_to(
            self.security_group, ec2.Port.tcp(DATABASE_PORT), "slurmdbd to its database")
        self.secret = secretsmanager.Secret(
            self, "Password", description=f"Password of database user {user_name} (Slurm's accounting, slurmdbd)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=PASSWORD_LENGTH, exclude_punctuation=True, include_space=False),
            removal_policy=RemovalPolicy.DESTROY if removal_policy == RemovalPolicy.DESTROY else RemovalPolicy.RETAIN,
        )
        engine = rds.DatabaseClusterEngine.aurora_mysql(
            version=rds.AuroraMysqlEngineVersion.of(f"8.0.mysql_aurora.{AURORA_MYSQL_VERSION}", "8.0"))
        self.cluster = rds.DatabaseCluster(
            self, "Cluster", engine=engine,
            # A long-term support release stays on it (Aurora's advice for LTS: no automatic minor upgrades).
            writer=rds.ClusterInstance.serverless_v2("Writer", auto_minor_version_upgrade=False),
            serverless_v2_min_capacity=min_capacity, serverless_v2_max_capacity=max_capacity,
            vpc=vpc, vpc_subnets=ec2.SubnetSelection(subnets=list(subnets)), security_groups=[self.security_group],
            port=DATABASE_PORT,
            credentials=rds.Credentials.from_password(user_name, self.secret.secret_value),
            parameters={"innodb_lock_wait_timeout": str(INNODB_LOCK_WAIT_TIMEOUT_S)},
            storage_encrypted=True,
            backup=rds.BackupProps(retention=Duration.days(backup_retention_days)),
            cloudwatch_logs_exports=["error", "slowquery"],
            removal_policy=removal_policy,
        )
        self.connections = self.cluster.connections
        self._acknowledge()

    @property
    def uri(self) -> str:
        """``host:port`` of the writer (ParallelCluster's Database.Uri)."""
        return f"{self.cluster.cluster_endpoint.hostname}:{DATABASE_PORT}"

    def for_cluster(self) -> SlurmDatabase:
        """The database as the cluster configuration names it (``parts.SlurmDatabase``)."""
        return SlurmDatabase(
            uri=self.uri, user_name=self.user_name, password_secret_arn=self.secret.secret_arn,
            database_name=self.database_name, client_security_group_id=self.client_security_group.security_group_id,
        )

    def _acknowledge(self) -> None:
        acknowledge(
            self.secret, "AwsSolutions-SMG4", None,
            "ParallelCluster reads the password into slurmdbd.conf when the head node is configured or updated; a "
            "rotation would change it under a running slurmdbd (pcluster update-cluster reads it again).",
        )
        acknowledge(self.secret, f"{NIST}-SecretsManagerRotationEnabled", None,
                    "As AwsSolutions-SMG4: slurmdbd reads the password when the head node is configured.")
        acknowledge(self.secret, f"{NIST}-SecretsManagerUsingKMSKey", None,
                    "Encrypted with Secrets Manager's key (aws/secretsmanager); the head node's role, which "
                    "ParallelCluster grants GetSecretValue on this secret, needs no key policy of ours.")
        acknowledge(
            self.cluster, "AwsSolutions-RDS6", None,
            "slurmdbd logs in with a password (slurmdbd.conf StoragePass); it has no IAM database authentication.",
        )
        kept = ("The removal policy keeps a final snapshot (or the database) when the stack is deleted; deletion "
                "protection would stop `make destroy` of the ParallelCluster stack.")
        acknowledge(self.cluster, "AwsSolutions-RDS10", None, kept)
        acknowledge(self.cluster, f"{NIST}-RDSInstanceDeletionProtectionEnabled", None, kept)
        for log in ("audit", "general"):
            acknowledge(
                self.cluster, f"{NIST}-RDSLoggingEnabled", [f"LogExport::{log}"],
                "The error and slow-query logs are exported; the general and audit logs would record every statement "
                "slurmdbd sends (a few a second, all its own), at a cost and with nothing a person did in them.",
            )
        writer = self.cluster.node.find_child("Writer")
        acknowledge(
            writer, f"{NIST}-RDSEnhancedMonitoringEnabled", None,
            "CloudWatch's Aurora metrics (capacity, CPU, connections) cover a database of 0.5-4 ACUs that one daemon "
            "writes to; enhanced monitoring would add a role and per-second OS metrics nobody reads.",
        )
        acknowledge(
            writer, f"{NIST}-RDSInBackupPlan", None,
            "Aurora's automated backups (point-in-time restore over the retention) and a final snapshot when the "
            "stack goes: job history needs no second backup schedule.",
        )
        acknowledge(
            self.cluster, "AwsSolutions-RDS11", None,
            "MySQL's port, which ParallelCluster's Database.Uri names; the database's group admits the head node's "
            "client group alone.",
        )
        acknowledge(
            self.cluster, "AwsSolutions-RDS14", None,
            "Backtrack: slurmdbd's records are appended by the minute; point-in-time restore from the automated "
            "backups covers a mistake.",
        )
