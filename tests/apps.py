"""Apps with every backend, synthesized once per test session and shared by the model tests.

Three apps cover every supported instance type once (trn2 types in us-east-2, where cfn-lint knows
them) and every backend: EKS (Karpenter and managed node groups), Batch, ParallelCluster and the
development instance.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from tests.helpers import US_EAST_2, Synthesized, config_with, synth

ALL_BACKENDS = ["eks", "batch", "parallelcluster", "instance"]


def _group(name: str, instance_type: str, az_id: str = "usw2-az4", nodes: int = 2) -> dict[str, Any]:
    return {"name": name, "instance_type": instance_type, "nodes": nodes, "max_nodes": 4, "az_ids": az_id}


VARIANTS: dict[str, dict[str, Any]] = {
    "trn1.32xlarge": {
        "backends": ALL_BACKENDS, "compute_groups": [_group("train", "trn1.32xlarge")],
        # The default config's data repository (config/default.yaml): a created bucket linked to /s3.
        "storage": {"data_repository": {"file_system_path": "/s3"}},
    },
    "trn1n.32xlarge+trn1.2xlarge": {
        "backends": ["eks", "batch", "parallelcluster"],
        # The managed node group path (Cluster Autoscaler); the other variants use Karpenter, the default.
        "eks": {"capacity": "managed"},
        "compute_groups": [_group("big", "trn1n.32xlarge"), _group("small", "trn1.2xlarge", nodes=1)],
    },
    "trn2.48xlarge+trn2u.48xlarge": {
        **US_EAST_2,
        "backends": ALL_BACKENDS,
        "compute_groups": [
            _group("trn2", "trn2.48xlarge", "use2-az3"), _group("ultra", "trn2u.48xlarge", "use2-az3"),
        ],
    },
}


@cache
def synthesized(name: str) -> Synthesized:
    """The app of one variant, synthesized once per session (cdk-nag runs in test_quality)."""
    return synth(config_with(**VARIANTS[name]), nag=False)
