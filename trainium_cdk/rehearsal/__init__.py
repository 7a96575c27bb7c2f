"""The launch rehearsal: a deployed training job's exact command, run on this machine before paying for Trainium.

N "nodes" run as N process groups on loopback, each with the variables its scheduler sets on a node, the
container command (or batch script) exactly as the backend deploys it, and the CPU build of torch (gloo)
in place of Neuron. ``trn rehearse`` runs a user's job this way; the tests run every shipped artefact.

Every substitution is listed here and made in :class:`~trainium_cdk.rehearsal.stage.Stage`, nothing else
differs from what the scheduler runs on a node:

=====================================  ==========================================================
what the artefact says                 what runs here, and why
=====================================  ==========================================================
``/opt/trainium-cdk/examples/mlp/``    this package's ``trainium_cdk/examples/mlp/`` (the image's copy of it)
a recipe's folder (its image's           this package's ``trainium_cdk/recipes/<recipe>/`` (what both copy)
``/opt/trainium-cdk/recipes/``, the
head node's ``~/trainium/recipes/``)
``/fsx`` (the shared file system)      one local folder that every node of the job shares (``--fsx``)
``TRN_WORKDIR`` (the job's directory)  the directory ``trn rehearse`` runs in (your code is here, not on /fsx)
ParallelCluster's Neuron venv          a folder whose ``bin/activate`` does nothing (torch is on PATH)
``NPROC_PER_NODE`` (NeuronCores)       2 processes per node by default (``--procs-per-node``)
``MASTER_PORT`` 29500                  a free port (the rehearsal may run beside other programs)
host names and node addresses          127.0.0.1 (``hostname``, ``scontrol`` stand-ins; Volcano hosts)
``srun``                               starts the command once per node, each with its SLURM_NODEID
``systemd-run`` (dev instance)         runs the unit's command in the foreground, with its --setenv values
Neuron and EFA devices, torch-neuronx  absent: the CPU build of torch (gloo) trains instead
a TorchNeuron recipe's ``neuron``      ``cpu``, ``gloo`` and TorchDynamo's ``eager`` (``Stage.value``,
device, process group and compile      ``CPU_FOR_NEURON``): TRN_TORCH_DEVICE, TRN_DIST_BACKEND and
backend                                TRN_COMPILE_BACKEND, as the recipe's job sets them
the image (EKS, Batch)                 this machine's Python, the one ``trn`` runs in: torch must be there
``/opt/aws/neuron/bin`` (Neuron tools)  a folder of the stage (``Stage.neuron_bin``), not on the PATH a node
                                       gets: a Slurm script must put it there itself, as on a host. EKS and
                                       Batch containers carry the tools on their PATH: there, ``Stage.bin``
``TRN_HEARTBEAT_S`` 30 (Batch nodes)   1: a lost peer shows in seconds, not minutes
``TRN_FABRIC_SIZES`` (the fabric        64 KiB to 4 MiB (``FABRIC_SIZES_HERE``): gigabyte tensors in every
check's sweep, 1 MiB to 1 GiB)         process would not fit this machine's memory
the Neuron compiler and its cache      ``neuron_cc.py`` as every Python's ``sitecustomize`` (``PYTHONPATH``): each
(torch-neuronx's compiler wrapper,     training process takes one graph from the cache, or "compiles" it into it,
XLA track; TorchNeuron's NEFF cache,   with the cache layout and log lines of its track (native: debug lines only
native track)                          at ``TORCH_NEURONX_LOG_LEVEL=3``, as TorchNeuron prints them)
``/var/lib/trainium-cdk/metrics``      ``node-metrics/`` beside the stand-in /fsx (the node's Prometheus textfiles)
=====================================  ==========================================================

The tests add stand-ins of their own on the stage (``neuron-ls``, ``nccom-test``, a recording ``scontrol``:
tests/support/rehearsal.py lists them).
"""

from trainium_cdk.rehearsal.schedulers import (
    batch_retry_action,
    container_env,
    run_batch_job,
    run_batch_node_properties,
    run_kubernetes_job,
    run_slurm_script,
    run_volcano_job,
)
from trainium_cdk.rehearsal.stage import (
    EXAMPLE_DIR,
    LOOPBACK,
    PROCESSES_PER_NODE,
    TIMEOUT_S,
    NodeResult,
    Stage,
    free_port,
    kill_node,
    run_nodes,
)

__all__ = [
    "EXAMPLE_DIR", "LOOPBACK", "PROCESSES_PER_NODE", "TIMEOUT_S", "NodeResult", "Stage", "batch_retry_action",
    "container_env", "free_port", "kill_node", "run_batch_job", "run_batch_node_properties", "run_kubernetes_job",
    "run_nodes", "run_slurm_script", "run_volcano_job",
]
