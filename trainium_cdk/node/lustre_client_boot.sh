#!/bin/bash
# trainium-cdk: after lustre_client.sh, on a host that lives through kernel updates (the development instance):
# the Lustre client for the running kernel at every boot, before the file system is mounted. The client's
# modules are built for one kernel (Ubuntu: lustre-client-modules-<kernel release>): after a kernel update and
# a reboot the new kernel had none, and /fsx did not mount. Installing them at boot keeps kernel security updates
# coming (unattended-upgrades on Ubuntu), which holding the kernel (apt-mark hold) would stop.
# Uses lustre_client.sh's variables and its lustre_client_install; LUSTRE_CLIENT_ROOT as there.
# shellcheck disable=SC2154  # lustre_options, lustre_fstab: lustre_client.sh's
lustre_unit="trainium-lustre-client.service"
lustre_boot="${LUSTRE_CLIENT_ROOT:-}/usr/local/sbin/trainium-lustre-client"
mkdir -p "${lustre_boot%/*}" "${LUSTRE_CLIENT_ROOT:-}/etc/systemd/system"
{
  echo "#!/bin/bash"
  echo "# trainium-cdk: the Lustre client for the running kernel ($lustre_unit, before the mount of $LUSTRE_MOUNT_POINT)"
  echo "set -euo pipefail"
  declare -p LUSTRE_FAMILY
  declare -f lustre_client_install
  echo "lustre_client_install"
} > "$lustre_boot"
chmod 755 "$lustre_boot"
cat > "${LUSTRE_CLIENT_ROOT:-}/etc/systemd/system/$lustre_unit" <<EOF_UNIT
[Unit]
Description=trainium-cdk: the Lustre client for the running kernel, before $LUSTRE_MOUNT_POINT is mounted
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=$lustre_boot
TimeoutStartSec=900

[Install]
WantedBy=multi-user.target
EOF_UNIT
# The mount requires the unit (and so starts after it): systemd's fstab generator makes x-systemd.requires= a
# Requires= and an After= of the mount unit (systemd.mount(5)).
sed -i "\\| $LUSTRE_MOUNT_POINT lustre |s|lustre $lustre_options 0 0|lustre $lustre_options,x-systemd.requires=$lustre_unit 0 0|" \
  "$lustre_fstab"
systemctl daemon-reload
systemctl enable "$lustre_unit"
