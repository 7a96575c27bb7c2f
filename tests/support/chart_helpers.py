"""Shared by the chart tests: offline schema validation and lookups in synthesized manifests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kubernetes_validate
from kubernetes_validate.utils import all_versions, major_minor

from trainium_cdk.facts.versions import KUBERNETES_VERSION

SUPPORTED_VERSIONS = sorted({major_minor(v) for v in all_versions()}, key=lambda v: tuple(map(int, v.split("."))))
# The cluster's version when kubernetes-validate has its schemas, else the newest it has (the
# version test then fails and says so).
K8S_VERSION = KUBERNETES_VERSION if KUBERNETES_VERSION in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[-1]


def validate_all(manifests: Iterable[dict[str, Any]]) -> int:
    """Validate every object strictly (unknown fields fail) against the cluster's schemas."""
    count = 0
    for manifest in manifests:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
        count += 1
    return count


def of_kind(manifests: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [m for m in of_kind(manifests, kind) if name is None or m["metadata"]["name"] == name]
    return found


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod_spec(workload)["containers"]
    return c


def affinity_types(workload: dict[str, Any]) -> list[str]:
    """The instance types of the single required node-affinity term on node.kubernetes.io/instance-type."""
    terms = pod_spec(workload)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = terms["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    assert (expr["key"], expr["operator"]) == ("node.kubernetes.io/instance-type", "In")
    return expr["values"]


def host_paths(workload: dict[str, Any]) -> dict[str, str]:
    """mountPath -> host path, for every hostPath volume the container mounts."""
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod_spec(workload)["volumes"] if "hostPath" in v}
    return {m["mountPath"]: volumes[m["name"]] for m in container(workload)["volumeMounts"] if m["name"] in volumes}


def tolerations(workload: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(t["key"], t["operator"], t.get("effect")) for t in pod_spec(workload)["tolerations"]]


def as_run(container: dict[str, Any]) -> list[str]:
    """A Kubernetes container's command as the kubelet runs it: with Kubernetes' expansion ($$ to $, a defined $(VAR) to
    its value), which the charts defeat by writing every $ as $$ (charts/_k8s.literal)."""
    from trainium_cdk.rehearsal.schedulers import container_env, expand

    env = container_env(container)
    return [expand(word, env) for word in (*container["command"], *container.get("args", []))]
