"""The Lustre client on a host: one script for every backend that mounts the file system on its nodes
itself (Batch's ECS hosts, the development instance). ParallelCluster mounts it through its own
SharedStorage section; pods through the FSx CSI driver."""

from __future__ import annotations

from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.names import SHARED_MOUNT

# flock: checkpoint writers and the Neuron compile cache take locks, which a Lustre client without it
# fails. _netdev and the systemd options: mount once the network is online, on first access, at every boot.
# Not x-systemd.requires=network.service (the FSx guide's line for Amazon Linux 2): Ubuntu 24.04 and AL2023
# have no network.service, so systemd refused the mount unit and /fsx did not come back after a reboot.
FSTAB_OPTIONS = (
    "defaults,relatime,flock,_netdev,x-systemd.automount,"
    "x-systemd.requires=network-online.target,x-systemd.after=network-online.target"
)
# The FSx client repository and its key for Ubuntu (FSx user guide, "Installing the Lustre client").
_UBUNTU_INSTALL = (
    ". /etc/os-release",
    "wget -qO - https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc"
    " | gpg --dearmor --yes -o /usr/share/keyrings/fsx-ubuntu-public-key.gpg",
    'echo "deb [signed-by=/usr/share/keyrings/fsx-ubuntu-public-key.gpg] '
    'https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu ${VERSION_CODENAME} main"'
    " > /etc/apt/sources.list.d/fsxlustreclientrepo.list",
    "apt-get update -y && DEBIAN_FRONTEND=noninteractive apt-get install -y lustre-client-modules-$(uname -r)",
)
_INSTALL = {"ubuntu": _UBUNTU_INSTALL, "amazon-linux": ("dnf install -y lustre-client",)}


def mount_commands(family: str, dns_name: str, mount_name: str, *, mount_point: str = SHARED_MOUNT) -> list[str]:
    """Install the client unless the host has it, and mount the file system at ``mount_point``, in
    fstab too; running it again changes nothing. ``dns_name`` and ``mount_name`` may be CDK tokens."""
    if family not in _INSTALL:
        raise ConfigError("family", family, one_of(_INSTALL))
    source = f"{dns_name}@tcp:/{mount_name}"
    return [
        "if ! modinfo lustre >/dev/null 2>&1; then",
        *(f"  {line}" for line in _INSTALL[family]),
        "fi",
        f"mkdir -p {mount_point}",
        # The line is replaced, not kept: a host written by an older version gets today's options.
        f"sed -i '\\| {mount_point} lustre |d' /etc/fstab",
        f"echo '{source} {mount_point} lustre {FSTAB_OPTIONS} 0 0' >> /etc/fstab",
        f"mountpoint -q {mount_point} || mount {mount_point}",
    ]
