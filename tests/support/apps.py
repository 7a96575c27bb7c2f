"""Apps with every backend, synthesized once per test session and shared by the model tests.

Three apps cover every supported instance type once (trn2 types in us-east-2, where cfn-lint knows
them) and every backend: EKS (Karpenter and managed node groups), Batch, ParallelCluster and the
development instance. The pipeline app (a CDK Pipelines stack deploying the default app to two accounts)
is synthesized once too. Every one runs cdk-nag's AwsSolutions and NIST 800-53 rev 5 packs (a finding not
acknowledged fails its synth); tests/meta/test_quality.py lints them.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from tests.support import synth_cache
from tests.support.helpers import (
    CDK_CONTEXT,
    US_EAST_2,
    Synthesized,
    add_nag_packs,
    config_with,
    new_outdir,
    quality_synth,
)

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
        # The managed node group path (Cluster Autoscaler); the other variants use Karpenter, the default. And the
        # example images built (the BERT-large example with them), which the others leave off, as the default does.
        "eks": {"capacity": "managed", "example_images": True},
        "compute_groups": [_group("big", "trn1n.32xlarge"), _group("small", "trn1.2xlarge", nodes=1)],
    },
    "trn2.48xlarge+trn2u.48xlarge": {
        **US_EAST_2,
        "backends": ALL_BACKENDS,
        # Two teams with a name and a share (issue 46): Batch's fair-share queues under every quality gate.
        "teams": [{"name": "research", "share": 3}, {"name": "platform-eng", "share": 1}],
        "compute_groups": [
            _group("trn2", "trn2.48xlarge", "use2-az3"), _group("ultra", "trn2u.48xlarge", "use2-az3"),
        ],
    },
}


# Capacity blocks and reservations across the backends that take them: a block group and a reserved group with the
# reservation's own placement group (tests/app/test_capacity.py reads its templates; tests/unit/config/
# test_config_literals.py synthesizes it with cdk-nag and lints it as its "capacity block" variant: one app for both).
CAPACITY_BLOCK_ID = "cr-0bbbbbbbbbbbbbbbb"
CAPACITY_RESERVATION_ID = "cr-0aaaaaaaaaaaaaaaa"
CAPACITY_PLACEMENT_GROUP = "ml-reservation-pg"
CAPACITY: dict[str, Any] = {
    "backends": ["eks", "batch", "parallelcluster"],
    "eks": {"capacity": "managed"},  # node groups; Karpenter's reservation terms: tests/app/test_capacity_from_zero.py
    "compute_groups": [
        {"name": "block", "nodes": 2, "max_nodes": 2, "az_ids": "usw2-az4",
         "capacity": {"type": "capacity-block", "reservation_id": CAPACITY_BLOCK_ID}},
        {"name": "reserved", "nodes": 2, "max_nodes": 4, "az_ids": "usw2-az4",
         "capacity": {"type": "reservation", "reservation_id": CAPACITY_RESERVATION_ID,
                      "placement_group": CAPACITY_PLACEMENT_GROUP}},
    ],
}


@cache
def synthesized(name: str) -> Synthesized:
    """The app of one variant, synthesized once per run with cdk-nag (a finding not acknowledged fails it;
    tests/meta/test_quality.py lints it too)."""
    return quality_synth(config_with(**VARIANTS[name]))


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


class SynthesizedPipeline:
    """The pipeline app's cloud assembly and its live stack (composed on first use when read from the run's
    cache, like Synthesized.stacks)."""

    def __init__(self, stack: Any, assembly: cdk.cx_api.CloudAssembly, outdir: Path):
        self._stack, self.assembly, self.outdir = stack, assembly, outdir

    @property
    def stack(self) -> Any:  # PipelineStack
        if self._stack is None:
            self._stack = _pipeline_stack(cdk.App(outdir=str(new_outdir()), context=CDK_CONTEXT))
        return self._stack

    def template_paths(self) -> list[Path]:
        """The pipeline stack's template and every stage's (nested assemblies)."""
        return sorted(self.outdir.rglob("*.template.json"))

    def checked_template_paths(self) -> list[Path]:
        """What cfn-lint and checkov read: the pipeline stack's template and the last stage's (prod). The other
        stages deploy the same app to another account, their templates prod's but for values (the account, the
        stage's name in ids and names): same_but_values() asserts it in tests/app/test_pipeline.py."""
        last = self._stage_folder(PIPELINE["environments"][-1]["name"])
        return [p for p in self.template_paths() if p.parent in (self.outdir, last)]

    def _stage_folder(self, stage: str) -> Path:
        """A stage's nested cloud assembly (the CDK's ``assembly-<stack>-<stage>``)."""
        return self.outdir / f"assembly-t-pipeline-{stage}"

    def stage_templates(self, stage: str) -> dict[str, dict[str, Any]]:
        """A stage's templates by stack (network, storage, eks, smoke)."""
        folder = self._stage_folder(stage)
        prefix = f"tpipeline{stage}t"
        return {re.sub(r"[0-9A-F]{8}$", "", p.name.removesuffix(".template.json")).removeprefix(prefix):
                json.loads(p.read_text()) for p in folder.glob("*.template.json")}


def value_shape(value: Any) -> Any:
    """A template value with every string, number and boolean written as its type: its structure, not its values."""
    if isinstance(value, dict):
        return {k: value_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [value_shape(v) for v in value]
    return type(value).__name__


def same_but_values(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two templates hold the same resources (types, properties, attributes) and sections, values aside
    (logical ids too, which may carry a stage's name)."""
    def shapes(template: dict[str, Any]) -> list[str]:
        return sorted(json.dumps(value_shape(r), sort_keys=True) for r in template.get("Resources", {}).values())

    return sorted(one) == sorted(other) and shapes(one) == shapes(other) and all(
        len(one[section]) == len(other[section]) for section in one if isinstance(one[section], dict))


def _pipeline_stack(app: cdk.App) -> Any:
    from trainium_cdk.app.stacks.pipeline_stack import PipelineStack

    config = config_with(pipeline=PIPELINE)
    return PipelineStack(
        app, "t-pipeline", config=config, config_path=PIPELINE_CONFIG_PATH, overrides={"nodes": "4"},
        env=cdk.Environment(region=config.region),
    )


@cache
def synthesized_pipeline() -> SynthesizedPipeline:
    """The pipeline app, synthesized once per run (tests/support/synth_cache.py) with cdk-nag (AwsSolutions and
    NIST 800-53 rev 5)."""
    stacks: list[Any] = []

    def synthesize(outdir: Path) -> cdk.cx_api.CloudAssembly:
        app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
        add_nag_packs(app)  # raises on a finding
        stacks.append(_pipeline_stack(app))
        return app.synth()

    config = config_with(pipeline=PIPELINE)
    cached = synth_cache.entry(
        "pipeline", config, synthesize, context=CDK_CONTEXT, path=PIPELINE_CONFIG_PATH, overrides={"nodes": "4"},
    )
    if cached is None:
        outdir = new_outdir()
        assembly = synthesize(outdir)
        synth_cache.log_uncached("pipeline", config)
        return SynthesizedPipeline(stack=stacks[0], assembly=assembly, outdir=outdir)
    outdir, _ = cached
    return SynthesizedPipeline(stack=stacks[0] if stacks else None, assembly=cdk.cx_api.CloudAssembly(str(outdir)),
                               outdir=outdir)
