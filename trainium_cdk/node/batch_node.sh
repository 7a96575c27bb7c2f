#!/bin/bash
# trainium-cdk: an AWS Batch node (the ECS-optimized AL2023 Neuron AMI): the Neuron driver of the track
# (installed when the AMI carries another version) and tools, and the EFA kernel module, each only when the
# AMI does not already have it.
#   NEURON_DRIVER      the aws-neuronx-dkms version of the track
#   NEURON_YUM_REPO    the Neuron yum repository
#   EFA_INSTALLER_URL     the EFA installer of a pinned version, for a type with EFA; unset: no EFA
#   EFA_INSTALLER_SHA256  its SHA-256 (versions.py): a download that differs is never extracted
#   ECS_CONFIG            the ECS agent's configuration (/etc/ecs/ecs.config; another only under stand-ins)
set -euxo pipefail
# A host whose setup failed never takes jobs (they would find no Neuron module, EFA or /fsx). ecs.service is
# ordered After=cloud-final.service (aws/amazon-ecs-agent, packaging/amazon-linux-ami-integrated/ecs.service):
# its queued start waits for the user data; the stop below cancels it and the EXIT trap (this file and what
# the user data runs after it) starts the agent after a clean run (--no-block: a blocking start would wait for
# cloud-final, which waits for this). On a failure: agent masked, host shut down, which the Batch launch
# template's InstanceInitiatedShutdownBehavior turns into a termination (constructs/batch.py); the one-minute
# delay leaves the reason in the console output (ec2 get-console-output).
finish_node_setup() {
  local status=$?
  set +e
  if [ "$status" -eq 0 ] && systemctl start --no-block ecs.service; then
    return 0
  fi
  echo "trainium-cdk: node setup failed (exit status $status): the ECS agent stays stopped, the instance terminates" >&2
  systemctl stop --no-block ecs.service
  systemctl mask ecs.service
  shutdown -h +1 "trainium-cdk: node setup failed (exit status $status)"
  exit $((status == 0 ? 1 : status))
}
trap finish_node_setup EXIT
systemctl stop --no-block ecs.service
# Multi-node tasks are awsvpc: the ECS agent keeps them from the instance metadata, so that a job
# cannot take the instance role (the node's, with ECS agent and ECR rights) from it.
ecs_config="${ECS_CONFIG:-/etc/ecs/ecs.config}"
grep -qx ECS_AWSVPC_BLOCK_IMDS=true "$ecs_config" 2>/dev/null || echo ECS_AWSVPC_BLOCK_IMDS=true >> "$ecs_config"
missing=''
[ "$(rpm -q --qf '%{VERSION}' aws-neuronx-dkms 2>/dev/null || true)" = "${NEURON_DRIVER:?}" ] || missing="aws-neuronx-dkms-$NEURON_DRIVER"
rpm -q aws-neuronx-tools >/dev/null 2>&1 || missing="$missing aws-neuronx-tools"
if [ -n "$missing" ]; then
  cat > /etc/yum.repos.d/neuron.repo <<EOF_NEURON_REPO
[neuron]
name=Neuron YUM Repository
baseurl=${NEURON_YUM_REPO:?}
enabled=1
metadata_expire=0
EOF_NEURON_REPO
  rpm --import "$NEURON_YUM_REPO/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"
  # A pinned version older than the AMI's needs a downgrade; the loaded module is then replaced.
  # shellcheck disable=SC2086  # $missing: one word per package
  dnf install -y "kernel-devel-uname-r == $(uname -r)" $missing || dnf downgrade -y $missing
  modprobe -r neuron || true
fi
modprobe neuron
if [ -n "${EFA_INSTALLER_URL:-}" ]; then
  if [ ! -e /dev/infiniband/uverbs0 ]; then modprobe efa || true; modprobe ib_uverbs || true; fi
  if [ ! -e /dev/infiniband/uverbs0 ]; then
    download=$(mktemp -d)
    cd "$download"
    curl -fsSL -o efa-installer.tar.gz "$EFA_INSTALLER_URL"
    # The pinned installer or nothing (EC2 user guide, "Verify the EFA installer using a checksum").
    echo "${EFA_INSTALLER_SHA256:?}  efa-installer.tar.gz" | sha256sum --check --strict -
    tar -xf efa-installer.tar.gz
    # Kernel module and rdma-core only: libfabric comes with the training image.
    (cd aws-efa-installer && ./efa_installer.sh -y --minimal)
    modprobe efa
    modprobe ib_uverbs || true
  fi
fi
