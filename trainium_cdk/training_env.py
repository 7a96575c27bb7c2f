"""What every backend's training job shares: mount point, compile-cache layout, port, environment.

The EKS job charts, the Batch job definition and the Slurm batch script all read these, and all of
them start the same launcher (``trainium_cdk.launcher``).
"""

from __future__ import annotations

from trainium_cdk.catalog import InstanceSpec
from trainium_cdk.names import CACHE_DIR_NAME, LOCAL_CACHE_ROOT, SHARED_MOUNT

# The paths (the shared mount, the compile cache, checkpoints) are in trainium_cdk.names.
# The interface a container's sockets (torchrun, the Neuron bootstrap) use to reach other nodes: a pod's
# eth0, and a Batch awsvpc task's eth0 (its other interface, ecs-eth0, is link-local and reaches only the
# ECS agent). EFA carries the collectives. Hosts (Slurm) leave it unset: the runtime finds ens5 itself.
CONTAINER_SOCKET_IFNAME = "eth0"
# torchrun's rendezvous port on the rank-0 node, on every backend.
MASTER_PORT = 29500

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
