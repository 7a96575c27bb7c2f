"""Pins upstream supports, and proof: every combination the project ships (Kubernetes minor x Volcano, x
Karpenter, x each EKS add-on) is one the vendored upstream data rate (tests/data/upstream/, each file naming
its source and the day it was read); add-ons are pinned per minor; Karpenter's CRDs come from their own chart;
no version is built from another by string formatting; `make pins` prints it all."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.support import paths
from tests.support.apps import VARIANTS, synthesized
from tests.support.helpers import helm_chart_name, resources
from trainium_cdk.facts import versions

ROOT = paths.ROOT
UPSTREAM = paths.DATA / "upstream"
HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"


def _load_pins() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pins", ROOT / "tools" / "pins.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pins"] = module
    spec.loader.exec_module(module)
    return module


pins = _load_pins()


def _versions(**changes: Any) -> SimpleNamespace:
    """versions.py with some pins changed, as a release bump would change them."""
    names = {k: v for k, v in vars(versions).items() if not k.startswith("__")}
    return SimpleNamespace(**{**names, **changes})


@pytest.fixture(scope="module")
def templates() -> list[dict[str, Any]]:
    """Every template of every synthesized variant (Karpenter and managed capacity, both regions)."""
    return [json.loads(p.read_text()) for name in sorted(VARIANTS) for p in synthesized(name).template_paths()]


# -- the shipped combination is inside the vendored data ----------------------------------------------------

def test_every_shipped_pin_combination_is_one_upstream_rates():
    outside = [f"{p.name}={p.value}: {p.upstream}" for p in pins.check() if p.verdict == pins.OUTSIDE]
    assert not outside, outside


def test_every_vendored_file_names_its_source_and_the_day_it_was_read():
    for path in sorted(UPSTREAM.glob("*.json")):
        data = json.loads(path.read_text())
        sources = [data["source"]] if "source" in data else [v["source"] for v in data.values()]
        for source in sources:
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source.get("read") or source.get("date") or ""), path.name
            assert source.get("repository") or source.get("what"), path.name


def test_volcano_1_13_on_kubernetes_1_35_is_outside_the_matrix():
    """The pin before this change: Volcano's matrix rates 1.13 up to Kubernetes 1.33 only."""
    [volcano] = pins.volcano(_versions(VOLCANO_CHART_VERSION="1.13.0"))
    assert volcano.verdict == pins.OUTSIDE
    assert "rated 1.23 to 1.33" in volcano.upstream
    [moved] = pins.volcano(_versions(VOLCANO_CHART_VERSION="1.15.0", KUBERNETES_VERSION="1.36"))
    assert moved.verdict == pins.OUTSIDE, "Volcano 1.15 is not rated for 1.36: moving the cluster must move it"


def test_volcano_is_1_15_and_its_chart_is_published():
    assert pins.minor_of(versions.VOLCANO_CHART_VERSION) == "1.15"
    [volcano] = pins.volcano(versions)
    assert volcano.verdict == pins.OK


def test_karpenter_outside_its_compatibility_row_fails():
    [pin, _] = pins.karpenter(_versions(KARPENTER_VERSION="1.12.0", KUBERNETES_VERSION="1.36"))
    assert pin.verdict == pins.OUTSIDE and "1.26 to 1.35" in pin.upstream
    [unknown, _] = pins.karpenter(_versions(KARPENTER_VERSION="1.15.0"))
    assert unknown.verdict == pins.UNVERIFIED, "a Karpenter minor without a compatibility row is never rated ok"


def test_an_addon_pin_that_is_not_the_documented_figure_fails():
    table = {**versions.EKS_ADDON_VERSIONS["1.35"], "coredns": "v1.12.4-eksbuild.1"}
    found = {p.name: p for p in pins.eks_addons(_versions(EKS_ADDON_VERSIONS={"1.35": table}))}
    assert found["EKS_ADDON_VERSIONS[1.35][coredns]"].verdict == pins.OUTSIDE
    assert found["EKS_ADDON_VERSIONS[1.35][kube-proxy]"].verdict == pins.OK


# -- EKS add-ons: pinned per Kubernetes minor, moved with the cluster ------------------------------------------

def test_addon_pins_are_exactly_the_vendored_figures():
    """No add-on pinned without a source, none left unpinned where a source gives a figure."""
    vendored = json.loads((UPSTREAM / "eks-addon-versions.json").read_text())["addons"]
    for minor, table in versions.EKS_ADDON_VERSIONS.items():
        assert set(table) == set(vendored), minor
        for name, version in table.items():
            assert version == vendored[name]["versions"].get(minor), (minor, name)


def test_the_shipped_minor_has_a_row_in_every_per_minor_table():
    minor = versions.KUBERNETES_VERSION
    for table in (versions.EKS_ADDON_VERSIONS, versions.EKS_AL2023_KUBERNETES_PATCHES, versions.KUBE_SCHEDULER_TAGS,
                  versions.CLUSTER_AUTOSCALER_IMAGE_TAGS):
        assert minor in table
    assert versions.EKS_AL2023_KUBERNETES_PATCH == versions.EKS_AL2023_KUBERNETES_PATCHES[minor]
    assert versions.KUBE_SCHEDULER_IMAGE.endswith(":" + versions.KUBE_SCHEDULER_TAGS[minor])
    assert versions.CLUSTER_AUTOSCALER_IMAGE_TAG == versions.CLUSTER_AUTOSCALER_IMAGE_TAGS[minor]


def test_every_addon_in_every_template_carries_its_minor_s_pin(templates):
    addons = [r["Properties"] for t in templates for r in resources(t, "AWS::EKS::Addon").values()]
    names = {a["AddonName"] for a in addons}
    assert names == set(versions.EKS_ADDON_VERSIONS[versions.KUBERNETES_VERSION])
    for addon in addons:
        assert addon.get("AddonVersion") == versions.eks_addon_version(addon["AddonName"]), addon["AddonName"]


# The add-ons no page read gives a version for on the shipped minor (the vendored data's nulls).
UNVERIFIED_ADDONS = sorted(
    name for name, entry in json.loads((UPSTREAM / "eks-addon-versions.json").read_text())["addons"].items()
    if entry["versions"].get(versions.KUBERNETES_VERSION) is None
)


def test_addons_without_a_user_guide_row_carry_the_version_their_sources_give():
    """The User Guide has no 1.35 row for vpc-cni and no table for the Pod Identity and node monitoring agents: their
    1.35 pins are versions public 1.35 configurations pin (each named with what kind of figure it is); the FSx CSI
    driver and CloudWatch observability have no source, so they stay unpinned and say why."""
    assert {name: versions.eks_addon_version(name, "1.35") for name in
            ("vpc-cni", "eks-pod-identity-agent", "eks-node-monitoring-agent")} == {
        "vpc-cni": "v1.21.1-eksbuild.5", "eks-pod-identity-agent": "v1.3.10-eksbuild.2",
        "eks-node-monitoring-agent": "v1.6.2-eksbuild.1"}
    vendored = json.loads((UPSTREAM / "eks-addon-versions.json").read_text())["addons"]
    for name, entry in vendored.items():
        if any(v is None for v in entry["versions"].values()):
            assert entry.get("missing"), name
        if "figure" in entry:
            assert entry["sources"] and all(entry["figure"] and source for source in entry["sources"]), name
    assert UNVERIFIED_ADDONS == ["amazon-cloudwatch-observability", "aws-fsx-csi-driver"]


@pytest.mark.xfail(bool(UNVERIFIED_ADDONS), strict=True,
                   reason=f"no upstream figure read for {', '.join(UNVERIFIED_ADDONS)} on Kubernetes "
                   f"{versions.KUBERNETES_VERSION} (tests/data/upstream/eks-addon-versions.json): they take EKS's default")
def test_no_addon_lacks_a_version(templates):
    lacking = {r["Properties"]["AddonName"] for t in templates for r in resources(t, "AWS::EKS::Addon").values()
               if "AddonVersion" not in r["Properties"]}
    assert not lacking, sorted(lacking)


def test_vpc_cni_overwrites_the_self_managed_cni(templates):
    addons = {r["Properties"]["AddonName"]: r["Properties"] for t in templates
              for r in resources(t, "AWS::EKS::Addon").values()}
    assert addons["vpc-cni"]["ResolveConflicts"] == "OVERWRITE"
    assert {n for n, a in addons.items() if "ResolveConflicts" in a} == {"vpc-cni"}


# -- device plugins and ParallelCluster ----------------------------------------------------------------------------

def test_neuron_images_are_the_tags_of_the_neuron_helm_chart():
    """Chart 1.10.0 pins 2.32.0.0 for the device plugin and the scheduler extension; 1.9.0's 2.31.0.0 is not it."""
    found = {p.name: p for p in pins.device_plugins(versions)}
    for name in ("NEURON_DEVICE_PLUGIN_IMAGE", "NEURON_SCHEDULER_IMAGE"):
        assert found[name].verdict == pins.OK, found[name]
        assert found[name].value.endswith(":2.32.0.0") and "Neuron Helm chart 1.10.0" in found[name].upstream
    old = _versions(NEURON_DEVICE_PLUGIN_IMAGE="public.ecr.aws/neuron/neuron-device-plugin:2.31.0.0")
    assert {p.name: p.verdict for p in pins.device_plugins(old)}["NEURON_DEVICE_PLUGIN_IMAGE"] == pins.OUTSIDE


def test_parallelcluster_moves_only_to_a_version_the_package_index_serves():
    [pin] = pins.parallelcluster(versions)
    assert (pin.value, pin.verdict) == ("3.16.1", pins.BEHIND)
    assert "3.16.3 released 2026-11-17" in pin.upstream and "newest served 3.16.1" in pin.upstream
    [unserved] = pins.parallelcluster(_versions(PARALLELCLUSTER_VERSION="3.16.3"))
    assert unserved.verdict == pins.OUTSIDE, "a pin the index does not serve cannot install .venv-pcluster"


# -- Karpenter's CRDs from their own chart ---------------------------------------------------------------------

def test_karpenter_crds_come_from_the_karpenter_crd_chart_installed_first(templates):
    seen = 0
    for template in templates:
        charts = {logical: r for logical, r in resources(template, HELM_CHART).items()
                  if helm_chart_name(r["Properties"]) in ("karpenter", "karpenter-crd")}
        if not charts:
            continue
        by_chart = {helm_chart_name(r["Properties"]): (logical, r) for logical, r in charts.items()}
        crd_id, crd = by_chart["karpenter-crd"]
        _, controller = by_chart["karpenter"]
        # Both vendored at the same version: tests/unit/charts/test_vendored_charts.py.
        assert controller["Properties"].get("SkipCrds") is True
        assert crd_id in controller.get("DependsOn", [])
        seen += 1
    assert seen >= 2, "the Karpenter variants' EKS templates"


# -- no version built from another -----------------------------------------------------------------------------

def test_no_version_is_built_from_the_kubernetes_minor_by_formatting():
    """`f"{KUBERNETES_VERSION}.8"` names a patch nobody checked exists once the minor moves."""
    tree = ast.parse(Path(versions.__file__).read_text())
    built = [
        node.lineno for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        and any(isinstance(n, ast.Name) and n.id == "KUBERNETES_VERSION" for n in ast.walk(node))
    ]
    assert not built, f"versions.py formats KUBERNETES_VERSION into a version at lines {built}"


# -- the Batch nodes' EFA installer: a version and its published checksum ----------------------------------------

def test_the_efa_installer_is_a_version_with_its_published_checksum():
    version, digest = pins.efa_installer(versions)
    assert version.name == "EFA_INSTALLER_VERSION" and version.verdict in (pins.OK, pins.BEHIND)
    assert digest.name == "EFA_INSTALLER_SHA256" and digest.verdict == pins.OK
    assert versions.EFA_INSTALLER_URL.endswith(f"/aws-efa-installer-{versions.EFA_INSTALLER_VERSION}.tar.gz")


def test_an_efa_installer_checksum_or_url_that_is_not_the_published_one_fails():
    [_, digest] = pins.efa_installer(_versions(EFA_INSTALLER_SHA256="0" * 64))
    assert digest.verdict == pins.OUTSIDE and versions.EFA_INSTALLER_SHA256 in digest.upstream
    latest = "https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz"
    [url, _] = pins.efa_installer(_versions(EFA_INSTALLER_URL=latest))
    assert url.verdict == pins.OUTSIDE
    [_, unknown] = pins.efa_installer(_versions(EFA_INSTALLER_VERSION="1.99.0"))
    assert unknown.verdict == pins.UNVERIFIED, "a version without a vendored checksum is never rated ok"


# -- make pins -------------------------------------------------------------------------------------------------

def test_make_pins_prints_every_pin_its_source_and_what_upstream_says():
    done = subprocess.run(["make", "pins"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # Under `make test` make says which directory it enters and leaves: not a line of `make pins`.
    out = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("make["))
    rows = {line.split()[1]: line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")
            and not line.startswith("pins:")}
    assert rows["VOLCANO_CHART_VERSION"] == "ok" and rows["KARPENTER_VERSION"] == "ok"
    assert rows["EFA_DEVICE_PLUGIN_TAG"] == rows["NEURON_DEVICE_PLUGIN_IMAGE"] == rows["NEURON_SCHEDULER_IMAGE"] == "ok"
    assert rows["PARALLELCLUSTER_VERSION"] == "behind"
    assert rows["EFA_INSTALLER_SHA256"] == "ok" and rows["EFA_INSTALLER_VERSION"] in ("ok", "behind")
    for name, version in versions.EKS_ADDON_VERSIONS[versions.KUBERNETES_VERSION].items():
        assert rows[f"EKS_ADDON_VERSIONS[{versions.KUBERNETES_VERSION}][{name}]"] == ("ok" if version else "unverified")
    assert "Volcano 1.15 is rated for Kubernetes 1.23 to 1.35 (github.com/volcano-sh/volcano" in out
    assert "[pinned in trainium_cdk/facts/versions.py]" in out
    assert {"CDK_CLI_VERSION", "KUBERNETES_VERSION"} <= set(rows)
    assert out.splitlines()[-1].startswith("pins: ") and " 0 OUTSIDE" in out.splitlines()[-1]


def test_make_pins_fails_on_a_combination_outside_upstream_data(capsys, monkeypatch):
    monkeypatch.setattr(pins, "check", lambda: [pins.Pin("VOLCANO_CHART_VERSION", "1.13.0", "x", pins.OUTSIDE, "y")])
    assert pins.main() == 1
    assert "outside what upstream rates: VOLCANO_CHART_VERSION" in capsys.readouterr().err
