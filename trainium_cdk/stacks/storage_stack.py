"""The storage stack: stateful, on its own, so that a change elsewhere never replaces the file system."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from trainium_cdk.config import Config
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.storage import LustreStorage
from trainium_cdk.adapters.storage import storage_props
from trainium_cdk.names import (
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
        props = storage_props(config)
        self.storage = LustreStorage(
            self,
            "Storage",
            vpc=network.vpc,
            subnet=network.compute_subnet(config.storage_group.name),
            clients=[network.efa_security_group],
            capacity_gib=props.capacity_gib,
            deployment_type=props.deployment_type,
            throughput_mb_per_tib=props.throughput_mb_per_tib,
            compression=props.compression,
            file_system_type_version=props.file_system_type_version,
            removal_policy=props.removal_policy,
            backup_retention_days=props.backup_retention_days,
            data_repository=props.data_repository,
        )
        self.file_system_output = CfnOutput(self, OUTPUT_FILE_SYSTEM_ID, value=self.storage.file_system_id)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_DNS_NAME, value=self.storage.dns_name)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_MOUNT_NAME, value=self.storage.mount_name)
        CfnOutput(self, OUTPUT_FILE_SYSTEM_SECURITY_GROUP_ID, value=self.storage.security_group.security_group_id)
        if self.storage.bucket is not None:
            CfnOutput(self, OUTPUT_DATA_BUCKET_NAME, value=self.storage.bucket.bucket_name)
