"""The environment distributed training on Neuron and EFA needs: one place for every backend.

EKS job charts, the Batch job definition and the Slurm script all read these maps.
"""

from __future__ import annotations

from trainium_cdk.catalog import InstanceSpec

# Where hosts mount the shared file system (Batch, ParallelCluster, the dev instance); pods mount it at
# /data. The Neuron compile cache lives in one directory per job family under <mount>/neuron-cache.
HOST_MOUNT_DIR = "/fsx"
CACHE_DIR_NAME = "neuron-cache"
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


def efa_environment(spec: InstanceSpec) -> dict[str, str]:
    """libfabric settings for EFA; empty for an instance without EFA (it must not ask for the provider)."""
    return dict(_EFA) if spec.has_efa else {}


def neuron_environment(cache_dir: str) -> dict[str, str]:
    """Neuron runtime settings and the compile cache directory (one per cache set, on shared storage)."""
    return {**_NEURON, "NEURON_CC_FLAGS": f"--cache_dir={cache_dir}"}
