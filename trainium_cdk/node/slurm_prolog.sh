#!/bin/bash
# trainium-cdk: Slurm prolog: drain a node whose Neuron devices are not all visible (neuron-ls); the prolog
# then fails, and Slurm requeues the job on other nodes.
#   PROLOG_EXPECTED  "<compute resource>=<Neuron devices> ..." of the cluster's Trainium compute resources
#                    (a Slurm node is named <queue>-{st,dy}-<compute resource>-<n>)
#   NEURON_BIN, SLURM_BIN  where the Neuron tools and Slurm's commands are (a prolog's PATH has neither)
export PATH="${NEURON_BIN:?}:${SLURM_BIN:?}:$PATH"
node="${SLURMD_NODENAME:?}"
expected=""
for pair in ${PROLOG_EXPECTED:?}; do
  case "$node" in
    *-st-"${pair%=*}"-*|*-dy-"${pair%=*}"-*) expected="${pair#*=}"; break ;;
  esac
done
[ -n "$expected" ] || exit 0  # not a Trainium queue of this cluster
found=$(neuron-ls --json-output 2>/dev/null | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))' 2>/dev/null || echo 0)
if [ "$found" -ne "$expected" ]; then
  reason="trainium-cdk health: neuron-ls found $found of $expected Neuron devices"
  scontrol update nodename="$node" state=drain reason="$reason"
  echo "$reason on $node" >&2
  exit 1
fi
exit 0
