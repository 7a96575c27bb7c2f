#!/bin/bash
# trainium-cdk: the Lustre client on a host that mounts the file system itself (Batch's ECS hosts, the
# development instance): install the client unless the host has it, and mount the file system, in fstab
# too; running it again changes nothing.
#   LUSTRE_FAMILY       ubuntu or amazon-linux
#   LUSTRE_SOURCE       <file system DNS name>@tcp:/<mount name>
#   LUSTRE_MOUNT_POINT  where it is mounted
#   LUSTRE_FSTAB        the fstab it writes (/etc/fstab; another only under stand-ins)
#   LUSTRE_CLIENT_ROOT  prefixes the other paths it writes (only under stand-ins)
set -euo pipefail
# flock: checkpoint writers and the Neuron compile cache take locks, which a Lustre client without it
# fails. _netdev and the systemd options: mount once the network is online, on first access, at every boot.
# Not x-systemd.requires=network.service (the FSx guide's line for Amazon Linux 2): Ubuntu 24.04 and AL2023
# have no network.service, so systemd refused the mount unit and /fsx did not come back after a reboot.
lustre_options="defaults,relatime,flock,_netdev,x-systemd.automount"
lustre_options="$lustre_options,x-systemd.requires=network-online.target,x-systemd.after=network-online.target"
lustre_fstab="${LUSTRE_FSTAB:-/etc/fstab}"
# The client for the running kernel; lustre_client_boot.sh runs it at every boot.
lustre_client_install() {
  local root="${LUSTRE_CLIENT_ROOT:-}"
  if modinfo lustre >/dev/null 2>&1; then return 0; fi
  case "${LUSTRE_FAMILY:?ubuntu or amazon-linux}" in
    ubuntu)
      # The FSx client repository and its key for Ubuntu (FSx user guide, "Installing the Lustre client").
      # shellcheck disable=SC1091
      . /etc/os-release
      wget -qO - https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc \
        | gpg --dearmor --yes -o "$root/usr/share/keyrings/fsx-ubuntu-public-key.gpg"
      echo "deb [signed-by=/usr/share/keyrings/fsx-ubuntu-public-key.gpg] https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu ${VERSION_CODENAME} main" \
        > "$root/etc/apt/sources.list.d/fsxlustreclientrepo.list"
      apt-get update -y && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
        "lustre-client-modules-$(uname -r)"
      ;;
    amazon-linux) dnf install -y lustre-client ;;
    *) echo "lustre_client: LUSTRE_FAMILY is ubuntu or amazon-linux, not $LUSTRE_FAMILY" >&2; exit 2 ;;
  esac
}
lustre_client_install
mkdir -p "${LUSTRE_MOUNT_POINT:?}"
# The line is replaced, not kept: a host written by an older version gets today's options.
sed -i "\\| $LUSTRE_MOUNT_POINT lustre |d" "$lustre_fstab"
echo "${LUSTRE_SOURCE:?} $LUSTRE_MOUNT_POINT lustre $lustre_options 0 0" >> "$lustre_fstab"
mountpoint -q "$LUSTRE_MOUNT_POINT" || mount "$LUSTRE_MOUNT_POINT"
