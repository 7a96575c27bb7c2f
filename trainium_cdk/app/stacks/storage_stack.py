"""The storage stack: stateful, on its own, so that a change elsewhere never replaces the file system."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_fsx as fsx
from constructs import Construct

from trainium_cdk.app.config import Config
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.facts.defaults.cdk import removal_policy
from trainium_cdk.constructs.storage import DataRepositoryProps, LustreStorage
from trainium_cdk.facts.names import (
    OUTPUT_DATA_BUCKET_NAME, OUTPUT_FILE_SYSTEM_DNS_NAME, OUTPUT_FILE_SYSTEM_ID, OUTPUT_FILE_SYSTEM_MOUNT_NAME,
    OUTPUT_FILE_SYSTEM_SECURITY_GROUP_ID,
)


class StorageStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: Config, network: TrainingNetwork, **kwargs
    ) -> None:
        super().__init__(
            scope, construct_id, description="trainium-cdk: FSx for Lustre shared storage (stateful)", **kwargs
        )
        settings = config.storage
        repo = settings.data_repository
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
            removal_policy=removal_policy(settings.removal_policy),
            backup_retention_days=settings.backup_retention_days,
            data_repository=None if repo is None else DataRepositoryProps(
                bucket_name=repo.bucket_name, s3_prefix=repo.s3_prefix, file_system_path=repo.file_system_path,
                auto_import=repo.auto_import, auto_export=repo.auto_export,
            ),
        )
        self.file_system_output = CfnOutput(self, OUTPUT_FILE_SYSTEM_ID, value=self.storage.file_system_id)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_DNS_NAME, value=self.storage.dns_name)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_MOUNT_NAME, value=self.storage.mount_name)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_SECURITY_GROUP_ID, value=self.storage.security_group.security_group_id)
        if self.storage.bucket is not None:
            CfnOutput(self, OUTPUT_DATA_BUCKET_NAME, value=self.storage.bucket.bucket_name)
