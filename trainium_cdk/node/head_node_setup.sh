#!/bin/bash
# trainium-cdk: the head node's OnNodeConfigured action (no arguments).
#
# ParallelCluster refuses any update of the head node's OnNodeConfigured, so neither this file (its
# S3 key is its content hash) nor its arguments may ever change: a test pins its hash. It runs the
# head node's OnNodeUpdated action (the setup script with the Neuron pins and batch scripts), read
# from the cluster configuration ParallelCluster keeps on the head node. OnNodeUpdated may change:
# ParallelCluster runs the new one itself after each update.
set -euo pipefail

CONFIG=/opt/parallelcluster/shared/cluster-config.yaml
# python3-yaml ships with cloud-init on every Ubuntu AMI.
mapfile -t action < <(python3 -c '
import sys, yaml
action = yaml.safe_load(open(sys.argv[1]))["HeadNode"]["CustomActions"]["OnNodeUpdated"]
print(action["Script"])
for arg in action.get("Args") or []:
    print(arg)
' "${CONFIG}")
script="$(mktemp)"
aws s3 cp --only-show-errors "${action[0]}" "${script}"
exec bash "${script}" "${action[@]:1}"
