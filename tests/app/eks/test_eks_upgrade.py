"""The EKS platform's own upgrades on a Karpenter cluster (the default capacity): the Kubernetes minor, the EKS AMI
release, Karpenter, the Neuron device plugin, a group removed, judged by tests/support/lifecycle.py on the synthesized
templates before and after; and which Kubernetes minors the app deploys. The managed node groups' side of the same
changes, and Batch's and ParallelCluster's, are in tests/app/test_day2.py (its CHANGES are these)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.app.test_day2 import CHANGES, REVERSED, _config
from tests.app.test_neuron_tracks import _manifest_objects
from tests.support import paths
from tests.support.helpers import Synthesized, synth
from tests.support.lifecycle import control_plane_update, karpenter_drift, kubernetes_version, system_nodegroup_changes
from trainium_cdk.app import day2
from trainium_cdk.facts import versions

UPSTREAM = paths.DATA / "upstream"
# The changes that touch the EKS stack (an image change only re-applies workloads; a backend added is another stack).
EKS_CHANGES = sorted(set(CHANGES) - {"image", "backend_added"})
# Which of them drift Karpenter's nodes (replaced once their job ends): what the model must find.
DRIFTS = {"neuron_pin", "instance_type", "kubernetes_version", "eks_ami_release"}


def _karpenter(raw: dict[str, Any]) -> None:
    raw["eks"] = {}
    raw["backends"] = ["eks"]


@pytest.fixture(scope="module")
def karpenter_pairs() -> dict[str, tuple[Synthesized, Synthesized]]:
    def config(change):
        def edit(raw):
            change(raw)
            _karpenter(raw)
        return _config(edit)

    base = synth(config(lambda raw: None), nag=False)
    found = {}
    for name in EKS_CHANGES:
        if name in REVERSED:
            continue
        change, context = CHANGES[name]
        with context():
            found[name] = (base, synth(config(change), nag=False))
    found.update({name: (found[of][1], base) for name, of in REVERSED.items()})
    return found


def _job_pod_annotations(result: Synthesized) -> list[dict[str, str]]:
    from trainium_cdk.app.workloads import render_job

    pods = []
    for job in ("mlp", "mlp-distributed"):
        for obj in render_job(result.config, name="x", image="i", nodes=None, group="train", job=job):
            specs = [t["template"] for t in obj["spec"]["tasks"]] if "tasks" in obj["spec"] else [obj["spec"]["template"]]
            pods += [spec["metadata"].get("annotations", {}) for spec in specs]
    return pods


def _drift(before: Synthesized, now: Synthesized) -> list[Any]:
    old, new = before.template_json("eks"), now.template_json("eks")
    return karpenter_drift(_manifest_objects(old), _manifest_objects(new), (kubernetes_version(old), kubernetes_version(new)),
                           _job_pod_annotations(before))


@pytest.mark.parametrize("change", EKS_CHANGES)
def test_the_day2_table_says_where_karpenter_stops_running_jobs(karpenter_pairs, change):
    """A drifted node is replaced after its job (do-not-disrupt pods, no forced expiry); a removed group's pool goes
    with its nodes. The Day-2 table's Karpenter stopper is exactly where the model stops a job."""
    effects = _drift(*karpenter_pairs[change])
    assert bool(effects) == (change in DRIFTS | set(REVERSED)), (change, effects)
    (row,) = [c for c in day2.CHANGES if c.key == change]
    assert ("eks-karpenter" in row.stops) == any(e.stops_jobs for e in effects), (change, effects)
    assert ("drift" in row.eks) == (change in DRIFTS), change


def test_the_kubernetes_minor_resolves_another_ami_with_the_same_node_class(karpenter_pairs):
    before, now = karpenter_pairs["kubernetes_version"]
    classes = [[o["spec"] for o in _manifest_objects(r.template_json("eks")) if o.get("kind") == "EC2NodeClass"]
               for r in (before, now)]
    assert classes[0] and classes[0] == classes[1]  # nothing in the manifests moves...
    (effect,) = _drift(before, now)
    assert not effect.stops_jobs and effect.why.startswith("drift (AMI alias)")  # ...but the alias resolves anew


def test_a_kubernetes_upgrade_moves_the_control_plane_first_then_each_pinned_addon(karpenter_pairs):
    before, now = (r.template_json("eks") for r in karpenter_pairs["kubernetes_version"])
    update = control_plane_update(before, now)
    assert update is not None and (update.before, update.after, update.refused) == ("1.35", "1.36", None)
    old, new = (versions.EKS_ADDON_VERSIONS[minor] for minor in ("1.35", "1.36"))
    installed = {*update.moved_addons, *update.kept_addons, *update.unpinned_addons}
    assert update.moved_addons == tuple(sorted(n for n in installed if new[n] and new[n] != old[n]))
    assert update.kept_addons == tuple(sorted(n for n in installed if new[n] and new[n] == old[n]))
    assert (update.moved_addons, update.kept_addons) == (("kube-proxy",), ("coredns",))  # 2026-11-26's pins
    # The add-ons with no version read for 1.36 stay on what runs: told in the README's upgrade steps.
    assert update.unpinned_addons == tuple(sorted(n for n in installed if new[n] is None))
    assert update.after_control_plane
    for change in ("karpenter", "eks_ami_release", "device_plugin"):
        assert control_plane_update(*(r.template_json("eks") for r in karpenter_pairs[change])) is None


def test_eks_refuses_a_jump_of_two_minors_or_a_downgrade(karpenter_pairs):
    from tests.support.helpers import resources

    before, now = (r.template_json("eks") for r in karpenter_pairs["kubernetes_version"])
    jump = json.loads(json.dumps(now))
    (cluster,) = resources(jump, "AWS::EKS::Cluster").values()
    cluster["Properties"]["Version"] = "1.37"
    assert control_plane_update(before, jump).refused == "1.35 -> 1.37: EKS updates the control plane one minor at a time"
    assert control_plane_update(now, before).refused == "1.36 -> 1.35: EKS never downgrades a cluster"


@pytest.mark.parametrize("change", EKS_CHANGES)
def test_the_system_nodes_roll_with_the_minor_and_the_ami_release_only(karpenter_pairs, change):
    """Karpenter, Volcano and CoreDNS run on the system node group: they move when it rolls."""
    before, now = (r.template_json("eks") for r in karpenter_pairs[change])
    rolls = system_nodegroup_changes(before, now)
    moves = {"kubernetes_version", "eks_ami_release", "neuron_pin"}  # a Neuron release moves the AMI release
    assert rolls == (["ReleaseVersion"] if change in moves else []), change


def _changed_objects(before: Synthesized, now: Synthesized) -> list[str]:
    old = {(o["kind"], o["metadata"]["name"]): o for o in _manifest_objects(before.template_json("eks"))}
    new = {(o["kind"], o["metadata"]["name"]): o for o in _manifest_objects(now.template_json("eks"))}
    return sorted(f"{kind}/{name}" for (kind, name) in {*old, *new} if old.get((kind, name)) != new.get((kind, name)))


def _chart_contents(result: Synthesized) -> dict[str, str]:
    """Each Helm release and the chart it installs (its vendored folder's asset: the content's hash)."""
    from tests.support.helpers import resources

    charts = resources(result.template_json("eks"), "Custom::AWSCDK-EKS-HelmChart").values()
    return {c["Properties"]["Release"]: json.dumps(c["Properties"]["ChartAssetURL"]) for c in charts}


def test_a_device_plugin_upgrade_changes_its_daemonset_only(karpenter_pairs):
    from trainium_cdk.charts.neuron_device_plugin import DEVICE_PLUGIN_NAME

    before, now = karpenter_pairs["device_plugin"]
    assert _changed_objects(before, now) == [f"DaemonSet/{DEVICE_PLUGIN_NAME}"]


def test_a_karpenter_upgrade_changes_its_two_charts_only(karpenter_pairs):
    before, now = karpenter_pairs["karpenter"]
    assert _changed_objects(before, now) == []
    old, new = _chart_contents(before), _chart_contents(now)
    assert {c for c in {*old, *new} if old.get(c) != new.get(c)} == {"karpenter", "karpenter-crd"}


# -- which minors the app deploys -----------------------------------------------------------------------------

def _rated(minor: str) -> list[str]:
    """Why ``minor`` is not deployable with the shipped pins (empty: it is)."""
    why = [f"{name} has no {minor} row" for name, table in versions.PER_MINOR_TABLES.items() if minor not in table]
    volcano = json.loads((UPSTREAM / "volcano-compatibility.json").read_text())["rated"]
    line = ".".join(versions.VOLCANO_CHART_VERSION.split(".")[:2])
    if minor not in volcano.get(line, []):
        why.append(f"Volcano {versions.VOLCANO_CHART_VERSION} is not rated for {minor}")
    karpenter = json.loads((UPSTREAM / "karpenter-compatibility.json").read_text())["compatibility"]
    k_line = ".".join(versions.KARPENTER_VERSION.split(".")[:2]) + ".x"
    row = next((r for r in karpenter if r["appVersion"] == k_line), None)
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(p) for p in version.split("."))

    if row is None or not key(row["minK8sVersion"]) <= key(minor) <= key(row["maxK8sVersion"]):
        why.append(f"Karpenter {versions.KARPENTER_VERSION} is not rated for {minor}")
    return why


def test_the_app_deploys_only_minors_every_table_and_upstream_rating_has():
    assert versions.KUBERNETES_VERSION in versions.SUPPORTED_KUBERNETES_VERSIONS
    for minor in versions.SUPPORTED_KUBERNETES_VERSIONS:
        assert _rated(minor) == [], minor


def test_1_36_waits_for_its_ami_build_and_a_volcano_rated_for_it():
    """When this fails, 1.36 may be deployable: add it to SUPPORTED_KUBERNETES_VERSIONS (and the kubectl layer)."""
    assert "1.36" not in versions.SUPPORTED_KUBERNETES_VERSIONS
    assert _rated("1.36") == [
        "EKS_AL2023_KUBERNETES_PATCHES has no 1.36 row", f"Volcano {versions.VOLCANO_CHART_VERSION} is not rated for 1.36"]
    facts = json.loads((UPSTREAM / "kubernetes-1.36.json").read_text())
    assert versions.CLUSTER_AUTOSCALER_IMAGE_TAGS["1.36"] == facts["cluster_autoscaler"]["image_tag"]
    assert versions.KUBE_SCHEDULER_TAGS["1.36"] == facts["kube_scheduler"]["tag"]

