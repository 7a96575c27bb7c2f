"""The Helm charts the EKS stack installs are the vendored folders, pinned by content (trainium_cdk/helm_charts/).

Each folder hashes to its digest in versions.py, its Chart.yaml is the version versions.py pins, and every
synthesized HelmChart installs a folder's asset, whose staged copy in cdk.out hashes to the same digest: what the
kubectl provider's Lambda unzips and hands to `helm upgrade` is the reviewed bytes. No chart repository is named.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.apps import synthesized
from tests.support.helpers import ROOT, helm_chart_name, resources, strings, vendored_chart_hashes
from trainium_cdk.constructs import vendored_charts
from trainium_cdk.constructs.vendored_charts import CHARTS_DIR, chart_versions, drift, tree_digest
from trainium_cdk.facts import versions

HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"
# The Karpenter variant (Karpenter, its CRDs, Volcano) and the managed one (Cluster Autoscaler, Volcano).
APPS = ("trn1.32xlarge", "trn1n.32xlarge+trn1.2xlarge")


def test_every_vendored_folder_is_a_pinned_chart_and_every_pin_a_folder():
    folders = {p.name for p in CHARTS_DIR.iterdir() if p.is_dir()}
    assert folders == set(chart_versions()) == set(versions.HELM_CHART_DIGESTS)


@pytest.mark.parametrize("name", sorted(chart_versions()))
def test_each_vendored_chart_hashes_to_its_pinned_digest(name):
    assert tree_digest(CHARTS_DIR / name) == versions.HELM_CHART_DIGESTS[name]


@pytest.mark.parametrize("name", sorted(chart_versions()))
def test_each_vendored_chart_is_the_version_versions_py_pins(name):
    chart = yaml.safe_load((CHARTS_DIR / name / "Chart.yaml").read_text())
    assert (chart["name"], str(chart["version"])) == (name, chart_versions()[name])


def test_the_digest_is_the_sha256sum_a_reviewer_runs(tmp_path):
    """The README's shell line gives the same digest, and one byte more gives another."""
    line = "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum"
    folder = tmp_path / "chart"
    (folder / "templates").mkdir(parents=True)
    (folder / "Chart.yaml").write_text("name: x\nversion: 1.0.0\n")
    (folder / "templates" / "a.yaml").write_text("kind: ConfigMap\n")
    (folder / ".helmignore").write_text("*.bak\n")
    shell = subprocess.run(line, shell=True, cwd=folder, check=True, capture_output=True, text=True).stdout.split()[0]
    assert tree_digest(folder) == shell
    (folder / "templates" / "a.yaml").write_text("kind: ConfigMap \n")
    assert tree_digest(folder) != shell
    assert line in (CHARTS_DIR / "README.md").read_text()


def test_a_version_bump_fails_until_the_chart_is_vendored_anew(monkeypatch):
    assert drift() == []
    monkeypatch.setattr(versions, "VOLCANO_CHART_VERSION", "1.15.1")
    assert drift() == ['volcano: versions.py pins 1.15.1 but the vendored chart is volcano 1.15.0: refresh it '
                       '(make vendor-chart, docs/reference/versions.md "Supply chain")']


def test_a_changed_byte_is_drift(monkeypatch, tmp_path):
    shutil.copytree(CHARTS_DIR, tmp_path / "charts")
    values = tmp_path / "charts" / "karpenter" / "values.yaml"
    values.write_text(values.read_text().replace("public.ecr.aws/karpenter/controller", "example.com/controller"))
    monkeypatch.setattr(vendored_charts, "CHARTS_DIR", tmp_path / "charts")
    [problem] = drift()
    assert problem.startswith("karpenter: the vendored files hash to ")


def test_the_vendor_readme_names_each_charts_commit_and_digest():
    text = (CHARTS_DIR / "README.md").read_text()
    for name, digest in versions.HELM_CHART_DIGESTS.items():
        [row] = [r for r in text.splitlines() if r.startswith(f"| `{name}` |")]
        assert f"{name} {chart_versions()[name]}" in row and digest in row and re.search(r"\b[0-9a-f]{40}\b", row)


@pytest.mark.parametrize("app", APPS)
def test_every_helm_chart_installs_a_vendored_asset_and_names_no_repository(app):
    result = synthesized(app)
    charts = resources(result.template_json("eks"), HELM_CHART)
    assert charts
    installed = set()
    for props in (c["Properties"] for c in charts.values()):
        assert not {"Chart", "Repository", "Version"} & set(props), props
        [key] = re.findall(r"/([0-9a-f]{64})\.zip", json.dumps(props["ChartAssetURL"]))
        # The folder the asset zips, as staged in cdk.out: the pinned bytes.
        name = helm_chart_name(props)
        assert tree_digest(result.outdir / f"asset.{key}") == versions.HELM_CHART_DIGESTS[name]
        installed.add(name)
    expected = {"volcano", "karpenter", "karpenter-crd"} if result.config.eks.capacity == "karpenter" else \
        {"volcano", "cluster-autoscaler"}
    assert installed == expected
    # Nothing but the asset comes from a URL (no chart repository, no values naming one).
    assert not [s for c in charts.values() for k, v in c["Properties"].items() if k != "ChartAssetURL"
                for s in strings(v) if "://" in s]


def test_the_chart_assets_hash_the_same_in_another_process_and_folder(tmp_path):
    """Synth is deterministic: a fresh interpreter, elsewhere, stages the charts under the same hashes."""
    code = ("import aws_cdk as cdk; from trainium_cdk.constructs.vendored_charts import chart_asset, chart_versions;"
            "s = cdk.Stack(cdk.App(outdir='out'));"
            "c = cdk.aws_eks_v2.Cluster.from_cluster_attributes(s, 'C', cluster_name='c');"
            "print(sorted(chart_asset(s, n, n, c).asset_hash for n in chart_versions()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == str(sorted(vendored_chart_hashes()))


def _upstream_layout(repo: Path) -> None:
    """A git repository laid out as the charts' sources are: Karpenter's crds/ link to pkg/apis/crds/, Volcano's
    crd/v1 links to crd/bases (the vendored folders hold the files the links point to)."""
    karpenter, volcano = repo / "charts" / "karpenter", repo / "installer" / "volcano"
    shutil.copytree(CHARTS_DIR / "karpenter", karpenter)
    shutil.copytree(CHARTS_DIR / "volcano", volcano)
    (repo / "pkg" / "apis" / "crds").mkdir(parents=True)
    for crd in sorted((karpenter / "crds").iterdir()):
        crd.rename(repo / "pkg" / "apis" / "crds" / crd.name)
        crd.symlink_to(Path("..", "..", "..", "pkg", "apis", "crds", crd.name))
    for crd in (volcano / "crd", volcano / "charts" / "jobflow" / "crd"):
        assert [p.read_bytes() for p in sorted((crd / "v1").iterdir())] == \
            [p.read_bytes() for p in sorted((crd / "bases").iterdir())]
        shutil.rmtree(crd / "v1")
        (crd / "v1").symlink_to("bases")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "upstream"], check=True)


@pytest.mark.parametrize(("name", "chart_path"), [("karpenter", "charts/karpenter"), ("volcano", "installer/volcano")])
def test_make_vendor_chart_copies_a_chart_from_git_with_its_links_resolved(tmp_path, name, chart_path):
    """The refresh as a user types it, from a checkout with links: the same bytes, the pinned digest printed."""
    repo, dest = tmp_path / "upstream", tmp_path / "out"
    _upstream_layout(repo)
    done = subprocess.run(["make", "-s", "vendor-chart", f"NAME={name}", f"GIT_DIR={repo / '.git'}", "REF=HEAD",
                           f"CHART_PATH={chart_path}", f"DEST={dest}"],
                          cwd=ROOT, check=True, capture_output=True, text=True)
    assert f'versions.HELM_CHART_DIGESTS["{name}"] = "{versions.HELM_CHART_DIGESTS[name]}"' in done.stdout
    assert tree_digest(dest) == versions.HELM_CHART_DIGESTS[name]
    assert not [p for p in dest.rglob("*") if p.is_symlink()]
