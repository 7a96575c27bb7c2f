"""The ParallelCluster (Slurm) backend's configuration, node setup script and batch scripts."""

from trainium_cdk.parallelcluster.cluster_config import (
    ClusterIds,
    S3Object,
    cluster_configuration,
    cluster_name,
    render_cluster_yaml,
)
from trainium_cdk.parallelcluster.dist import write_dist
from trainium_cdk.parallelcluster.sbatch import render_sbatch

__all__ = [
    "ClusterIds",
    "S3Object",
    "cluster_configuration",
    "cluster_name",
    "render_cluster_yaml",
    "render_sbatch",
    "write_dist",
]
