"""One home per shared name: the taint key, labels, claim, queue, paths and stack output keys live in
trainium_cdk/facts/names.py; every writer and reader imports them. The CLI reads outputs by the exact keys the
synthesized stacks declare."""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.apps import synthesized
from tests.support.helpers import template_text
from trainium_cdk.facts import names

PACKAGE = paths.ROOT / "trainium_cdk"
HOMES = {PACKAGE / "facts" / "names.py", PACKAGE / "facts" / "catalog.py"}  # the taint key is the catalog's Neuron resource name


@functools.cache  # each test reads every module: parsed once
def _string_literals(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p not in HOMES)


SHARED = {
    "the Neuron taint key": "aws.amazon.com/neuron",
    "the health taint key": names.HEALTH_TAINT_KEY,
    "the compute-group label": names.GROUP_LABEL,
    "the node instance-type label": names.NODE_INSTANCE_TYPE_LABEL,
    "the node EFA label": names.NODE_EFA_LABEL,
    "the rank label": names.RANK_LABEL,
    "the job label": names.JOB_LABEL,
    "the claim": names.CLAIM_NAME,
    "the static volume": names.VOLUME_NAME,
    "the shared mount": names.SHARED_MOUNT,
    "the base image build argument": names.BASE_IMAGE_BUILD_ARG,
    "the examples' base tag build argument": names.BASE_TAG_BUILD_ARG,
}
OUTPUT_IDS = sorted(v for k, v in vars(names).items() if k.startswith("OUTPUT_"))


@pytest.mark.parametrize("what", sorted(SHARED))
def test_no_stray_copy_of_a_shared_name(what):
    value = SHARED[what]
    strays = [
        f"{path.relative_to(PACKAGE)}:{line}" for path in _modules() for line, text in _string_literals(path)
        if text == value
    ]
    assert not strays, f"{what} ({value!r}) spelled out outside trainium_cdk/facts/names.py: {strays}"


def test_no_stray_copy_of_an_output_key():
    """No module spells an output id or key itself (names.OUTPUT_* and output_key are the way)."""
    keys = set(OUTPUT_IDS) | {names.output_key(i) for i in OUTPUT_IDS}
    # The same words as CloudWatch dimensions and ParallelCluster fields, not outputs.
    allowed = {
        ("constructs/observability.py", "ClusterName"), ("constructs/parallelcluster.py", "ClusterName"),
        ("constructs/observability.py", "FileSystemId"), ("parallelcluster/configuration.py", "FileSystemId"),
        ("constructs/observability.py", "InstanceId"), ("node/neuron_metrics.py", "InstanceId"),
    }
    strays = [
        f"{path.relative_to(PACKAGE)}:{line} {text!r}" for path in _modules()
        for line, text in _string_literals(path)
        if text in keys and (str(path.relative_to(PACKAGE)), text) not in allowed
    ]
    assert not strays, strays


def test_every_output_id_the_stacks_write_comes_from_names():
    stacks = sorted((PACKAGE / "app" / "stacks").glob("*.py"))
    literal_ids = [
        f"{p.name}:{m.group(0)}" for p in stacks for m in re.finditer(r"CfnOutput\(\s*self,\s*f?\"[^\"]*\"", p.read_text())
    ]
    assert not literal_ids, literal_ids


def test_the_cli_reads_the_keys_the_synthesized_stacks_declare():
    """The exact keys the CLI asks for (Batch queue, definition, log group; the EKS image; dist/'s
    placeholders) are outputs of the synthesized stacks, for every group."""
    from trainium_cdk.app.dist import PLACEHOLDERS
    from trainium_cdk.cli import eks_jobs

    app = synthesized("trn1n.32xlarge+trn1.2xlarge")  # two groups, one of them named like a prefix
    outputs = app.template_json("batch")["Outputs"]
    groups = json.loads(template_text(outputs[names.output_key(names.OUTPUT_BATCH_GROUPS)]["Value"]))
    assert sorted(groups) == sorted(g.name for g in app.config.compute_groups)
    for group in app.config.compute_groups:
        for field in (names.BATCH_JOB_QUEUE_ARN, names.BATCH_JOB_DEFINITION_ARN, names.BATCH_LOG_GROUP_NAME):
            assert field in groups[group.name]
    assert eks_jobs.IMAGE_OUTPUT in app.template_json("eks")["Outputs"]
    for placeholder, (stack, key) in PLACEHOLDERS.items():
        if not stack:
            continue
        outputs = set(app.template_json(stack)["Outputs"])
        for group in app.config.compute_groups:
            assert key.replace("<group>", group.name) in outputs, placeholder
