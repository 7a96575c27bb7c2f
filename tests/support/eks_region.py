"""A region as EKS answers for the deploy's pins, for `trn doctor`'s tests: moto implements neither
DescribeClusterVersions nor DescribeAddonVersions, so their answers are faked here in the API's own shapes
(botocore's service model: clusterVersions[], addons[].addonVersions[].compatibilities[]); the EKS AL2023 Neuron AMI
and its public parameters are published in moto (tests/support/amis.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from tests.support.amis import publish_eks_release
from tests.support.cli_support import AwsCalls
from trainium_cdk.facts import versions

# The version EKS installs by default of each add-on the pins leave to it, in this fake region.
EKS_DEFAULTS = {"aws-fsx-csi-driver": "v1.9.0-eksbuild.1", "amazon-cloudwatch-observability": "v6.6.0-eksbuild.1"}
END_OF_STANDARD_SUPPORT = dt.datetime(2027, 3, 27, tzinfo=dt.UTC)


def cluster_versions(minor: str, status: str = "STANDARD_SUPPORT") -> dict[str, Any]:
    return {"clusterVersions": [{
        "clusterVersion": minor, "clusterType": "eks", "defaultVersion": False, "versionStatus": status,
        "status": status.lower().replace("_", "-"), "endOfStandardSupportDate": END_OF_STANDARD_SUPPORT,
        "kubernetesPatchVersion": f"{minor}.8",
    }]}


def addon_versions(offered: Mapping[str, list[str]], defaults: Mapping[str, str]) -> Any:
    """DescribeAddonVersions' answer for the add-on asked: ``offered[name]`` for the minor asked, the one in
    ``defaults`` flagged as EKS's default."""
    def answer(params: dict[str, Any]) -> dict[str, Any]:
        name, minor = params["addonName"], params["kubernetesVersion"]
        listed = [{"addonVersion": v, "architecture": ["amd64", "arm64"], "compatibilities": [
            {"clusterVersion": minor, "platformVersions": ["*"], "defaultVersion": v == defaults.get(name)}]}
            for v in offered.get(name, [])]
        return {"addons": [{"addonName": name, "type": "storage", "addonVersions": listed}] if listed else []}
    return answer


def deployable(aws: AwsCalls, region: str, *, minor: str = versions.KUBERNETES_VERSION) -> None:
    """A region where every pin of the EKS stack exists: the Kubernetes minor in standard support, each pinned add-on
    version listed (and EKS_DEFAULTS for the others), the track's EKS AMI release published."""
    pins = versions.EKS_ADDON_VERSIONS[minor]
    offered = {name: [v for v in (pinned, EKS_DEFAULTS.get(name)) if v] for name, pinned in pins.items()}
    defaults = {name: pinned or EKS_DEFAULTS[name] for name, pinned in pins.items()}
    aws.fake("DescribeClusterVersions", cluster_versions(minor))
    aws.fake("DescribeAddonVersions", addon_versions(offered, defaults))
    track = versions.XLA_TRACK
    publish_eks_release(region, track.eks_ami_release, track.eks_nodegroup_release_version, minor=minor)
