"""Plain YAML in dist/ for users who apply with kubectl or pcluster: the same charts the stacks install.

Values known only after deploy (the file system id, subnet, security group) are left as ``${NAME}``
placeholders that `envsubst` fills from the stack outputs (see the README).
"""

from __future__ import annotations

from pathlib import Path

from trainium_cdk.charts import FsxStorageProps, write_manifests
from trainium_cdk.charts._k8s import placeholder
from trainium_cdk.config import Config

DIST = Path("dist")
# Placeholder -> the stack output that holds its value.
PLACEHOLDERS = {
    "FSX_FILE_SYSTEM_ID": ("storage", "FileSystemId"),
    "FSX_DNS_NAME": ("storage", "FileSystemDnsName"),
    "FSX_MOUNT_NAME": ("storage", "FileSystemMountName"),
    "FSX_SECURITY_GROUP_ID": ("storage", "FileSystemSecurityGroupId"),
    "COMPUTE_SUBNET_ID": ("network", "ComputeSubnet-<group>"),
}


def fsx_storage_props(
    config: Config,
    *,
    subnet_id: str,
    security_group_id: str,
    file_system_id: str,
    dns_name: str,
    mount_name: str,
) -> FsxStorageProps:
    """The FSx chart's props from the config; ids are tokens in the stack, placeholders in dist/."""
    storage = config.storage
    return FsxStorageProps(
        subnet_id=subnet_id,
        security_group_ids=[security_group_id],
        deployment_type=storage.deployment_type,
        throughput_mb_per_tib=storage.throughput_mb_per_tib,
        lustre_version=storage.lustre_version,
        compression=storage.compression,
        file_system_id=file_system_id,
        dns_name=dns_name,
        mount_name=mount_name,
        capacity_gib=storage.capacity_gib,
    )


def dist_storage_props(config: Config) -> FsxStorageProps | None:
    if not config.storage.enabled:
        return None
    return fsx_storage_props(
        config,
        subnet_id=placeholder("COMPUTE_SUBNET_ID"),
        security_group_id=placeholder("FSX_SECURITY_GROUP_ID"),
        file_system_id=placeholder("FSX_FILE_SYSTEM_ID"),
        dns_name=placeholder("FSX_DNS_NAME"),
        mount_name=placeholder("FSX_MOUNT_NAME"),
    )


def write_dist(config: Config, outdir: Path = DIST) -> list[Path]:
    """Write every manifest of the configured EKS cluster into ``outdir/eks``; return the paths."""
    written: list[Path] = []
    if "eks" in config.backends:
        written += write_manifests(
            outdir / "eks",
            region=config.region,
            catalog=config.catalog,
            storage=dist_storage_props(config),
            scheduler_extension=config.eks.neuron_scheduler_extension,
            monitor=config.eks.neuron_monitor,
        )
    return written
