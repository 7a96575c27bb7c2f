#!/bin/bash
# trainium-cdk: a Batch node's setup (the ECS-optimized AL2023 Neuron AMI). Its variables and the reasons
# for each step are in trainium_cdk/constructs/batch_node.py.
set -euxo pipefail
finish() {
  local status=$?
  set +e
  [ "$status" -eq 0 ] && systemctl start --no-block ecs.service && return 0
  echo "trainium-cdk: node setup failed (exit status $status)" >&2
  systemctl stop --no-block ecs.service
  systemctl mask ecs.service
  shutdown -h +1 "trainium-cdk: node setup failed"
  exit $((status == 0 ? 1 : status))
}
trap finish EXIT
systemctl stop --no-block ecs.service
ecs_config="${ECS_CONFIG:-/etc/ecs/ecs.config}"
grep -qx ECS_AWSVPC_BLOCK_IMDS=true "$ecs_config" 2>/dev/null || echo ECS_AWSVPC_BLOCK_IMDS=true >> "$ecs_config"
