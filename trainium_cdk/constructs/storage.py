"""LustreStorage: FSx for Lustre shared by every node (datasets, checkpoints, the Neuron compile cache).

Stateful: the file system (and a bucket it creates) take an explicit removal policy. Their logical ids follow the
construct's path, as aws-cdk-lib's do, so that two work in one stack; an app that must keep ids it deployed under
pins them in its own stack (the app's storage stack does: trainium_cdk/app/stacks/storage_stack.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import jsii
from aws_cdk import Duration, Names, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from trainium_cdk.constructs.nag import NIST, acknowledge, acknowledge_bucket_logging
from trainium_cdk.errors import ConfigError, names_construct_path, one_of
from trainium_cdk.facts.catalog import LUSTRE_MIN_CAPACITY_GIB, check_lustre
from trainium_cdk.facts.defaults import cdk as cdk_defaults
from trainium_cdk.facts.names import CHECKPOINT_FILE_SYSTEM_PATH

# Lustre network (LNET) ports: clients connect to 988; 1018-1023 are the reserved ports of both ends. FSx for Lustre
# user guide, "File system access control with Amazon VPC": inbound TCP 988 and 1018-1023 on the file system's group
# from its clients and itself, and the same inbound on the clients' groups from the file system's.
LUSTRE_PORT_RANGES = ((988, 988), (1018, 1023))
LUSTRE_CLIENT_PORT = ec2.Port.tcp(LUSTRE_PORT_RANGES[0][0])
LUSTRE_PORTS = tuple(ec2.Port.tcp_range(low, high) if low != high else ec2.Port.tcp(low) for low, high in LUSTRE_PORT_RANGES)

DEFAULT_CAPACITY_GIB = LUSTRE_MIN_CAPACITY_GIB
DEFAULT_DEPLOYMENT_TYPE = fsx.LustreDeploymentType.PERSISTENT_2
DEFAULT_THROUGHPUT_MB_PER_TIB = 250
DEFAULT_COMPRESSION = fsx.LustreDataCompressionType.LZ4
DEFAULT_VERSION = fsx.FileSystemTypeVersion.V_2_15
# Losing a file system loses datasets and checkpoints: keep it unless asked otherwise.
DEFAULT_REMOVAL_POLICY = RemovalPolicy.RETAIN
DEFAULT_BACKUP_RETENTION_DAYS = 7
MAX_BACKUP_RETENTION_DAYS = 90
# CloudFormation cannot snapshot an FSx file system on delete (DeletionPolicy: Snapshot).
REMOVAL_POLICIES = tuple(cdk_defaults.REMOVAL_POLICIES.values())
_S3_EVENTS = ["NEW", "CHANGED", "DELETED"]


@dataclass(frozen=True)
class DataRepositoryProps:
    """An S3 prefix linked to a path of the file system.

    :param bucket_name: an existing bucket; None creates one, with the file system's removal policy.
        Default: None.
    :param s3_prefix: the prefix in the bucket; empty links the whole bucket. Default: "".
    :param file_system_path: the path in the file system that mirrors the prefix. Default: /s3.
    :param auto_import: new, changed and deleted S3 objects show up in the file system. Default: True.
    :param auto_export: new, changed and deleted files are exported to S3. Default: True.
    """

    bucket_name: str | None = None
    s3_prefix: str = ""
    file_system_path: str = "/s3"
    auto_import: bool = True
    auto_export: bool = True


class LustreMount(Protocol):
    """What a client needs to mount an FSx for Lustre file system (TrainiumBatch, DevInstance): the file
    system's DNS name and Lustre mount name. :class:`LustreStorage` is one; so is what
    :meth:`LustreStorage.from_file_system_attributes` returns for a file system made elsewhere."""

    @property
    def dns_name(self) -> str: ...

    @property
    def mount_name(self) -> str: ...


class ILustreStorage(LustreMount, Protocol):
    """An FSx for Lustre file system as :meth:`TrainiumCluster.add_lustre_storage` needs it: the mount, its
    id and security group, the facts its StorageClass repeats (FSx API values: ``PERSISTENT_2``, ``LZ4``,
    ``2.15``), and Lustre opened to a client group with rules in the client's scope."""

    @property
    def file_system_id(self) -> str: ...

    @property
    def security_group(self) -> ec2.ISecurityGroup: ...

    @property
    def capacity_gib(self) -> int: ...

    @property
    def deployment_type(self) -> str: ...

    @property
    def throughput_mb_per_tib(self) -> int | None: ...

    @property
    def compression(self) -> str: ...

    @property
    def lustre_version(self) -> str: ...

    @property
    def connections(self) -> ec2.Connections: ...

    def allow_client(self, scope: Construct, construct_id: str, client: ec2.ISecurityGroup) -> None: ...


class LustreConnections(ec2.Connections):
    """The ``connections`` of an FSx for Lustre file system (``ec2.IConnectable``): its security group, and
    ``default_port`` TCP 988, the port clients connect to.

    ``allow_default_port_from(client)`` opens all that FSx documents for a client, both ways: TCP 988 and
    1018-1023 from each of the client's groups to the file system's, the file system's egress to them, and the
    same ports into the client's groups from the file system's (Lustre servers call clients back). The rules live
    in each client group's stack, so that the file system's (stateful) stack never depends on its clients'. It
    takes the client's groups as they are when called, and skips a group already open (``clients=``,
    ``allow_client``, ``TrainiumCluster.add_lustre_storage``): EC2 refuses a duplicate rule at deploy.
    """

    def __init__(self, security_group: ec2.ISecurityGroup) -> None:
        super().__init__(security_groups=[security_group], default_port=LUSTRE_CLIENT_PORT)
        self._server = security_group
        # By group id: a token's string is the same for one group, a literal the same for two imports of one.
        self._opened: set[str] = set()

    def opened(self, client: ec2.ISecurityGroup) -> bool:
        """Note ``client`` as open; True if it was already."""
        key = client.security_group_id
        seen = key in self._opened
        self._opened.add(key)
        return seen

    def allow_default_port_from(self, other: ec2.IConnectable, description: str | None = None) -> None:
        """Open Lustre between the file system and each group of ``other`` (the rules' descriptions are
        Lustre's own: ``description`` is not used)."""
        for client in other.connections.security_groups:
            if not self.opened(client):
                construct_id = f"Lustre{Names.unique_id(client)}To{Names.unique_id(self._server)}"
                allow_lustre_client(Stack.of(client), construct_id, server=self._server, client=client)


@jsii.implements(ec2.IConnectable)
class _ImportedLustreStorage(Construct):
    """What :meth:`LustreStorage.from_file_system_attributes` returns; its props are that method's. It creates
    nothing: a construct, as aws-cdk-lib's imports are, so that an app's code names it in the tree."""

    def __init__(
        self, scope: Construct, construct_id: str, *, file_system_id: str, dns_name: str, mount_name: str,
        security_group: ec2.ISecurityGroup, capacity_gib: int, deployment_type: str,
        throughput_mb_per_tib: int | None, compression: str, lustre_version: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.file_system_id, self.dns_name, self.mount_name = file_system_id, dns_name, mount_name
        self.security_group, self.capacity_gib, self.deployment_type = security_group, capacity_gib, deployment_type
        self.throughput_mb_per_tib, self.compression = throughput_mb_per_tib, compression
        self.lustre_version = lustre_version
        self.connections = LustreConnections(security_group)

    def allow_client(self, scope: Construct, construct_id: str, client: ec2.ISecurityGroup) -> None:
        self.connections.opened(client)
        allow_lustre_client(scope, construct_id, server=self.security_group, client=client)


@jsii.implements(ec2.IConnectable)
class LustreStorage(Construct):
    """An FSx for Lustre file system in the compute subnet, open to its clients on the Lustre ports.

    :param vpc: the training VPC.
    :param subnet: the compute subnet (a file system lives in one subnet; put it next to the nodes).
    :param clients: security groups of the nodes that mount it (the EFA security group).
    :param capacity_gib: storage capacity, 1200 GiB or a multiple of 2400 GiB. Default: 1200.
    :param deployment_type: PERSISTENT_2 or SCRATCH_2. Default: PERSISTENT_2.
    :param throughput_mb_per_tib: PERSISTENT_2 throughput per TiB (125, 250, 500 or 1000); None for
        SCRATCH_2. Default: 250.
    :param compression: data compression. Default: LZ4.
    :param file_system_type_version: the Lustre version. Default: 2.15.
    :param removal_policy: what deleting the stack does to the file system and a bucket it creates,
        RETAIN or DESTROY. Default: RETAIN. Changing it never replaces the file system.
    :param data_repository: an S3 data repository association. Default: None.
    :param backup_retention_days: days daily automatic backups are kept (0 to 90; 0: none), PERSISTENT_2
        only, and only with no S3 link (no ``data_repository``, no ``checkpoint_bucket``): FSx backs up no file
        system linked to S3. Default: 7 for PERSISTENT_2 linked to no bucket, else 0. Changed in place.
    :param checkpoint_bucket: export ``/checkpoints`` (every backend's ``/fsx/checkpoints``) to this bucket: new,
        changed and deleted files, automatically, and a file system created later lists what the bucket holds.
        The checkpoints then outlive the file system. Default: none.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        clients: Sequence[ec2.ISecurityGroup],
        capacity_gib: int = DEFAULT_CAPACITY_GIB,
        deployment_type: fsx.LustreDeploymentType = DEFAULT_DEPLOYMENT_TYPE,
        throughput_mb_per_tib: int | None = DEFAULT_THROUGHPUT_MB_PER_TIB,
        compression: fsx.LustreDataCompressionType = DEFAULT_COMPRESSION,
        file_system_type_version: fsx.FileSystemTypeVersion = DEFAULT_VERSION,
        removal_policy: RemovalPolicy = DEFAULT_REMOVAL_POLICY,
        data_repository: DataRepositoryProps | None = None,
        backup_retention_days: int | None = None,
        checkpoint_bucket: s3.IBucket | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        check_lustre(deployment_type.value, capacity_gib, throughput_mb_per_tib)
        persistent = deployment_type.value.startswith("PERSISTENT")
        days = _backup_retention(backup_retention_days, deployment_type.value,
                                 linked=data_repository is not None or checkpoint_bucket is not None)
        if removal_policy not in REMOVAL_POLICIES:
            raise ConfigError(
                "removal_policy", removal_policy.value,
                one_of(p.value for p in REMOVAL_POLICIES) + " (CloudFormation cannot snapshot an FSx file system)",
            )
        removal = removal_policy
        # What the file system is, for the charts that mount it (FSx API values).
        self.capacity_gib = capacity_gib
        self.deployment_type: str = deployment_type.value
        self.throughput_mb_per_tib = throughput_mb_per_tib
        self.compression: str = compression.value
        self.lustre_version = _lustre_version(file_system_type_version)
        self._security_group(vpc, clients, removal)
        self.file_system = fsx.LustreFileSystem(
            self,
            "FileSystem",
            vpc=vpc,
            vpc_subnet=subnet,
            security_group=self.security_group,
            storage_capacity_gib=capacity_gib,
            file_system_type_version=file_system_type_version,
            lustre_configuration=fsx.LustreConfiguration(
                deployment_type=deployment_type,
                per_unit_storage_throughput=throughput_mb_per_tib,
                data_compression_type=compression,
                automatic_backup_retention=Duration.days(days) if persistent else None,
            ),
            removal_policy=removal,
        )
        self.bucket: s3.IBucket | None = None
        self.association: fsx.CfnDataRepositoryAssociation | None = None
        self._data_prefix = data_repository.s3_prefix if data_repository is not None else ""
        if data_repository is not None:
            self._data_repository(data_repository, removal)
        self.checkpoint_association: fsx.CfnDataRepositoryAssociation | None = None
        if checkpoint_bucket is not None:
            self._checkpoint_export(checkpoint_bucket, removal)

    def _security_group(self, vpc: ec2.IVpc, clients: Sequence[ec2.ISecurityGroup], removal: RemovalPolicy) -> None:
        """The file system's group: Lustre from and to its clients and itself, and the clients' rules for it."""
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="FSx for Lustre: TCP 988 and 1018-1023 from its clients and itself",
            allow_all_outbound=False,
        )
        self._connections = LustreConnections(self.security_group)
        for client in clients:
            self._connections.opened(client)
        # The file system's interfaces carry the group: a retained file system keeps it in use, and deleting it
        # would fail the stack's deletion (DELETE_FAILED). It stays and goes with the file system.
        self.security_group.apply_removal_policy(removal)
        # The L2 file system adds ingress from the group itself on 988-1023; clients and egress are ours.
        for peer in (self.security_group, *clients):
            for port in LUSTRE_PORTS:
                if peer is not self.security_group:
                    self.security_group.add_ingress_rule(peer, port, "Lustre from clients")
                self.security_group.add_egress_rule(peer, port, "Lustre")
        # FSx documents client rules too: Lustre servers call clients back on the same ports. L1 rules,
        # because the L2 would put them in the clients' (network) stack and make it depend on this one.
        for i, client in enumerate(clients):
            for low, high in LUSTRE_PORT_RANGES:
                ec2.CfnSecurityGroupIngress(
                    self,
                    f"ClientIngress{i}-{low}",
                    group_id=client.security_group_id,
                    source_security_group_id=self.security_group.security_group_id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description="Lustre from FSx",
                )

    def _data_repository(self, repo: DataRepositoryProps, removal: RemovalPolicy) -> None:
        """The S3 data repository: its bucket (named, or one made here) and the association with the file system."""
        if repo.bucket_name:
            self.bucket = s3.Bucket.from_bucket_name(self, "DataBucket", repo.bucket_name)
        else:
            self.bucket = _data_bucket(self, removal)
        # No L2 exists for data repository associations.
        self.association = fsx.CfnDataRepositoryAssociation(
            self,
            "DataRepositoryAssociation",
            file_system_id=self.file_system.file_system_id,
            file_system_path=repo.file_system_path,
            data_repository_path=f"s3://{self.bucket.bucket_name}/{repo.s3_prefix}",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=(
                    fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(events=_S3_EVENTS)
                    if repo.auto_import
                    else None
                ),
                auto_export_policy=(
                    fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=_S3_EVENTS)
                    if repo.auto_export
                    else None
                ),
            ),
        )
        self.association.apply_removal_policy(removal)

    def _checkpoint_export(self, bucket: s3.IBucket, removal: RemovalPolicy) -> None:
        # L1: no L2 exists for data repository associations. Export only: a checkpoint in the bucket shows up
        # again in a new file system (the import of metadata on create), never over one being written.
        self.checkpoint_association = fsx.CfnDataRepositoryAssociation(
            self,
            "CheckpointExport",
            file_system_id=self.file_system.file_system_id,
            file_system_path=CHECKPOINT_FILE_SYSTEM_PATH,
            data_repository_path=f"s3://{bucket.bucket_name}/",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=_S3_EVENTS),
            ),
        )
        self.checkpoint_association.apply_removal_policy(removal)

    @property
    def connections(self) -> ec2.Connections:
        """The file system's security group as ``ec2.IConnectable`` (:class:`LustreConnections`):
        ``storage.connections.allow_default_port_from(client)`` opens Lustre to a client, both ways, with the
        rules in the client's stack."""
        return self._connections

    def allow_client(self, scope: Construct, construct_id: str, client: ec2.ISecurityGroup) -> None:
        """Deprecated: ``connections.allow_default_port_from(client)`` opens the same rules. This one names the
        rules' scope and id, which keeps the logical ids of rules made with it."""
        self._connections.opened(client)
        allow_lustre_client(scope, construct_id, server=self.security_group, client=client)

    def grant_read_data(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` read the S3 data repository the file system mirrors (its prefix of the bucket): a
        job that reads the data set from S3, not through Lustre.

        :raises ConfigError: the file system has no data repository.
        """
        return self._data_bucket().grant_read(grantee, self._data_prefix + "*")

    def grant_read_write_data(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` read and write the S3 data repository's prefix: files written there show up in the
        file system with the association's auto import.

        :raises ConfigError: the file system has no data repository.
        """
        return self._data_bucket().grant_read_write(grantee, self._data_prefix + "*")

    def _data_bucket(self) -> s3.IBucket:
        if self.bucket is None:
            raise ConfigError("data_repository", None, "a DataRepositoryProps: the file system has no S3 data "
                              "repository to grant access to")
        return self.bucket

    @staticmethod
    def from_file_system_attributes(
        scope: Construct,
        construct_id: str,
        *,
        file_system_id: str,
        dns_name: str,
        mount_name: str,
        security_group: ec2.ISecurityGroup,
        capacity_gib: int,
        deployment_type: fsx.LustreDeploymentType = DEFAULT_DEPLOYMENT_TYPE,
        throughput_mb_per_tib: int | None = DEFAULT_THROUGHPUT_MB_PER_TIB,
        compression: fsx.LustreDataCompressionType = DEFAULT_COMPRESSION,
        file_system_type_version: fsx.FileSystemTypeVersion = DEFAULT_VERSION,
    ) -> ILustreStorage:
        """A file system made elsewhere (another stack, the console), for ``add_lustre_storage``,
        ``TrainiumBatch(storage=...)`` and ``DevInstance(storage=...)``. Nothing is created here.

        :param file_system_id: the file system's id (``fs-...``).
        :param dns_name: its DNS name.
        :param mount_name: its Lustre mount name.
        :param security_group: the group on the file system's interfaces; clients are opened in it.
        :param capacity_gib: its storage capacity, GiB.
        :param deployment_type: what the file system is (the StorageClass repeats it). Default: ``PERSISTENT_2``,
            as :class:`LustreStorage`'s.
        :param throughput_mb_per_tib: its throughput per TiB, MB/s. Default: 250, as :class:`LustreStorage`'s.
        :param compression: its data compression. Default: ``LZ4``, as :class:`LustreStorage`'s.
        :param file_system_type_version: its Lustre version. Default: 2.15, as :class:`LustreStorage`'s.
        """
        check_lustre(deployment_type.value, capacity_gib, throughput_mb_per_tib)
        return _ImportedLustreStorage(
            scope, construct_id, file_system_id=file_system_id, dns_name=dns_name, mount_name=mount_name,
            security_group=security_group, capacity_gib=capacity_gib, deployment_type=deployment_type.value,
            throughput_mb_per_tib=throughput_mb_per_tib, compression=compression.value,
            lustre_version=_lustre_version(file_system_type_version),
        )

    @property
    def file_system_id(self) -> str:
        return self.file_system.file_system_id

    @property
    def dns_name(self) -> str:
        return self.file_system.dns_name

    @property
    def mount_name(self) -> str:
        return self.file_system.mount_name


def _lustre_version(version: fsx.FileSystemTypeVersion) -> str:
    return version.value.removeprefix("V_").replace("_", ".")


def allow_lustre_client(
    scope: Construct, construct_id: str, *, server: ec2.ISecurityGroup, client: ec2.ISecurityGroup
) -> None:
    """Lustre both ways between a file system's group and a client group, as L1 rules in ``scope``."""
    rules = Construct(scope, construct_id)
    server_id = server.security_group_id
    for low, high in LUSTRE_PORT_RANGES:
        ec2.CfnSecurityGroupIngress(rules, f"ToFsx{low}", group_id=server_id,
                                    source_security_group_id=client.security_group_id,
                                    description="Lustre from clients", ip_protocol="tcp", from_port=low, to_port=high)
        ec2.CfnSecurityGroupEgress(rules, f"FromFsx{low}", group_id=server_id,
                                   destination_security_group_id=client.security_group_id,
                                   description="Lustre", ip_protocol="tcp", from_port=low, to_port=high)
        ec2.CfnSecurityGroupIngress(rules, f"ToClient{low}", group_id=client.security_group_id,
                                    source_security_group_id=server_id, description="Lustre from FSx",
                                    ip_protocol="tcp", from_port=low, to_port=high)


def _backup_retention(days: int | None, deployment_type: str, *, linked: bool) -> int:
    """Days of automatic backups: the given ones, checked, else 7 for a persistent file system linked to no bucket."""
    persistent = deployment_type.startswith("PERSISTENT")
    if days is None:
        return DEFAULT_BACKUP_RETENTION_DAYS if persistent and not linked else 0
    if days and linked:
        raise ConfigError("backup_retention_days", days, "0 with data_repository or checkpoint_bucket: FSx backs "
                          "up no file system linked to S3")
    if days and not persistent:
        raise ConfigError("backup_retention_days", days, f"0 with {deployment_type} (FSx backs up only "
                          "persistent file systems)")
    if not 0 <= days <= MAX_BACKUP_RETENTION_DAYS:
        raise ConfigError("backup_retention_days", days, f"0 to {MAX_BACKUP_RETENTION_DAYS} (FSx's limit)")
    return days


def _data_bucket(scope: Construct, removal: RemovalPolicy) -> s3.Bucket:
    """The data repository's bucket, made here (``DataBucket``): versioned, encrypted, TLS only, not public."""
    created = s3.Bucket(
        scope,
        "DataBucket",
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        removal_policy=removal,
        auto_delete_objects=False,
    )
    logging = ("Training data bucket read in bulk by FSx for Lustre; per-request access logs of "
               "millions of shard reads cost more than they tell. Enable CloudTrail data events for audit.")
    acknowledge_bucket_logging(created, logging)
    acknowledge(
        created, f"{NIST}-S3BucketReplicationEnabled", None,
        "Versioned, so an overwrite or a delete can be undone; a replica in another region would double "
        "the storage of datasets of terabytes: a choice for the data's owner (an S3 replication rule).",
    )
    acknowledge(
        created, f"{NIST}-S3DefaultEncryptionKMS", None,
        "Encrypted at rest with S3-managed keys. A KMS key would have to admit each file system's FSx "
        "service-linked role (FSx for Lustre user guide, 'Working with server-side encrypted Amazon S3 "
        "buckets') and every reader, and costs a KMS request per object read.",
    )
    return created
