"""`make pins`: every pinned version the project ships, where it is pinned, and what upstream data says of it.

The upstream data are the project's transcriptions in tests/data/upstream/ (and the Neuron release files in
tests/data/), each naming its source (repository, path and commit, or page) and the day it was read: Volcano's
compatibility matrix, Karpenter's compatibility.yaml, the EKS add-on versions per Kubernetes minor, the EFA
device plugin chart and the Neuron Helm chart's values, the ParallelCluster versions the package index serves,
the EFA installer's published checksum. Offline: nothing here calls AWS or the network.

Each pin gets one verdict:
  ok          the upstream data rate the combination the project ships (Kubernetes minor x the pin)
  OUTSIDE     the upstream data say the combination is not rated: the exit code is 1 (tests/meta/test_pins.py)
  behind      upstream publishes a newer version than the pin (not an error)
  unverified  no upstream data in reach say anything of it (the reason is printed)
  pinned      a pin with no upstream data vendored for it (listed so that nothing is pinned unseen)
  recorded    no pin: the version AWS chose in the region, as the last `trn doctor --preflight` recorded it
              (.trn-preflight.json in the project directory: an EKS add-on without a pin)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "data" / "upstream"
NEURON_RELEASES = ROOT / "tests" / "data"
VERSIONS_PY = "trainium_cdk/facts/versions.py"
# The verdicts, worst first; OUTSIDE fails `make pins`.
OK, OUTSIDE, BEHIND, UNVERIFIED, PINNED, RECORDED = "ok", "OUTSIDE", "behind", "unverified", "pinned", "recorded"
# What `trn doctor --preflight` recorded of the region (trainium_cdk/cli/doctor_deploy.py PREFLIGHT_RECORD).
PREFLIGHT_RECORD = Path(".trn-preflight.json")


@dataclass(frozen=True)
class Pin:
    """One pinned version, where it is pinned and what the upstream data say of it."""

    name: str
    value: str
    source: str  # where the project pins it
    verdict: str
    upstream: str  # what the vendored upstream data say, with their source


def load(name: str) -> Any:
    return json.loads((UPSTREAM / name).read_text())


def minor_of(version: str) -> str:
    """``1.15`` of ``1.15.0`` (a release's minor, as compatibility tables name it)."""
    return ".".join(version.removeprefix("v").split(".")[:2])


def _minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(p) for p in minor.split("."))


def volcano(v: ModuleType) -> Iterator[Pin]:
    data = load("volcano-compatibility.json")
    src = data["source"]
    where = f"{src['repository']} {src['path']} at {src['tag']} ({src['commit'][:12]}, read {src['read']})"
    chart, k8s = v.VOLCANO_CHART_VERSION, v.KUBERNETES_VERSION
    rated = data["rated"].get(minor_of(chart))
    if rated is None:
        verdict, says = UNVERIFIED, f"Volcano {minor_of(chart)} has no row in the matrix transcribed from {where}"
    elif k8s in rated:
        verdict, says = OK, f"Volcano {minor_of(chart)} is rated for Kubernetes {rated[0]} to {rated[-1]} ({where})"
    else:
        verdict = OUTSIDE
        says = (f"Volcano {minor_of(chart)} is not rated for Kubernetes {k8s}: rated {rated[0]} to {rated[-1]} "
                f"({where})")
    if verdict == OK and chart not in data["charts"]["published"]:
        verdict, says = UNVERIFIED, says + f"; chart {chart} is not in {data['charts']['source']}"
    yield Pin("VOLCANO_CHART_VERSION", chart, VERSIONS_PY, verdict, says)


def karpenter(v: ModuleType) -> Iterator[Pin]:
    data = load("karpenter-compatibility.json")
    src = data["source"]
    where = f"{src['repository']} {src['path']} at {src['tag']} ({src['commit'][:12]}, read {src['read']})"
    version, k8s = v.KARPENTER_VERSION, v.KUBERNETES_VERSION
    rows = [r for r in data["compatibility"] if r["appVersion"] == f"{minor_of(version)}.x"]
    if not rows:
        verdict, says = UNVERIFIED, f"Karpenter {minor_of(version)}.x has no row in {where}"
    else:
        low, high = rows[-1]["minK8sVersion"], rows[-1]["maxK8sVersion"]
        inside = _minor_key(low) <= _minor_key(k8s) <= _minor_key(high)
        verdict = OK if inside else OUTSIDE
        says = f"Karpenter {minor_of(version)}.x supports Kubernetes {low} to {high} ({where})"
    if "newer" in src:
        says += f"; {src['newer']}"
    yield Pin("KARPENTER_VERSION", version, VERSIONS_PY, verdict, says)
    crd = data["crd_chart"]
    yield Pin("KARPENTER_CRD_HELM_REPOSITORY", f"{v.KARPENTER_CRD_HELM_REPOSITORY}:{version}", VERSIONS_PY,
              OK if "karpenter-crd" in crd["charts"] else UNVERIFIED,
              f"published with every release beside the controller chart ({crd['source']})")


def preflight_record(path: Path = PREFLIGHT_RECORD) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def eks_addons(v: ModuleType, record: Mapping[str, Any] | None = None) -> Iterator[Pin]:
    data = load("eks-addon-versions.json")
    k8s = v.KUBERNETES_VERSION
    pinned: Mapping[str, str | None] = v.EKS_ADDON_VERSIONS.get(k8s, {})
    record = preflight_record() if record is None else record
    recorded = record.get("addon_defaults", {}) if record.get("kubernetes") == k8s else {}
    for name in sorted(set(pinned) | set(data["addons"])):
        entry = data["addons"].get(name)
        value = pinned.get(name)
        shown = value or "(none: EKS's default for the minor)"
        label = f"EKS_ADDON_VERSIONS[{k8s}][{name}]"
        if value is None and name in recorded:
            yield Pin(label, f"(none) EKS installs {recorded[name]}", VERSIONS_PY, RECORDED,
                      f"recorded by `trn doctor --preflight` in {record.get('region')} on {record.get('checked')} "
                      f"({PREFLIGHT_RECORD}); pin it to keep it")
            continue
        if value is None:
            shown += ": `trn doctor --preflight` records it"
        if entry is None:
            yield Pin(label, shown, VERSIONS_PY, UNVERIFIED, "no upstream data vendored for this add-on")
            continue
        upstream = entry["versions"].get(k8s)
        if upstream is None:
            reason = entry.get("missing", f"no figure for Kubernetes {k8s}")
            yield Pin(label, shown, VERSIONS_PY, UNVERIFIED, f"{reason} ({entry['page']})")
        elif value == upstream:
            # A figure is the User Guide's latest for the minor unless the entry says what else it is (and where from).
            figure = entry.get("figure", f"the latest for Kubernetes {k8s}")
            yield Pin(label, shown, VERSIONS_PY, OK, f"{figure} ({'; '.join(entry.get('sources', [entry['page']]))})")
        else:
            yield Pin(label, shown, VERSIONS_PY, OUTSIDE,
                      f"the page gives {upstream} for Kubernetes {k8s}, not {shown} ({entry['page']})")


def device_plugins(v: ModuleType) -> Iterator[Pin]:
    data = load("device-plugins.json")
    efa = data["efa_device_plugin"]
    src = efa["source"]
    where = f"{src['repository']} {src['path']} ({src['commit'][:12]}, {src['date']})"
    tag = v.EFA_DEVICE_PLUGIN_TAG
    yield Pin("EFA_DEVICE_PLUGIN_TAG", tag, VERSIONS_PY, OK if tag == efa["image_tag"] else BEHIND,
              f"the eks-charts chart ships image tag {efa['image_tag']} ({where})")
    neuron = data["neuron_helm_chart"]
    src = neuron["source"]
    for name in ("NEURON_DEVICE_PLUGIN_IMAGE", "NEURON_SCHEDULER_IMAGE"):
        image = getattr(v, name)
        verdict = OK if image.endswith(":" + neuron["image_tag"]) else OUTSIDE
        yield Pin(name, image, VERSIONS_PY, verdict,
                  f"the Neuron Helm chart {neuron['chart']} (digest {src['chart_digest'][:19]}...) pins tag "
                  f"{neuron['image_tag']} ({src['what']}, {src['date']})")


def parallelcluster(v: ModuleType) -> Iterator[Pin]:
    """ParallelCluster moves only to a version the package index serves: its schema validates the cluster's config."""
    data = load("parallelcluster.json")
    src, released = data["source"], data["released"]
    version = v.PARALLELCLUSTER_VERSION
    if version not in src["served"]:
        verdict, says = OUTSIDE, f"the package index does not serve aws-parallelcluster {version} (read {src['read']})"
    elif version != released["version"]:
        verdict = BEHIND
        says = (f"{released['version']} released {released['date']}, but {released['not_served']}; newest served "
                f"{src['served_newest']} (read {src['read']})")
    else:
        verdict, says = OK, f"the newest release, served by the package index (read {src['read']})"
    yield Pin("PARALLELCLUSTER_VERSION", version, VERSIONS_PY, verdict, says)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def efa_installer(v: ModuleType) -> Iterator[Pin]:
    """The Batch nodes' EFA installer: a version, never `latest`, and the SHA-256 AWS publishes for it."""
    data = load("efa-installer.json")
    src, newest = data["source"], data["newest"]
    where = f"{src['repository']} {src['path']} ({src['commit'][:12]}, {src['date']})"
    version, digest, url = v.EFA_INSTALLER_VERSION, v.EFA_INSTALLER_SHA256, v.EFA_INSTALLER_URL
    if url != f"https://efa-installer.amazonaws.com/aws-efa-installer-{version}.tar.gz":
        verdict, says = OUTSIDE, f"the installer URL {url} is not the one of version {version}"
    elif _version_key(version) < _version_key(newest["version"]):
        verdict, says = BEHIND, f"upstream ships {newest['version']}: {newest['what']}"
    else:
        verdict, says = OK, f"the newest known ({newest['what']})"
    yield Pin("EFA_INSTALLER_VERSION", version, VERSIONS_PY, verdict, says)
    published = data["checksums"].get(version)
    if published is None:
        verdict, says = UNVERIFIED, f"no published checksum of {version} vendored ({where})"
    elif published == digest:
        verdict, says = OK, f"the published SHA-256 of {version} ({where})"
    else:
        verdict, says = OUTSIDE, f"the published SHA-256 of {version} is {published}, not this ({where})"
    yield Pin("EFA_INSTALLER_SHA256", digest, VERSIONS_PY, verdict, says)


def per_minor_tables(v: ModuleType) -> Iterator[Pin]:
    """The pins that follow the Kubernetes minor: each a table keyed by the minor, read at the cluster's."""
    k8s = v.KUBERNETES_VERSION
    for name in ("EKS_AL2023_KUBERNETES_PATCHES", "KUBE_SCHEDULER_TAGS", "CLUSTER_AUTOSCALER_IMAGE_TAGS"):
        table: Mapping[str, str] = getattr(v, name)
        if k8s in table:
            yield Pin(f"{name}[{k8s}]", table[k8s], VERSIONS_PY, PINNED, "per-minor table; no upstream data vendored")
        else:
            yield Pin(f"{name}[{k8s}]", "(missing)", VERSIONS_PY, OUTSIDE, f"no row for Kubernetes {k8s}")


def neuron_tracks(v: ModuleType) -> Iterator[Pin]:
    """Each track's packages against the release's package list (tests/data/neuron-release-<release>.json)."""
    for track in v.NEURON_TRACKS.values():
        path = NEURON_RELEASES / f"neuron-release-{track.neuron_release}.json"
        release = json.loads(path.read_text()) if path.exists() else {}
        listed: Mapping[str, str] = release.get("packages", {})
        for package, version in {**track.apt_packages, **track.pip_packages}.items():
            label = f"NEURON_TRACKS[{track.name}].{package}"
            known = listed.get(package)
            if known is None:
                yield Pin(label, version, VERSIONS_PY, UNVERIFIED, f"not listed in {path.name}")
                continue
            # A pip pin may be a glob (torch-neuronx 2.9.0.2.13.*): the release's version must match it.
            inside = known == version or (version.endswith("*") and known.startswith(version.rstrip("*")))
            yield Pin(label, version, VERSIONS_PY, OK if inside else OUTSIDE,
                      f"Neuron {track.neuron_release} ships {known} ({path.relative_to(ROOT)})")


CHECKED = ("KUBERNETES_VERSION", "VOLCANO_CHART_VERSION", "KARPENTER_VERSION", "KARPENTER_CRD_HELM_REPOSITORY", "EFA_DEVICE_PLUGIN_TAG",
           "PARALLELCLUSTER_VERSION",
           "NEURON_DEVICE_PLUGIN_IMAGE", "NEURON_SCHEDULER_IMAGE", "EKS_AL2023_KUBERNETES_PATCH",
           "KUBE_SCHEDULER_IMAGE", "CLUSTER_AUTOSCALER_IMAGE_TAG", "EFA_INSTALLER_VERSION")


def other_pins(v: ModuleType) -> Iterator[Pin]:
    """Every other version, tag or image versions.py pins (so that a new pin shows without a change here)."""
    for name, value in vars(v).items():
        if not name.isupper() or name in CHECKED or not isinstance(value, str):
            continue
        if name.endswith(("_VERSION", "_TAG", "_IMAGE", "_RELEASE")) or name.endswith("_CHART_VERSION"):
            yield Pin(name, value, VERSIONS_PY, PINNED, "no upstream data vendored")


def check(v: ModuleType | None = None) -> list[Pin]:
    """Every pin of ``v`` (default: trainium_cdk.facts.versions) with its verdict."""
    if v is None:
        from trainium_cdk.facts import versions as v
    kubernetes = Pin("KUBERNETES_VERSION", v.KUBERNETES_VERSION, VERSIONS_PY, PINNED,
                     "the minor every per-minor table and compatibility check below is read at")
    return [kubernetes, *volcano(v), *karpenter(v), *eks_addons(v), *device_plugins(v), *parallelcluster(v),
            *efa_installer(v), *per_minor_tables(v), *neuron_tracks(v), *other_pins(v)]


def render(pins: list[Pin]) -> str:
    width = max(len(p.name) for p in pins)
    lines = [f"{p.verdict:<10}  {p.name:<{width}}  {p.value}\n{'':<12}{p.upstream} [pinned in {p.source}]"
             for p in pins]
    counts = {verdict: sum(p.verdict == verdict for p in pins)
              for verdict in (OK, OUTSIDE, BEHIND, UNVERIFIED, PINNED, RECORDED)}
    lines.append("pins: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))
    return "\n".join(lines)


def main() -> int:
    pins = check()
    print(render(pins))
    outside = [p.name for p in pins if p.verdict == OUTSIDE]
    if outside:
        print("outside what upstream rates: " + ", ".join(outside), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
