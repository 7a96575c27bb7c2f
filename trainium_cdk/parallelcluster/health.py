"""The Slurm prolog health check of a Trainium cluster: before a job starts on a node, count the node's
Neuron devices with ``neuron-ls`` against the catalog; a node short of devices is drained (with the
reason) and the prolog fails, so Slurm requeues the job on other nodes.

ParallelCluster 3.6+ runs every script in ``/opt/slurm/etc/scripts/prolog.d/`` (slurm.conf ``Prolog``,
with ``nohold_on_prolog_fail``); /opt/slurm is shared from the head node, which installs the script.
"""

from __future__ import annotations

from trainium_cdk.config import Config
from trainium_cdk.names import NEURON_BIN
from trainium_cdk.parallelcluster.cluster_config import compute_resource_name
from trainium_cdk.parallelcluster.parts import PROLOG_NAME

PROLOG_DIR = "/opt/slurm/etc/scripts/prolog.d"
__all__ = ["PROLOG_DIR", "PROLOG_NAME", "render_prolog"]
SLURM_BIN = "/opt/slurm/bin"


def render_prolog(config: Config) -> str:
    """The prolog: the expected device count from the node's compute resource (its name is in the
    Slurm node name, ``<queue>-{st,dy}-<compute resource>-<n>``)."""
    cases = []
    for group in config.compute_groups:
        resource = compute_resource_name(group)
        cases.append(f"  *-st-{resource}-*|*-dy-{resource}-*) expected={config.spec(group).neuron_devices} ;;")
    lines = [
        "#!/bin/bash",
        "# trainium-cdk: Slurm prolog: drain a node whose Neuron devices are not all visible (neuron-ls).",
        f'export PATH="{NEURON_BIN}:{SLURM_BIN}:$PATH"',
        'node="${SLURMD_NODENAME:?}"',
        'case "$node" in',
        *cases,
        "  *) exit 0 ;;  # not a Trainium queue of this cluster",
        "esac",
        'found=$(neuron-ls --json-output 2>/dev/null | python3 -c \'import json, sys; print(len(json.load(sys.stdin)))\' '
        "2>/dev/null || echo 0)",
        'if [ "$found" -ne "$expected" ]; then',
        '  reason="trainium-cdk health: neuron-ls found $found of $expected Neuron devices"',
        '  scontrol update nodename="$node" state=drain reason="$reason"',
        '  echo "$reason on $node" >&2',
        "  exit 1",
        "fi",
        "exit 0",
    ]
    return "\n".join(lines) + "\n"
