"""The storage section of the config: FSx for Lustre, its S3 data repository and its checkpoint export."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trainium_cdk.app.config.base import _Model
from trainium_cdk.app.config.fields import S3Prefix
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts import defaults
from trainium_cdk.facts.catalog import (
    LUSTRE_COMPRESSION_TYPES,
    LUSTRE_VERSIONS,
    LustreCompression,
    LustreDeploymentType,
    LustreVersion,
    check_lustre,
)
from trainium_cdk.facts.names import CHECKPOINT_FILE_SYSTEM_PATH

# What `cdk destroy` may do to the file system: CloudFormation snapshots only volumes and databases,
# not FSx (DeletionPolicy: Snapshot), so there is no snapshot policy; FSx backups are taken apart.
REMOVAL_POLICIES = defaults.REMOVAL_POLICIES


class DataRepository(_Model):
    """An S3 prefix linked to a path of the file system, imported and exported automatically."""

    bucket_name: str | None = Field(
        None, description="An existing bucket; default: a bucket created (and retained) by the storage stack."
    )
    s3_prefix: S3Prefix = Field("", description="Prefix in the bucket linked to the path; empty: the whole bucket.")
    file_system_path: str = Field("/s3", description="Path in the file system that mirrors the prefix.")
    auto_import: bool = Field(True, description="New, changed and deleted S3 objects show up in the file system.")
    auto_export: bool = Field(True, description="New, changed and deleted files are exported to S3.")

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not re.fullmatch(r"^/[A-Za-z0-9_./-]*$", value) or "//" in value or ".." in value:
            raise ValueError("an absolute path such as /s3 (letters, digits, _ . - /)")
        return value

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", value):
            raise ValueError("an S3 bucket name: 3-63 lower-case letters, digits, '.' and '-'")
        return value


class StorageSettings(_Model):
    """FSx for Lustre shared by every node: datasets, checkpoints, the Neuron compile cache."""

    enabled: bool = Field(True, description="Deploy the storage stack.")
    deployment_type: LustreDeploymentType = Field("PERSISTENT_2", description="FSx deployment type.")
    capacity_gib: int = Field(1200, description="Storage capacity: 1200 GiB or a multiple of 2400 GiB.")
    throughput_mb_per_tib: int | None = Field(
        250, description="PERSISTENT_2 throughput per TiB: 125, 250, 500 or 1000; none for SCRATCH_2."
    )
    lustre_version: LustreVersion = Field(LUSTRE_VERSIONS[0], description="Lustre version.")
    compression: LustreCompression = Field(LUSTRE_COMPRESSION_TYPES[0], description="Data compression.")
    data_repository: DataRepository | None = Field(None, description="Optional S3 data repository association.")
    removal_policy: Literal["retain", "destroy"] = Field(
        "retain", description="What `cdk destroy` does to the file system (and a created bucket)."
    )
    compute_group: str | None = Field(None, description="Group whose subnet holds the file system; default: first.")
    backup_retention_days: int | None = Field(
        None, description="Days FSx keeps its daily automatic backups (0 to 90; 0: none); default 7 for a "
        "PERSISTENT_2 file system linked to no S3 bucket, else 0 (FSx backs up neither SCRATCH_2 nor a file "
        "system with a data repository association)."
    )
    checkpoint_export: bool = Field(
        True, description="Export /fsx/checkpoints to an S3 bucket the storage stack creates (versioned, retained, "
        "deleted and overwritten versions kept 1 day): every checkpoint outlives the file system, and a new file "
        "system linked to the bucket lists them again. FSx then takes no backups (see backup_retention_days)."
    )

    @field_validator("removal_policy", mode="before")
    @classmethod
    def _removal(cls, value: Any) -> Any:
        if value not in REMOVAL_POLICIES:
            raise ValueError(
                one_of(REMOVAL_POLICIES) + " (CloudFormation cannot snapshot an FSx file system on delete: "
                "retain it, or take an FSx backup before `cdk destroy`)"
            )
        return value

    @model_validator(mode="after")
    def _lustre(self) -> StorageSettings:
        check_lustre(self.deployment_type, self.capacity_gib, self.throughput_mb_per_tib)
        return self

    @model_validator(mode="after")
    def _linked(self) -> StorageSettings:
        """FSx backs up no file system linked to S3 (FSx for Lustre user guide, "Using backups"), and links no
        file system path inside another's."""
        links = [name for name, on in (("data_repository", self.data_repository is not None),
                                       ("checkpoint_export", self.checkpoint_export)) if on]
        if links and self.backup_retention_days:
            raise ConfigError(
                "backup_retention_days", self.backup_retention_days,
                f"0 or unset with {' and '.join(links)}: FSx backs up no file system linked to S3"
                + (" (the checkpoints are exported to S3 instead)" if self.checkpoint_export else ""),
            )
        if self.checkpoint_export and self.data_repository is not None:
            path = self.data_repository.file_system_path.rstrip("/") or "/"
            ours = CHECKPOINT_FILE_SYSTEM_PATH
            if path == "/" or path == ours or path.startswith(ours + "/") or ours.startswith(path + "/"):
                raise ConfigError("data_repository.file_system_path", path,
                                  f"a path apart from {ours}, which checkpoint_export links to its bucket "
                                  "(FSx links no path inside another's, and / only alone)")
        return self
