#!/bin/bash
# trainium-cdk: Slurm prolog: the node health check (node/health_check.py) before every job on a Trainium node:
# Neuron devices, NeuronCores and EFA interfaces against the catalog, the track's driver loaded, /fsx mounted. A node
# that fails is drained with the failed checks as the reason; the prolog then fails, and Slurm requeues the job on
# other nodes. No collective here: the prolog runs before every job and must stay cheap (about a second).
# At the node's first boot (TRN_HEALTH_BOOT=1: neuron_setup.sh, the compute nodes' OnNodeConfigured, before slurmd
# registers the node) the same check runs once with the on-node collective, given COLLECTIVE_TIMEOUT seconds; a
# failure drains nothing (the node is not in service yet, and a drain would stay on the Slurm node name for its
# replacement): it fails the bootstrap, and ParallelCluster terminates the instance and launches another.
#   PROLOG_EXPECTED  "<compute resource>=<devices>:<NeuronCores>:<EFA interfaces> ..." of the cluster's Trainium
#                    compute resources (a Slurm node is named <queue>-{st,dy}-<compute resource>-<n>)
#   NEURON_DRIVER    the aws-neuronx-dkms version the nodes load (the track's); SHARED_MOUNT /fsx, or empty
#   HEALTH_PROGRAM   node/health_check.py, gzip then base64
#   NEURON_BIN, SLURM_BIN  where the Neuron tools and Slurm's commands are (a prolog's PATH has neither)
#   COLLECTIVE_TIMEOUT  seconds the first boot's collective may take (node/health_check.py COLLECTIVE_TIMEOUT_S)
export PATH="${NEURON_BIN:?}:${SLURM_BIN:?}:$PATH"
node="${SLURMD_NODENAME:?}"
expected=""
for pair in ${PROLOG_EXPECTED:?}; do
  case "$node" in
    *-st-"${pair%=*}"-*|*-dy-"${pair%=*}"-*) expected="${pair#*=}"; break ;;
  esac
done
[ -n "$expected" ] || exit 0  # not a Trainium queue of this cluster
IFS=: read -r devices cores efa <<< "$expected"
args=(--devices "$devices" --cores "$cores" --efa "$efa")
[ -z "${NEURON_DRIVER:-}" ] || args+=(--driver "$NEURON_DRIVER")
[ -z "${SHARED_MOUNT:-}" ] || args+=(--fsx "$SHARED_MOUNT")
if [ "${TRN_HEALTH_BOOT:-}" = 1 ]; then
  args+=(--collective --collective-timeout "${COLLECTIVE_TIMEOUT:?}")
  if ! echo "${HEALTH_PROGRAM:?}" | base64 -d | gunzip | python3 - "${args[@]}"; then
    echo "trainium-cdk health: node $node failed its first-boot check: its bootstrap fails" >&2
    exit 1
  fi
  exit 0
fi
if ! failed=$(echo "${HEALTH_PROGRAM:?}" | base64 -d | gunzip | python3 - "${args[@]}" 2>&1 >/dev/null); then
  failed="${failed:-the health check did not run}"
  failed="${failed//trainium-cdk health: FAIL /}"
  reason="trainium-cdk health: ${failed//$'\n'/;}"
  scontrol update nodename="$node" state=drain reason="$reason"
  echo "$reason on $node" >&2
  exit 1
fi
exit 0
