"""The Slurm prolog health check of a Trainium cluster: before a job starts on a node, the node health check
(node/health_check.py: Neuron devices, NeuronCores and EFA interfaces against the catalog, the track's driver, /fsx);
a node that fails is drained (with the failed checks as the reason) and the prolog fails, so Slurm requeues the job
on other nodes.

The on-node collective (nccom-test over every NeuronCore: seconds to minutes, COLLECTIVE_TIMEOUT_S) runs once, at
the node's first boot: the compute nodes' OnNodeConfigured (neuron_setup.sh ``--boot-check``) runs this prolog with
TRN_HEALTH_BOOT=1 before slurmd registers the node, and a failure fails the node's bootstrap, so ParallelCluster
replaces the instance before it takes a job. Not in the per-job prolog, which must stay about a second; not as
Slurm's HealthCheckProgram, which slurmd kills after 60 seconds, runs at every HealthCheckInterval (on a busy node
too, where the NeuronCores are the job's) and, failing at slurmd's start, is run again until it passes and blocks
the node's registration meanwhile (slurm.conf(5), HealthCheckProgram).

ParallelCluster 3.6+ runs every script in ``/opt/slurm/etc/scripts/prolog.d/`` (slurm.conf ``Prolog``,
with ``nohold_on_prolog_fail``); /opt/slurm is shared from the head node, which installs the script.
"""

from __future__ import annotations

from trainium_cdk import node
from trainium_cdk.app.config import Config
from trainium_cdk.app.parallelcluster.cluster_config import compute_resource_name
from trainium_cdk.facts.names import NEURON_BIN, SHARED_MOUNT
from trainium_cdk.node.health_check import COLLECTIVE_TIMEOUT_S
from trainium_cdk.parallelcluster.parts import PROLOG_NAME

PROLOG_DIR = "/opt/slurm/etc/scripts/prolog.d"
__all__ = ["PROLOG_DIR", "PROLOG_NAME", "render_prolog"]
SLURM_BIN = "/opt/slurm/bin"
SCRIPT = "slurm_prolog.sh"
HEALTH_CHECK = "health_check.py"


def render_prolog(config: Config) -> str:
    """The prolog (``trainium_cdk/node/slurm_prolog.sh``) with what each compute resource's nodes must show in its
    header (the resource's name is in the Slurm node name) and the health check program itself."""
    expected = {}
    for group in config.compute_groups:
        spec = config.spec(group)
        cores = ",".join(map(str, spec.neuron_core_counts))
        expected[compute_resource_name(group)] = f"{spec.neuron_devices}:{cores}:{spec.efa_interfaces}"
    return node.program(SCRIPT, {
        "PROLOG_EXPECTED": " ".join(f"{resource}={facts}" for resource, facts in expected.items()),
        "NEURON_DRIVER": config.neuron_track.driver,
        "SHARED_MOUNT": SHARED_MOUNT if config.storage.enabled else "",
        "HEALTH_PROGRAM": node.packed(HEALTH_CHECK),
        "NEURON_BIN": NEURON_BIN, "SLURM_BIN": SLURM_BIN, "COLLECTIVE_TIMEOUT": str(COLLECTIVE_TIMEOUT_S),
    }, shebang="/bin/bash")
