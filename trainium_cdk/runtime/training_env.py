"""What every backend's training job shares: mount point, compile-cache layout, port, environment.

The EKS job charts, the Batch job definition and the Slurm batch script all read these, and all of
them start the same launcher (``trainium_cdk.runtime.launcher``).
"""

from __future__ import annotations

from collections.abc import Mapping

from trainium_cdk.facts import defaults
from trainium_cdk.facts.catalog import InstanceSpec
from trainium_cdk.facts.names import CACHE_DIR_NAME, CHECKPOINT_ROOT, LOCAL_CACHE_ROOT, NODE_METRICS_DIR, SHARED_MOUNT
from trainium_cdk.facts.versions import NeuronTrack
from trainium_cdk.runtime.launcher import launch_environment

# The paths (the shared mount, the compile cache, checkpoints) are in trainium_cdk.facts.names.
# The interface a container's sockets (torchrun, the Neuron bootstrap) use to reach other nodes: a pod's
# eth0, and a Batch awsvpc task's eth0 (its other interface, ecs-eth0, is link-local and reaches only the
# ECS agent). EFA carries the collectives. Hosts (Slurm) leave it unset: the runtime finds ens5 itself.
CONTAINER_SOCKET_IFNAME = "eth0"
# torchrun's rendezvous port on the rank-0 node, on every backend.
MASTER_PORT = 29500
# Hugging Face caches (hub, datasets) on shared storage, as the Neuron tutorials keep them: a model or
# dataset is downloaded once for every node and job.
HF_HOME = f"{SHARED_MOUNT}/huggingface"

# libfabric over EFA with device RDMA; fork-safe because data loaders fork.
_EFA = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
}
_NEURON = {
    "NEURON_RT_RESET_CORES": "1",
    "XLA_TRANSFER_SEED_ASYNC": "1",
}
# Neuron's settings for large-model training, per track, as the track's own training scripts and docs give
# them. A job's own env replaces any of them (on Slurm: the variable set when calling sbatch); the launcher
# puts the compile cache before NEURON_CC_FLAGS, whatever they are.
LARGE_MODEL_ENVIRONMENT: Mapping[str, Mapping[str, str]] = {
    # Source, unless another is named: Neuron's NxD Llama pretraining script of the track's release,
    # aws-neuron/neuronx-distributed release 2.29 (the track pins neuronx_distributed 0.18),
    # examples/training/llama/tp_zero1_llama_hf_pretrain/tp_zero1_llama3_8B_hf_pretrain.sh.
    "xla": {
        # "# HOST OOM": glibc's malloc arenas (up to 8 per core by default) under 32-64 workers a node.
        "MALLOC_ARENA_MAX": "64",
        # The compiler's transformer mode. --distribution-strategy=llm-training left these scripts in Neuron
        # 2.22 (release 2.21: "--model-type transformer --distribution-strategy=llm-training"; 2.22 to 2.29:
        # "--model-type transformer").
        "NEURON_CC_FLAGS": "--model-type transformer",
        "NEURON_FUSE_SOFTMAX": "1",
        # "# Async Runtime": executions each process may queue (Neuron, "Best Practices: Neuron Runtime
        # Performance": asynchronous execution, bounded because each queued request holds output buffers).
        "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS": "3",
        # "# Limit Number of NEFFs": graphs a process keeps loaded (default: all; "PyTorch NeuronX Environment
        # Variables", 2.29.1). Release 2.29's examples/training/llama/lightning/tp_zero1_llama2_7b_hf_finetune_ptl.sh.
        "NEURON_NUM_RECENT_MODELS_TO_KEEP": "4",
    },
    # None on TorchNeuron until a source of its own gives one. Its environment variable reference (awsdocs-neuron
    # torch/reference/env-vars, 2026-10-14, and torch-neuronx's docs) lists none of the names above:
    # NEURON_FUSE_SOFTMAX and NEURON_NUM_RECENT_MODELS_TO_KEEP are torch-neuronx's PyTorch/XLA settings
    # ("PyTorch NeuronX Environment Variables"), --model-type is what the NxD XLA scripts pass, and the Neuron
    # Runtime's reference (nrt-env-var-reference) says frameworks set its variables "on your behalf, so set
    # them explicitly only when you need a specific behavior".
    "native": {},
}


def cache_dir(cache_set: str, *, shared: bool = True) -> str:
    """The one compile-cache layout: ``/fsx/neuron-cache/<cache set>`` on shared storage, a node-local
    directory without it. Jobs that run at the same time must not share a cache set."""
    return f"{SHARED_MOUNT}/{CACHE_DIR_NAME}/{cache_set}" if shared else f"{LOCAL_CACHE_ROOT}/{cache_set}"


def efa_environment(spec: InstanceSpec) -> dict[str, str]:
    """libfabric settings for EFA; empty for an instance without EFA (it must not ask for the provider)."""
    return dict(_EFA) if spec.has_efa else {}


def neuron_environment() -> dict[str, str]:
    """Neuron runtime settings (the launcher adds the compile cache to NEURON_CC_FLAGS)."""
    return dict(_NEURON)


def large_model_environment(track: NeuronTrack) -> dict[str, str]:
    """Neuron's settings for large-model training on ``track`` (:data:`LARGE_MODEL_ENVIRONMENT`)."""
    return dict(LARGE_MODEL_ENVIRONMENT[track.name])


def job_environment(
    instance: InstanceSpec,
    *,
    processes: int,
    cache_dir: str,
    multi_node: bool,
    container: bool,
    shared_storage: bool,
    track: NeuronTrack | None = None,
    precompile: bool = False,
    precompile_steps: int = defaults.PRECOMPILE_STEPS,
    node_metrics: bool = False,
    metrics_push_url: str | None = None,
) -> dict[str, str]:
    """The environment of a training job on every backend (EKS jobs, the Batch job definition, the Slurm
    batch script): the Neuron runtime, the track's large-model settings, EFA when the job may span nodes,
    what the launcher reads, and with shared storage the checkpoint root and the Hugging Face caches on it.

    :param multi_node: the job may span nodes: on EKS a job of more than one node (its count is in the
        manifest); on Batch and Slurm any job on an EFA type (the count is chosen at submit time).
    :param container: the job runs in a container (EKS, Batch), whose sockets must use eth0 to reach other
        nodes; on a host (Slurm) the Neuron runtime finds the primary interface (ens5) itself.
    :param shared_storage: /fsx is mounted in the job.
    :param track: the Neuron track of the image and nodes: its pins and large-model settings; default none
        (neither: a job that trains nothing, such as the fabric check).
    :param precompile_steps: the step cap of precompile's graph extraction (``TRN_PRECOMPILE_STEPS``).
    :param node_metrics: the job can write the node's metrics folder (``NODE_METRICS_DIR``, which the node's
        Prometheus collector reads): on a host (Slurm, the development instance) and in a Batch container that
        mounts it; the launcher writes the job's compile-cache counters there. Default False (EKS: Pod Security
        baseline forbids the hostPath volume it would take; the job's log carries the counters).
    :param metrics_push_url: the Pushgateway the launcher pushes those counters to instead (EKS with
        observability.prometheus, ``TRN_METRICS_PUSH_URL``). Default: none.
    """
    env = neuron_environment()
    if track is not None:
        env.update(large_model_environment(track))
    if multi_node:
        env.update(efa_environment(instance))
        if container:
            env["CCOM_SOCKET_IFNAME"] = CONTAINER_SOCKET_IFNAME
    env.update(
        launch_environment(
            processes=processes, master_port=MASTER_PORT, cache_dir=cache_dir, precompile=precompile,
            precompile_steps=precompile_steps, checkpoint_root=CHECKPOINT_ROOT if shared_storage else None,
            track=track, metrics_dir=NODE_METRICS_DIR if node_metrics else None, metrics_push_url=metrics_push_url,
        )
    )
    if shared_storage:
        env["HF_HOME"] = HF_HOME
    return env
