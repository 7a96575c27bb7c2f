"""The EKS health checker per instance type, not per compute group: everything it checks is the type's (its devices,
cores, EFA interfaces, its probe pod's devices) and the track's (the driver), and one DaemonSet and probe spec per
group took the EKS stack's template past CloudFormation's 1 MB at 50 managed node groups (test_scale_eks.py). Two
groups of one type share a checker; each checker lands on the new nodes of our groups of its type, and only there."""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from typing import Any

import pytest

from tests.support.helpers import Synthesized, config_with, synth
from tests.support.reachability import Reachability
from tests.support.scheduling import lands_on, pod_templates
from trainium_cdk.charts.node_health import NAME
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.names import GROUP_LABEL

GROUPS = {"pretrain": "trn1.32xlarge", "finetune": "trn1.32xlarge", "eval": "trn1n.32xlarge"}


@cache
def _app(capacity: str) -> tuple[Synthesized, Reachability]:
    groups = [{"name": name, "instance_type": instance_type, "nodes": 1, "max_nodes": 2, "az_ids": "usw2-az4"}
              for name, instance_type in GROUPS.items()]
    result = synth(config_with(backends=["eks"], eks={"capacity": capacity}, compute_groups=groups), nag=False)
    return result, Reachability.from_dir(result.outdir)


@pytest.fixture(scope="module", params=["karpenter", "managed"])
def app(request) -> tuple[Synthesized, Reachability]:
    return _app(request.param)


def _health_objects(model: Reachability) -> list[dict[str, Any]]:
    return [o for _, objects in model.manifests() for o in objects if o["metadata"].get("name", "").startswith(NAME)]


def test_two_groups_of_one_type_share_one_checker_and_two_types_get_two(app):
    _, model = app
    objects = _health_objects(model)
    assert sorted(o["metadata"]["name"] for o in objects if o["kind"] == "DaemonSet") == [
        "trainium-node-health-trn1-32xlarge", "trainium-node-health-trn1n-32xlarge"]
    (files,) = [o["data"] for o in objects if o["kind"] == "ConfigMap"]
    assert sorted(f for f in files if f.startswith("probe-")) == [
        "probe-trn1-32xlarge.json", "probe-trn1n-32xlarge.json"]
    for instance_type in set(GROUPS.values()):
        (ds,) = [o for o in objects if o["metadata"]["name"] == f"{NAME}-{instance_type.replace('.', '-')}"]
        (container,) = ds["spec"]["template"]["spec"]["containers"]
        spec = DEFAULT_CATALOG.get(instance_type)
        command = container["command"]
        args = {flag: command[i + 1] for i, flag in enumerate(command) if flag.startswith("--") and flag != "--kube"}
        assert (args["--devices"], args["--efa"]) == (str(spec.neuron_devices), str(spec.efa_interfaces))
        assert args["--probe"] == f"/opt/trainium-cdk/probe-{instance_type.replace('.', '-')}.json"
        probe = json.loads(files[args["--probe"].rsplit("/", 1)[1]])
        limits = probe["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"aws.amazon.com/neuron": str(spec.neuron_devices)}


def test_each_checker_lands_on_the_new_nodes_of_our_groups_of_its_type_only(app):
    """The scheduling model (tests/support/scheduling.py) with the well-known instance-type label every node carries:
    a checker lands on each group of its type while the node is unchecked, on no group of another type, and on no
    node of its type that is not one of our groups' (no GROUP_LABEL: someone else's node group in the cluster)."""
    _, model = app
    checkers = {p.name: p for p in pod_templates(_health_objects(model)) if p.kind == "DaemonSet"}
    ours = [n for n in model.of_backend("eks") if GROUP_LABEL in n.labels]
    assert sorted(n.labels[GROUP_LABEL] for n in ours) == sorted(GROUPS)
    theirs = [dataclasses.replace(n, name=f"theirs-{n.name}", labels={k: v for k, v in n.labels.items()
                                                                       if k != GROUP_LABEL}) for n in ours]
    landed = {name: sorted(n.name for n in lands_on(checker, [*ours, *theirs], checked=False))
              for name, checker in checkers.items()}
    names = {n.labels[GROUP_LABEL]: n.name for n in ours}
    assert landed == {
        "trainium-node-health-trn1-32xlarge": sorted([names["pretrain"], names["finetune"]]),
        "trainium-node-health-trn1n-32xlarge": [names["eval"]],
    }
