"""`trn doctor`'s checks of what the deploy's pins need in the region, each found as the deploy would find it: the
Kubernetes version of the EKS cluster (DescribeClusterVersions), every EKS add-on at its pinned version
(DescribeAddonVersions; an add-on without a pin gets the version EKS installs by default, which ``--preflight``
records for `make pins`), and the EKS AL2023 Neuron AMI release of the Trainium nodes (the public SSM parameter of
that AMI, which Karpenter's alias resolves and whose release version the managed node groups name). A pin the
region lacks fails the EKS stack about 25 minutes into the deploy, then rolls it back."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import error_code
from trainium_cdk.cli.doctor_local import FAIL, PASS, WARN, Check
from trainium_cdk.facts import versions

# What `trn doctor --preflight` records of the region (the version EKS installs of each add-on without a pin), in the
# project directory: `make pins` shows it (tools/pins.py).
PREFLIGHT_RECORD = Path(".trn-preflight.json")
VERSIONS_PY = "trainium_cdk/facts/versions.py"
NEURON_AMI_PARAMETER = ("/aws/service/eks/optimized-ami/{minor}/amazon-linux-2023/x86_64/neuron/"
                        "amazon-eks-node-al2023-x86_64-neuron-{minor}-{release}/{leaf}")


def kubernetes(config: Config, client: Callable[[str], Any]) -> list[Check]:
    """The EKS cluster's Kubernetes minor is one EKS offers in the region, in standard support (extended support
    costs six times the control plane's hourly price)."""
    if "eks" not in config.backends:
        return []
    minor = versions.KUBERNETES_VERSION
    answer = client("eks").describe_cluster_versions(clusterVersions=[minor], includeAll=True)
    (found,) = [v for v in answer.get("clusterVersions", []) if v.get("clusterVersion") == minor] or [None]
    move = f"move KUBERNETES_VERSION in {VERSIONS_PY} (and its pins) to a minor `aws eks describe-cluster-versions` lists"
    if found is None:
        return [Check(FAIL, "kubernetes", f"EKS offers no Kubernetes {minor} in {config.region}", move)]
    status = found.get("versionStatus") or str(found.get("status", "")).upper().replace("-", "_")
    end = found.get("endOfStandardSupportDate")
    until = f" until {end:%Y-%m-%d}" if isinstance(end, dt.datetime) else ""
    if status == "STANDARD_SUPPORT":
        return [Check(PASS, "kubernetes", f"{minor}: standard support{until}")]
    if status == "EXTENDED_SUPPORT":
        return [Check(WARN, "kubernetes", f"{minor} is in extended support: the control plane costs 6 x", move)]
    return [Check(FAIL, "kubernetes", f"{minor} is {status or 'of no known status'} in {config.region}", move)]


def addons(config: Config, client: Callable[[str], Any], record: dict[str, str]) -> list[Check]:
    """Each add-on of the Kubernetes minor at its pin, which EKS lists for the minor; an add-on without a pin: the
    version EKS installs by default, put in ``record``."""
    if "eks" not in config.backends:
        return []
    minor = versions.KUBERNETES_VERSION
    eks = client("eks")
    checks, passed = [], []
    for name, pinned in versions.EKS_ADDON_VERSIONS[minor].items():
        listed = [v for page in eks.get_paginator("describe_addon_versions").paginate(
                      addonName=name, kubernetesVersion=minor)
                  for addon in page.get("addons", []) if addon.get("addonName") == name
                  for v in addon.get("addonVersions", [])]
        offered = [v["addonVersion"] for v in listed]
        default = next((v["addonVersion"] for v in listed for c in v.get("compatibilities", [])
                        if c.get("clusterVersion") == minor and c.get("defaultVersion")), None)
        pin = f"EKS_ADDON_VERSIONS[{minor!r}][{name!r}] in {VERSIONS_PY}"
        if not offered:
            checks.append(Check(FAIL, f"add-on {name}", f"EKS lists no version of {name} for Kubernetes {minor} "
                                f"in {config.region}", f"check `aws eks describe-addon-versions --addon-name {name} "
                                f"--kubernetes-version {minor}`"))
        elif pinned is None:
            if default is None:
                checks.append(Check(WARN, f"add-on {name}", f"not pinned, and EKS names no default for {minor}",
                                    f"pin one of {', '.join(offered[:3])} in {pin}"))
            else:
                record[name] = default
                passed.append(f"{name} {default} (EKS's default: not pinned)")
        elif pinned in offered:
            passed.append(f"{name} {pinned}")
        else:
            checks.append(Check(FAIL, f"add-on {name}", f"{pinned} is not a version EKS offers for Kubernetes {minor} "
                                f"in {config.region}", f"pin one it lists in {pin}: "
                                f"{', '.join(offered[:3])}" + (f" (default {default})" if default else "")))
    if passed:
        checks.insert(0, Check(PASS, "add-ons", f"Kubernetes {minor}: " + ", ".join(passed)))
    return checks


def eks_nodes_ami(config: Config, client: Callable[[str], Any]) -> list[Check]:
    """The EKS AL2023 Neuron AMI of the track's release is published in the region (Karpenter's alias resolves it
    through this parameter), and its release version is the one the managed node groups name."""
    from botocore.exceptions import ClientError

    if "eks" not in config.backends:
        return []
    track, minor = config.neuron_track, versions.KUBERNETES_VERSION
    release = track.eks_ami_release

    def parameter(leaf: str) -> str | None:
        name = NEURON_AMI_PARAMETER.format(minor=minor, release=release, leaf=leaf)
        try:
            return str(client("ssm").get_parameter(Name=name)["Parameter"]["Value"])
        except ClientError as error:
            if error_code(error) != "ParameterNotFound":
                raise
            return None

    fix = (f"move the {track.name} track's eks_ami_release in {VERSIONS_PY} to a release the region has: "
           f"`aws ssm get-parameters-by-path --path /aws/service/eks/optimized-ami/{minor}/amazon-linux-2023/x86_64/"
           "neuron --recursive --query 'Parameters[].Name'`")
    image = parameter("image_id")
    if image is None:
        return [Check(FAIL, "AMI eks", f"the EKS AL2023 Neuron AMI of release {release} (Kubernetes {minor}) is not "
                      f"published in {config.region}", fix)]
    what = f"release {release} is {image} in {config.region}"
    if config.eks.capacity != "managed":
        return [Check(PASS, "AMI eks", f"{what} (Karpenter's {track.karpenter_ami_alias})")]
    named = parameter("release_version")
    pinned = track.eks_nodegroup_release_version
    if named is None:
        return [Check(WARN, "AMI eks", f"{what}; its release version is not published: the node groups' "
                      f"releaseVersion {pinned} is unconfirmed", "check it with `aws eks describe-nodegroup` after "
                      "the deploy, or in the EKS console's node group versions")]
    if named != pinned:
        return [Check(FAIL, "AMI eks", f"{what}, whose release version is {named}, not the node groups' {pinned}",
                      f"set the Kubernetes patch of EKS_AL2023_KUBERNETES_PATCHES in {VERSIONS_PY} to "
                      f"{named.split('-')[0]}")]
    return [Check(PASS, "AMI eks", f"{what}, release version {named} (the managed node groups')")]


def write_record(config: Config, record: Mapping[str, str], now: dt.datetime, path: Path = PREFLIGHT_RECORD) -> None:
    """What the preflight found of the region that the pins leave to AWS, for `make pins` (one region per file:
    the last preflight's)."""
    if not record:
        return
    path.write_text(json.dumps({
        "region": config.region, "checked": now.strftime("%Y-%m-%d"), "kubernetes": versions.KUBERNETES_VERSION,
        "addon_defaults": dict(sorted(record.items())),
    }, indent=2) + "\n")
