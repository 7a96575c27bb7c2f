#!/bin/bash
# trainium-cdk: an EKS Trainium node's Neuron driver, installed at boot when the AMI's is older than the track's
# pin (an EKS AMI release built before the track's Neuron release cannot carry its driver; the runtime in the
# training image needs it). From the user data, under cloud-init, before nodeadm's run phase starts kubelet
# (nodeadm-run.service is After=cloud-final.service): the device plugin then finds the pinned driver loaded.
#   NEURON_DRIVER    the track's aws-neuronx-dkms version
#   NEURON_YUM_REPO  Neuron's yum repository
#   YUM_REPOS_DIR    dnf's repositories (/etc/yum.repos.d; another only in tests)
# A node whose install failed never joins: nodeadm's run phase is masked and the instance shuts down (its node
# group or Karpenter replaces it), instead of a node whose every job the launcher would stop.
set -euxo pipefail
want="${NEURON_DRIVER:?}"
have="$(rpm -q --qf '%{VERSION}' aws-neuronx-dkms 2>/dev/null || true)"
if [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$have" "$want" | sort -V | head -n 1)" = "$want" ]; then
  exit 0  # the AMI's driver is the pin or newer
fi
finish() {
  local status=$?
  [ "$status" -eq 0 ] && return 0
  echo "trainium-cdk: Neuron driver $want not installed (exit status $status)" >&2
  systemctl mask nodeadm-run.service
  shutdown -h +1 "trainium-cdk: Neuron driver $want not installed"
}
trap finish EXIT
# gpgcheck=1 in the repository itself, not from dnf.conf: a kernel module installed as root.
cat > "${YUM_REPOS_DIR:-/etc/yum.repos.d}/neuron.repo" <<EOF_NEURON_REPO
[neuron]
name=Neuron YUM Repository
baseurl=${NEURON_YUM_REPO:?}
enabled=1
gpgcheck=1
metadata_expire=0
EOF_NEURON_REPO
rpm --import "$NEURON_YUM_REPO/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"
dnf install -y "kernel-devel-uname-r == $(uname -r)" "aws-neuronx-dkms-$want"
modprobe -r neuron || true
modprobe neuron
