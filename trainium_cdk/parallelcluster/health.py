"""The Slurm prolog health check of a Trainium cluster: before a job starts on a node, count the node's
Neuron devices with ``neuron-ls`` against the catalog; a node short of devices is drained (with the
reason) and the prolog fails, so Slurm requeues the job on other nodes.

ParallelCluster 3.6+ runs every script in ``/opt/slurm/etc/scripts/prolog.d/`` (slurm.conf ``Prolog``,
with ``nohold_on_prolog_fail``); /opt/slurm is shared from the head node, which installs the script.
"""

from __future__ import annotations

from trainium_cdk import node
from trainium_cdk.config import Config
from trainium_cdk.names import NEURON_BIN
from trainium_cdk.parallelcluster.cluster_config import compute_resource_name
from trainium_cdk.parallelcluster.parts import PROLOG_NAME

PROLOG_DIR = "/opt/slurm/etc/scripts/prolog.d"
__all__ = ["PROLOG_DIR", "PROLOG_NAME", "render_prolog"]
SLURM_BIN = "/opt/slurm/bin"
SCRIPT = "slurm_prolog.sh"


def render_prolog(config: Config) -> str:
    """The prolog (``trainium_cdk/node/slurm_prolog.sh``) with the expected device count of each compute
    resource in its header (the resource's name is in the Slurm node name)."""
    expected = {compute_resource_name(g): config.spec(g).neuron_devices for g in config.compute_groups}
    return node.program(SCRIPT, {
        "PROLOG_EXPECTED": " ".join(f"{resource}={devices}" for resource, devices in expected.items()),
        "NEURON_BIN": NEURON_BIN, "SLURM_BIN": SLURM_BIN,
    }, shebang="/bin/bash")
