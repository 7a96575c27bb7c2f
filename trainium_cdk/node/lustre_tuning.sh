#!/bin/bash
# trainium-cdk: the FSx for Lustre client settings of a Trainium node, decided per instance type from the FSx
# user guide's "Performance tips" (trainium_cdk/runtime/lustre_tuning.py), and the stripe layout of shared directories.
#   lustre_tuning.sh install NAME=value...   as root, before the file system is mounted: the module options
#       in modprobe.d (read when the modules load, at the first mount and at every boot), this program as
#       /usr/local/sbin/trainium-lustre-tuning with its settings, and its service, started now
#   trainium-lustre-tuning [watch]           the service: a pass now, after every mount, and every 5 minutes
#   trainium-lustre-tuning apply             one pass: lctl settings do not persist, not even across a remount
# Settings (install's arguments):
#   LUSTRE_MODULE_OPTIONS  module:option=value words
#   LUSTRE_TUNING_PARAMS   lctl set_param words, set on every Lustre device of the node
#   LUSTRE_STRIPE_LAYOUT   lfs setstripe options of each directory of LUSTRE_STRIPED_DIRS
#   LUSTRE_STRIPED_DIRS    directories at the file system's root, created with the layout when missing
#   LUSTRE_FILE_SYSTEM     the file system's mount point (/fsx), or its mount name where that varies (EKS pods)
#   LUSTRE_CLIENT_INSTALL  amazon-linux: a host whose mounts others make (EKS: the FSx CSI driver): install
#                          lustre-client (lctl, lfs) when missing and load its modules, with these options, now
# LUSTRE_TUNING_ROOT (environment) prefixes every path written: / on a node, another only under stand-ins.
set -euo pipefail
root="${LUSTRE_TUNING_ROOT:-}"
tuner="$root/usr/local/sbin/trainium-lustre-tuning"
settings="$root/etc/trainium-cdk/lustre-tuning.conf"
LUSTRE_MODULE_OPTIONS="" LUSTRE_TUNING_PARAMS="" LUSTRE_STRIPE_LAYOUT="" LUSTRE_STRIPED_DIRS=""
LUSTRE_FILE_SYSTEM="" LUSTRE_CLIENT_INSTALL=""

apply() {
  local mounts target source dir param
  local -a params layout dirs
  mounts="$(findmnt --types lustre --noheadings --raw --output TARGET,SOURCE)" || return 0  # none mounted
  read -ra params <<<"$LUSTRE_TUNING_PARAMS"
  read -ra layout <<<"$LUSTRE_STRIPE_LAYOUT"
  read -ra dirs <<<"$LUSTRE_STRIPED_DIRS"
  for param in "${params[@]}"; do
    lctl set_param "$param" >/dev/null || echo "lustre_tuning: lctl set_param $param failed" >&2
  done
  while read -r target source; do
    case "$LUSTRE_FILE_SYSTEM" in
      /*) [ "$target" = "$root$LUSTRE_FILE_SYSTEM" ] || continue ;;
      *) [ "${source##*:/}" = "$LUSTRE_FILE_SYSTEM" ] || continue ;;
    esac
    for dir in "${dirs[@]}"; do
      # mkdir is the lock: of the nodes mounting at once, one creates the directory and sets its layout; an
      # existing directory keeps its own, once it is ours (1777: one the checkpoint export's association made is
      # root's 755). Every user's jobs write below it (Slurm's run as ubuntu), as in /tmp.
      mkdir "$target/$dir" 2>/dev/null || [ "$(stat -c %a "$target/$dir")" != 1777 ] || continue
      chmod 1777 "$target/$dir"
      lfs setstripe "${layout[@]}" "$target/$dir" || echo "lustre_tuning: lfs setstripe $target/$dir failed" >&2
    done
  done <<<"$mounts"
}

watch() {
  local events
  exec {events}< <(findmnt --poll=mount --noheadings --output TARGET)
  while :; do
    apply
    read -r -t 300 -u "$events" _ || [ $? -gt 128 ] || return 1  # above 128: the timeout; else findmnt ended
  done
}

install_tuning() {
  local setting option
  local -a options
  for setting in "$@"; do
    case "$setting" in
      LUSTRE_MODULE_OPTIONS=*|LUSTRE_TUNING_PARAMS=*|LUSTRE_STRIPE_LAYOUT=*|LUSTRE_STRIPED_DIRS=*|\
      LUSTRE_FILE_SYSTEM=*|LUSTRE_CLIENT_INSTALL=*) declare -g "$setting" ;;
      *) echo "lustre_tuning: unknown setting $setting" >&2; return 2 ;;
    esac
  done
  [ -n "$LUSTRE_FILE_SYSTEM" ] || { echo "lustre_tuning: LUSTRE_FILE_SYSTEM is required" >&2; return 2; }
  mkdir -p "$root/etc/modprobe.d" "${settings%/*}" "${tuner%/*}" "$root/etc/systemd/system"
  read -ra options <<<"$LUSTRE_MODULE_OPTIONS"
  if [ "${#options[@]}" -gt 0 ]; then
    echo "# trainium-cdk: FSx for Lustre client tuning (FSx user guide, Performance tips)" \
      > "$root/etc/modprobe.d/trainium-lustre.conf"
    for option in "${options[@]}"; do
      echo "options ${option%%:*} ${option#*:}" >> "$root/etc/modprobe.d/trainium-lustre.conf"
    done
    [ ! -e "$root/sys/module/ptlrpc" ] || echo "lustre_tuning: Lustre is loaded: its options apply at the next boot" >&2
  else
    rm -f "$root/etc/modprobe.d/trainium-lustre.conf"
  fi
  if [ "$LUSTRE_CLIENT_INSTALL" = amazon-linux ]; then
    command -v lctl >/dev/null || dnf install -y lustre-client
    # The CSI driver's mount.lustre runs in its container, where a modprobe reads the image's modprobe.d:
    # loaded here first, the modules have this host's options. The EKS user guide's "Optimize Amazon FSx for
    # Lustre performance on nodes (non-EFA)" does the same in launch template user data (install the client,
    # module options, load the modules); it gives ptlrpcd_per_cpt_max=64, the FSx guide 32: we keep the FSx guide's.
    modprobe lustre
  fi
  declare -p LUSTRE_TUNING_PARAMS LUSTRE_STRIPE_LAYOUT LUSTRE_STRIPED_DIRS LUSTRE_FILE_SYSTEM > "$settings"
  [ "$0" -ef "$tuner" ] || install -m 755 "$0" "$tuner"
  cat > "$root/etc/systemd/system/trainium-lustre-tuning.service" <<EOF_UNIT
[Unit]
Description=trainium-cdk: FSx for Lustre client settings after every mount
After=local-fs.target

[Service]
ExecStart=$tuner watch
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
EOF_UNIT
  systemctl daemon-reload
  systemctl enable --now trainium-lustre-tuning.service
}

case "${1:-watch}" in
  install) shift; install_tuning "$@" ;;
  watch|apply)
    # shellcheck source=/dev/null  # written by install (declare -p)
    . "$settings"
    "${1:-watch}" ;;
  *) echo "usage: $0 install NAME=value... | watch | apply" >&2; exit 2 ;;
esac
