"""The storage stack: stateful, on its own, so that a change elsewhere never replaces the file system."""

from __future__ import annotations

from aws_cdk import CfnOutput, CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from trainium_cdk.app.config import Config
from trainium_cdk.constructs.nag import NIST, acknowledge, acknowledge_bucket_logging
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.storage import DataRepositoryProps, LustreStorage
from trainium_cdk.facts.defaults.cdk import removal_policy
from trainium_cdk.facts.names import (
    OUTPUT_CHECKPOINT_BUCKET_NAME,
    OUTPUT_DATA_BUCKET_NAME,
    OUTPUT_FILE_SYSTEM_DNS_NAME,
    OUTPUT_FILE_SYSTEM_ID,
    OUTPUT_FILE_SYSTEM_MOUNT_NAME,
    OUTPUT_FILE_SYSTEM_SECURITY_GROUP_ID,
)

# Logical ids that must never change: a new one replaces the resource (a new, empty file system; checkpoints orphaned
# in a retained bucket). The stack pins them, not the construct, which works twice in one stack; these are the ids
# the app has deployed under since its first release (tests/app/test_logical_ids.py).
FILE_SYSTEM_LOGICAL_ID = "LustreFileSystem"
SECURITY_GROUP_LOGICAL_ID = "LustreSecurityGroup"
BUCKET_LOGICAL_ID = "DataRepositoryBucket"
ASSOCIATION_LOGICAL_ID = "DataRepositoryAssociation"
CHECKPOINT_BUCKET_LOGICAL_ID = "CheckpointBucket"
CHECKPOINT_ASSOCIATION_LOGICAL_ID = "CheckpointExportAssociation"
# Days S3 keeps a checkpoint's object after the file system deleted or overwrote it.
CHECKPOINT_NONCURRENT_DAYS = 1


class StorageStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: Config, network: TrainingNetwork, **kwargs
    ) -> None:
        super().__init__(
            scope, construct_id, description="trainium-cdk: FSx for Lustre shared storage (stateful)", **kwargs
        )
        settings = config.storage
        repo = settings.data_repository
        removal = removal_policy(settings.removal_policy)
        self.checkpoint_bucket = checkpoint_bucket(self, removal) if settings.checkpoint_export else None
        self.storage = LustreStorage(
            self,
            "Storage",
            vpc=network.vpc,
            subnet=network.compute_subnet(config.storage_group.name),
            clients=[network.efa_security_group],
            capacity_gib=settings.capacity_gib,
            deployment_type=fsx.LustreDeploymentType[settings.deployment_type],
            throughput_mb_per_tib=settings.throughput_mb_per_tib,
            compression=fsx.LustreDataCompressionType[settings.compression],
            file_system_type_version=fsx.FileSystemTypeVersion["V_" + settings.lustre_version.replace(".", "_")],
            removal_policy=removal,
            backup_retention_days=settings.backup_retention_days,
            checkpoint_bucket=self.checkpoint_bucket,
            data_repository=None if repo is None else DataRepositoryProps(
                bucket_name=repo.bucket_name, s3_prefix=repo.s3_prefix, file_system_path=repo.file_system_path,
                auto_import=repo.auto_import, auto_export=repo.auto_export,
            ),
        )
        self._pin_logical_ids()
        self.file_system_output = CfnOutput(self, OUTPUT_FILE_SYSTEM_ID, value=self.storage.file_system_id)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_DNS_NAME, value=self.storage.dns_name)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_MOUNT_NAME, value=self.storage.mount_name)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_SECURITY_GROUP_ID, value=self.storage.security_group.security_group_id)
        if self.storage.bucket is not None:
            CfnOutput(self, OUTPUT_DATA_BUCKET_NAME, value=self.storage.bucket.bucket_name)
        if self.checkpoint_bucket is not None:
            CfnOutput(self, OUTPUT_CHECKPOINT_BUCKET_NAME, value=self.checkpoint_bucket.bucket_name)

    def _pin_logical_ids(self) -> None:
        storage = self.storage
        pinned: list[tuple[IConstruct | None, str]] = [
            (storage.security_group, SECURITY_GROUP_LOGICAL_ID),
            (storage.file_system, FILE_SYSTEM_LOGICAL_ID),
            (storage.bucket, BUCKET_LOGICAL_ID),  # the construct's own bucket (an imported one has no resource)
            (storage.association, ASSOCIATION_LOGICAL_ID),
            (storage.checkpoint_association, CHECKPOINT_ASSOCIATION_LOGICAL_ID),
        ]
        for construct, logical_id in pinned:
            resource = construct if isinstance(construct, CfnResource) else construct and construct.node.default_child
            if isinstance(resource, CfnResource):
                resource.override_logical_id(logical_id)


def checkpoint_bucket(scope: Construct, removal: RemovalPolicy) -> s3.Bucket:
    """The bucket /fsx/checkpoints is exported to: versioned, so that a deleted or overwritten checkpoint can be
    had back for a day; older versions expire then, or a run that rotates its checkpoints would keep every one."""
    bucket = s3.Bucket(
        scope, "CheckpointBucket",
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        removal_policy=removal,
        lifecycle_rules=[s3.LifecycleRule(
            noncurrent_version_expiration=Duration.days(CHECKPOINT_NONCURRENT_DAYS),
            abort_incomplete_multipart_upload_after=Duration.days(1),
            expired_object_delete_marker=True,
        )],
    )
    # Stateful: its logical id never changes (a new one would orphan the checkpoints in a new bucket).
    bucket.node.default_child.override_logical_id(CHECKPOINT_BUCKET_LOGICAL_ID)  # type: ignore[union-attr]
    acknowledge_bucket_logging(bucket, "Written by FSx's export of checkpoints only; per-request logs of every "
                                       "shard of every checkpoint cost more than they tell. CloudTrail data events for audit.")
    acknowledge(bucket, f"{NIST}-S3BucketReplicationEnabled", None,
                "A second copy of the checkpoints, which are themselves the copy of the file system's; a replica in "
                "another region doubles terabytes of storage: the data's owner's choice (an S3 replication rule).")
    acknowledge(bucket, f"{NIST}-S3DefaultEncryptionKMS", None,
                "Encrypted at rest with S3-managed keys. A KMS key would have to admit the file system's FSx "
                "service-linked role (FSx for Lustre user guide, 'Working with server-side encrypted Amazon S3 "
                "buckets') and every reader.")
    return bucket
