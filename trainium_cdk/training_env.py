"""What every backend's training job shares: mount point, compile-cache layout, port, environment.

The EKS job charts, the Batch job definition and the Slurm batch script all read these, and all of
them start the same launcher (``trainium_cdk.launcher``).
"""

from __future__ import annotations

from trainium_cdk.catalog import InstanceSpec
from trainium_cdk.launcher import launch_environment
from trainium_cdk.names import CACHE_DIR_NAME, CHECKPOINT_ROOT, LOCAL_CACHE_ROOT, SHARED_MOUNT
from trainium_cdk.versions import NeuronTrack

# The paths (the shared mount, the compile cache, checkpoints) are in trainium_cdk.names.
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
) -> dict[str, str]:
    """The environment of a training job on every backend (EKS jobs, the Batch job definition, the Slurm
    batch script): the Neuron runtime, EFA when the job may span nodes, what the launcher reads, and with
    shared storage the checkpoint root and the Hugging Face caches on it.

    :param multi_node: the job may span nodes: on EKS a job of more than one node (its count is in the
        manifest); on Batch and Slurm any job on an EFA type (the count is chosen at submit time).
    :param container: the job runs in a container (EKS, Batch), whose sockets must use eth0 to reach other
        nodes; on a host (Slurm) the Neuron runtime finds the primary interface (ens5) itself.
    :param shared_storage: /fsx is mounted in the job.
    """
    env = neuron_environment()
    if multi_node:
        env.update(efa_environment(instance))
        if container:
            env["CCOM_SOCKET_IFNAME"] = CONTAINER_SOCKET_IFNAME
    env.update(
        launch_environment(
            processes=processes, master_port=MASTER_PORT, cache_dir=cache_dir, precompile=precompile,
            checkpoint_root=CHECKPOINT_ROOT if shared_storage else None, track=track,
        )
    )
    if shared_storage:
        env["HF_HOME"] = HF_HOME
    return env
