"""The Helm charts the EKS stack installs, from copies vendored in the package (trainium_cdk/helm_charts/<name>/).

A chart repository can serve other bytes under a version it served before, and a chart's templates run as
cluster-admin. A vendored chart goes to the cluster as a CDK asset: the kubectl provider's Lambda copies the asset
from the deployment's bucket, unzips it and runs `helm upgrade --install` on the folder (aws-cdk-lib 2.275.0,
custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/helm/__init__.py, get_chart_asset_from_url), with the
construct's values as `--values`; no chart repository is asked. A directory asset, not a `.tgz`: the Lambda opens the
asset with `zipfile` (CDK zips a directory asset; a file asset is uploaded as it is, and a `.tgz` is no zip).

What each folder holds is pinned twice: `versions.HELM_CHART_DIGESTS` (the sha256 of the tree, `tree_digest`) and its
Chart.yaml version against the version pin (`chart_versions`); tests/unit/charts/test_vendored_charts.py fails when either drifts.
`make vendor-chart` refreshes a folder from a git checkout of the chart's source (tools/vendor_chart.py).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import cast

import yaml
from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct, IConstruct

from trainium_cdk.constructs.nag import acknowledge, acknowledge_default_policy, nag_form
from trainium_cdk.facts import versions

CHARTS_DIR = Path(__file__).resolve().parent.parent / "helm_charts"


def chart_versions() -> dict[str, str]:
    """Each vendored chart's folder name and the version versions.py pins for it (read when called)."""
    return {
        "karpenter": versions.KARPENTER_VERSION,
        "karpenter-crd": versions.KARPENTER_VERSION,
        "volcano": versions.VOLCANO_CHART_VERSION,
        "cluster-autoscaler": versions.CLUSTER_AUTOSCALER_CHART_VERSION,
    }


def tree_digest(folder: Path) -> str:
    """The sha256 of a folder's files and their paths, the same as
    ``cd FOLDER && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum``."""
    lines = []
    for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix()):
        if path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            lines.append(f"{digest}  ./{path.relative_to(folder).as_posix()}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def drift() -> list[str]:
    """What differs between the vendored folders and their pins, one line each (none: they agree)."""
    problems = []
    for name, version in chart_versions().items():
        folder = CHARTS_DIR / name
        if not (folder / "Chart.yaml").is_file():
            problems.append(f"{name}: no vendored chart in {folder}")
            continue
        chart = yaml.safe_load((folder / "Chart.yaml").read_text())
        if (chart.get("name"), str(chart.get("version"))) != (name, version):
            problems.append(f"{name}: versions.py pins {version} but the vendored chart is {chart.get('name')} "
                            f"{chart.get('version')}: refresh it (make vendor-chart, docs/reference/versions.md \"Supply chain\")")
        elif tree_digest(folder) != versions.HELM_CHART_DIGESTS.get(name):
            problems.append(f"{name}: the vendored files hash to {tree_digest(folder)}, not to "
                            f"versions.HELM_CHART_DIGESTS[{name!r}]")
    return problems


def chart_asset(scope: IConstruct, construct_id: str, name: str, cluster: eks.ICluster) -> s3_assets.Asset:
    """The vendored chart ``name`` as an asset for ``HelmChart``'s ``chart_asset`` on ``cluster``: its hash is its
    content's. HelmChart grants the kubectl provider's role `grant_read` on the asset bucket (aws-eks-v2
    helm-chart.ts), which cdk-nag reads as wildcards: acknowledged here, finding by finding."""
    asset = s3_assets.Asset(cast(Construct, scope), construct_id, path=str(CHARTS_DIR / name))
    # The provider itself: KubectlProvider.get_kubectl_provider would make ``scope`` wait for the cluster's kubectl.
    provider = cluster.kubectl_provider
    if provider is not None:
        stack = Stack.of(scope)
        # The bootstrap bucket's name is a Fn::Sub of pseudo parameters; cdk-nag writes them as <AWS::...>.
        bucket = stack.resolve(asset.s3_bucket_name)
        bucket = re.sub(r"\$\{(AWS::\w+)\}", r"<\1>", bucket["Fn::Sub"] if isinstance(bucket, dict) else str(bucket))
        objects = nag_form(stack, f"arn:{stack.partition}:s3:::{bucket}/*")
        # The grant's policy is the role's (an imported provider's role gets a policy of its own).
        role = provider.role or provider
        acknowledge(
            role, "AwsSolutions-IAM5",
            ["Action::s3:GetBucket*", "Action::s3:GetObject*", "Action::s3:List*", f"Resource::{objects}"],
            "CDK's HelmChart gives the kubectl Lambda read on the deployment's asset bucket (Bucket.grant_read, "
            "CDK's read actions) to copy a chart's zip; the bucket holds this app's assets only.",
        )
        if not role.node.path.startswith(provider.node.path + "/"):
            acknowledge_default_policy(role, "the kubectl provider's read of the Helm charts' assets")
    return asset
