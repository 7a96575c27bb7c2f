"""The time-to-first-step model (trainium_cdk/app/first_step.py): its sums, its README table, its sources, and the EKS
cut read from what the app synthesizes: the image pull term drops exactly when the synthesized Trainium node user
data turns on FastImagePull and pre-pulls the training image."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.app.eks.test_fast_image_pull import OWN_IMAGE, node_configs, prepulled
from tests.app.test_neuron_tracks import _manifest_objects
from tests.support import paths
from tests.support.helpers import synth
from trainium_cdk.app import first_step
from trainium_cdk.app.config import build_config

PAGE = paths.ROOT / "docs" / "concepts" / "launcher.md"


def test_the_readme_table_is_generated_from_the_model():
    assert first_step.block() in PAGE.read_text(), "run `make docs`"


def test_each_row_sums_its_terms_and_each_first_step_adds_its_compile():
    for path in first_step.paths():
        assert [t.name for t in path.terms] == list(first_step.NAMES)
        assert path.seconds == pytest.approx(sum(t.seconds for t in path.terms))
        for case, figure in first_step.COMPILES.items():
            assert path.first_step(case) == pytest.approx(path.seconds + figure.value)
        assert path.first_step("cold, JIT") > path.first_step("cold, TRN_PRECOMPILE=1") > path.first_step("warm /fsx cache")
    # The README's numbers are the model's: every row's cells, in minutes.
    rows = [line for line in first_step.table(first_step.paths()).splitlines()[2:]]
    for path, row in zip(first_step.paths(), rows, strict=True):
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
        assert cells[:2] == [path.backend, path.label]
        numbers = [float(c) for c in cells[2:]]
        expected = [path.term(n).seconds / 60 for n in first_step.NAMES] + [path.seconds / 60]
        expected += [path.first_step(case) / 60 for case in first_step.COMPILES]
        assert numbers == pytest.approx(expected, abs=0.05)
        # The shown total is the sum of the shown terms (to rounding).
        assert numbers[len(first_step.NAMES)] == pytest.approx(sum(numbers[: len(first_step.NAMES)]), abs=0.3)


def test_the_pull_goes_by_image_size_and_node_bandwidth():
    pull = first_step.pull_seconds
    assert pull(30, 800, fast_pull=False) == pytest.approx(2 * pull(15, 800, fast_pull=False))
    # The engine's rate binds on a Trainium node; a thin network binds below it.
    assert pull(15, 800, fast_pull=False) == pytest.approx(15 / first_step.PULL_RATE.value)
    assert pull(15, 0.1, fast_pull=False) == pytest.approx(15 / (0.1 / 8))
    assert pull(15, 800, fast_pull=True) == pytest.approx(pull(15, 800, fast_pull=False) * first_step.FAST_PULL_FACTOR.value)


def test_every_figure_has_a_source_and_says_when_it_is_an_estimate():
    table = first_step.sources()
    for name, figure in first_step.FIGURES.items():
        assert figure.source and figure.value >= 0
        assert figure.cited().endswith("(estimate)") == figure.estimate
        assert f"| {name} |" in table
    # The documented ones name their documents.
    for figure in (first_step.PULL_RATE, first_step.EKS_DRIVERS, first_step.COMPILE_JIT, first_step.COMPILE_PRECOMPILED):
        assert not figure.estimate and re.search(r"Neuron docs|EKS user guide|AWS Machine Learning Blog", figure.source)


def _eks_node_classes(**eks: Any) -> list[dict[str, Any]]:
    config = build_config({"backends": ["eks"], "storage": {"enabled": False}, "workloads": {"image": OWN_IMAGE}, "eks": eks})
    return [o for o in _manifest_objects(synth(config, nag=False).template_json("eks")) if o.get("kind") == "EC2NodeClass"]


def _modelled(node_class: dict[str, Any]) -> first_step.Startup:
    """The EKS path the model gives for a synthesized node class: the cuts as its user data has them."""
    user_data = node_class["spec"].get("userData")
    if user_data is None:
        return first_step.eks(fast_pull=False, prepull=False)
    gates = [c["spec"].get("featureGates", {}) for c in node_configs(user_data)]
    fast = any(g.get("FastImagePull") for g in gates) and node_class["spec"]["blockDeviceMappings"][0]["ebs"].get("throughput", 0) >= 600
    return first_step.eks(fast_pull=fast, prepull=bool(prepulled(user_data)))


def test_the_pull_term_drops_when_the_synthesized_nodes_pull_at_boot():
    (on, *_) = _eks_node_classes(prepull_images=True)
    (off, *_) = _eks_node_classes(fast_image_pull=False, prepull_images=False)
    (fast_only, *_) = _eks_node_classes(prepull_images=False)
    cut, fast, neither = _modelled(on), _modelled(fast_only), _modelled(off)
    assert neither == first_step.eks(fast_pull=False, prepull=False)
    assert cut == first_step.eks(fast_pull=True, prepull=True)
    assert neither.term("image pull").seconds > fast.term("image pull").seconds > cut.term("image pull").seconds
    # The pre-pull takes the join's time off the pull (the pull runs through it); nothing else moves.
    assert fast.term("image pull").seconds - cut.term("image pull").seconds == pytest.approx(first_step.EKS_JOIN.value)
    assert [t for t in cut.terms if t.name != "image pull"] == [t for t in neither.terms if t.name != "image pull"]
    assert neither.seconds - cut.seconds == pytest.approx(neither.term("image pull").seconds - cut.term("image pull").seconds)
