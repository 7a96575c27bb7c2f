"""The Lustre client on a host: one script (``trainium_cdk/node/lustre_client.sh``) for every backend that
mounts the file system on its nodes itself (Batch's ECS hosts, the development instance). ParallelCluster
mounts it through its own SharedStorage section; pods through the FSx CSI driver."""

from __future__ import annotations

from trainium_cdk import node
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts.names import SHARED_MOUNT

FAMILIES = ("ubuntu", "amazon-linux")
SCRIPT = "lustre_client.sh"
# After SCRIPT on a host that lives through kernel updates (the development instance): the client for the running
# kernel at every boot, before the mount. Batch hosts are replaced, not updated, and their user data counts
# against CloudFormation's template limit in every launch template: they carry SCRIPT alone.
BOOT_SCRIPT = "lustre_client_boot.sh"


def mount_values(family: str, dns_name: str, mount_name: str, *, mount_point: str = SHARED_MOUNT) -> dict[str, str]:
    """What the script reads: the host's family, the file system (``dns_name`` and ``mount_name`` may be CDK
    tokens) and where to mount it."""
    if family not in FAMILIES:
        raise ConfigError("family", family, one_of(FAMILIES))
    return {"LUSTRE_FAMILY": family, "LUSTRE_SOURCE": f"{dns_name}@tcp:/{mount_name}", "LUSTRE_MOUNT_POINT": mount_point}


def mount_script(
    family: str, dns_name: str, mount_name: str, *, mount_point: str = SHARED_MOUNT, at_boot: bool = False
) -> str:
    """The script with its values in the header: install the client unless the host has it, and mount the
    file system at ``mount_point``, in fstab too; ``at_boot``: and install the client for the running kernel at
    every boot, before the mount (:data:`BOOT_SCRIPT`)."""
    names = [SCRIPT, BOOT_SCRIPT] if at_boot else [SCRIPT]
    return node.program(names, mount_values(family, dns_name, mount_name, mount_point=mount_point))
