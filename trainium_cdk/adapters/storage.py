"""The storage stack's adapter: the config mapped to LustreStorage's props and the FSx chart's."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_fsx as fsx

from trainium_cdk.config import Config
from trainium_cdk.constructs.defaults import removal_policy
from trainium_cdk.constructs.storage import DataRepositoryProps


@dataclass(frozen=True)
class StorageProps:
    """LustreStorage's props of one deployment (see LustreStorage for each)."""

    capacity_gib: int
    deployment_type: fsx.LustreDeploymentType
    throughput_mb_per_tib: int | None
    compression: fsx.LustreDataCompressionType
    file_system_type_version: fsx.FileSystemTypeVersion
    removal_policy: RemovalPolicy
    backup_retention_days: int | None
    data_repository: DataRepositoryProps | None


def storage_props(config: Config) -> StorageProps:
    storage = config.storage
    repo = storage.data_repository
    return StorageProps(
        capacity_gib=storage.capacity_gib,
        deployment_type=fsx.LustreDeploymentType[storage.deployment_type],
        throughput_mb_per_tib=storage.throughput_mb_per_tib,
        compression=fsx.LustreDataCompressionType[storage.compression],
        file_system_type_version=fsx.FileSystemTypeVersion["V_" + storage.lustre_version.replace(".", "_")],
        removal_policy=removal_policy(storage.removal_policy),
        backup_retention_days=storage.backup_retention_days,
        data_repository=(
            DataRepositoryProps(
                bucket_name=repo.bucket_name,
                s3_prefix=repo.s3_prefix,
                file_system_path=repo.file_system_path,
                auto_import=repo.auto_import,
                auto_export=repo.auto_export,
            )
            if repo is not None
            else None
        ),
    )
