"""Apps with every backend, synthesized once per test session and shared by the model tests.

Three apps cover every supported instance type once (trn2 types in us-east-2, where cfn-lint knows
them) and every backend: EKS (Karpenter and managed node groups), Batch, ParallelCluster and the
development instance. The pipeline app (a CDK Pipelines stack deploying the default app to two accounts)
is synthesized once too, with cdk-nag's AwsSolutions and NIST 800-53 rev 5 packs (a finding not acknowledged
fails its synth).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from tests.support.helpers import CDK_CONTEXT, US_EAST_2, Synthesized, add_nag_packs, config_with, new_outdir, synth

ALL_BACKENDS = ["eks", "batch", "parallelcluster", "instance"]


def _group(name: str, instance_type: str, az_id: str = "usw2-az4", nodes: int = 2) -> dict[str, Any]:
    return {"name": name, "instance_type": instance_type, "nodes": nodes, "max_nodes": 4, "az_ids": az_id}


VARIANTS: dict[str, dict[str, Any]] = {
    "trn1.32xlarge": {
        "backends": ALL_BACKENDS, "compute_groups": [_group("train", "trn1.32xlarge")],
        # The default config's data repository (config/default.yaml): a created bucket linked to /s3.
        "storage": {"data_repository": {"file_system_path": "/s3"}},
        # Prometheus-format metrics on every backend: the workspace, EKS's collector, the hosts' agents.
        "observability": {"prometheus": True},
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


PIPELINE: dict[str, Any] = {
    "repository": "my-org/ml-infra",
    "account": "111111111111",
    "connection_arn": "arn:aws:codeconnections:us-west-2:111111111111:connection/0a1b2c3d",
    "environments": [
        {"name": "dev", "account": "222222222222"},
        {"name": "prod", "account": "333333333333", "manual_approval": True},
    ],
}
PIPELINE_CONFIG_PATH = "config/ml-prod.yaml"


@dataclass
class SynthesizedPipeline:
    stack: Any  # PipelineStack
    assembly: cdk.cx_api.CloudAssembly
    outdir: Path

    def template_paths(self) -> list[Path]:
        """The pipeline stack's template and every stage's (nested assemblies)."""
        return sorted(self.outdir.rglob("*.template.json"))


@cache
def synthesized_pipeline() -> SynthesizedPipeline:
    """The pipeline app, synthesized once per session with cdk-nag (AwsSolutions and NIST 800-53 rev 5)."""
    from trainium_cdk.app.stacks.pipeline_stack import PipelineStack

    outdir = new_outdir()
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_nag_packs(app)  # raises on a finding
    config = config_with(pipeline=PIPELINE)
    stack = PipelineStack(
        app, "t-pipeline", config=config, config_path=PIPELINE_CONFIG_PATH, overrides={"nodes": "4"},
        env=cdk.Environment(region=config.region),
    )
    return SynthesizedPipeline(stack=stack, assembly=app.synth(), outdir=outdir)
