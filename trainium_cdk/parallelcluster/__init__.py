"""The ParallelCluster (Slurm) backend's configuration, node setup script and batch scripts.

Names resolve on first use: the SlurmCluster construct imports ``parallelcluster.parts`` without
loading the config-reading modules.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "ClusterIds": "trainium_cdk.parallelcluster.parts",
    "S3Object": "trainium_cdk.parallelcluster.parts",
    "cluster_configuration": "trainium_cdk.app.parallelcluster.cluster_config",
    "cluster_name": "trainium_cdk.app.parallelcluster.cluster_config",
    "render_cluster_yaml": "trainium_cdk.app.parallelcluster.cluster_config",
    "image_configuration": "trainium_cdk.app.parallelcluster.image",
    "render_image_yaml": "trainium_cdk.app.parallelcluster.image",
    "render_sbatch": "trainium_cdk.app.parallelcluster.sbatch",
    "write_dist": "trainium_cdk.app.dist.parallelcluster",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'trainium_cdk.parallelcluster' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
