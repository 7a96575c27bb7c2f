"""A scheduling model: which EKS node groups of a synthesized app a pod template can land on.

A pod lands on a node group when it tolerates every NoSchedule/NoExecute taint of the group, its
nodeSelector and required node affinity match the group's labels (its own plus the labels EKS and the
kubelet put on every node), and its requests (plus those of the DaemonSets that run there too) fit in
the node's allocatable: the instance's vCPU and memory from the catalog minus what EKS reserves for
the kubelet, and the extended resources the Neuron and EFA device plugins advertise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.support.reachability import NodeSet
from trainium_cdk.facts.catalog import (
    DEFAULT_CATALOG,
    EFA_RESOURCE,
    NEURON_RESOURCE,
    NEURONCORE_RESOURCE,
    node_capacity,
)

# EKS AL2023 kube-reserved: memory 255 MiB + 11 MiB per pod (110 pods assumed, the most any of our
# types runs) plus the 100 MiB hard eviction threshold; CPU 6% of the first core, 1% of the second,
# 0.5% of the next two and 0.25% of the rest (the EKS AMI's bootstrap formula).
_RESERVED_MEMORY_MI = 255 + 11 * 110 + 100
_WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}


@dataclass(frozen=True)
class PodTemplate:
    """One pod template of an emitted object."""

    source: str  # file or object it came from
    kind: str
    name: str
    spec: Mapping[str, Any]

    def __str__(self) -> str:
        return f"{self.source}: {self.kind}/{self.name}"

    @property
    def claims(self) -> list[str]:
        return [v["persistentVolumeClaim"]["claimName"] for v in self.spec.get("volumes") or []
                if "persistentVolumeClaim" in v]

    @property
    def containers(self) -> list[Mapping[str, Any]]:
        return list(self.spec.get("containers") or [])


def pod_templates(objects: Iterable[Mapping[str, Any]], source: str = "") -> list[PodTemplate]:
    """Every pod template of Kubernetes objects: Pods, workloads, CronJobs and Volcano jobs' tasks."""
    found = []
    for obj in objects:
        kind, name = obj.get("kind"), obj.get("metadata", {}).get("name", "")
        spec = obj.get("spec") or {}
        if obj.get("apiVersion", "").startswith("batch.volcano.sh/"):
            for task in spec.get("tasks") or []:
                found.append(PodTemplate(source, kind, f"{name}/{task['name']}", task["template"]["spec"]))
        elif kind == "Pod":
            found.append(PodTemplate(source, kind, name, spec))
        elif kind in _WORKLOAD_KINDS:
            found.append(PodTemplate(source, kind, name, spec["template"]["spec"]))
        elif kind == "CronJob":
            found.append(PodTemplate(source, kind, name, spec["jobTemplate"]["spec"]["template"]["spec"]))
    return found


# -- quantities -------------------------------------------------------------------------------------

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity(value: Any) -> float:
    """A Kubernetes quantity as a number: CPU in cores ("500m" -> 0.5), memory in bytes."""
    text = str(value)
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text)
    assert match, f"not a quantity: {value}"
    number, suffix = match.groups()
    return float(number) * _SUFFIX.get(suffix, 1)


def requests(spec: Mapping[str, Any]) -> dict[str, float]:
    """What the scheduler reserves for a pod: the sum of its containers' requests (a request left out
    defaults to the limit), or the largest init container's, whichever is larger per resource."""

    def of(container: Mapping[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {k: quantity(v) for k, v in merged.items()}

    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for k, v in of(container).items():
            total[k] = total.get(k, 0) + v
    for container in spec.get("initContainers") or []:
        for k, v in of(container).items():
            total[k] = max(total.get(k, 0), v)
    return total


# -- nodes --------------------------------------------------------------------------------------------

def _reserved_cpu(vcpus: int) -> float:
    steps = ((1, 0.06), (1, 0.01), (2, 0.005))
    reserved, left = 0.0, vcpus
    for cores, share in steps:
        used = min(left, cores)
        reserved += used * share
        left -= used
    return reserved + left * 0.0025


def allocatable(node: NodeSet) -> dict[str, float]:
    """The node's allocatable: CPU and memory after the kubelet's reservation, plus Neuron and EFA devices."""
    vcpus, memory_gib = node_capacity(node.instance_type)
    found = {"cpu": vcpus - _reserved_cpu(vcpus), "memory": memory_gib * 2**30 - _RESERVED_MEMORY_MI * 2**20,
             "pods": 110}
    if node.instance_type in DEFAULT_CATALOG:
        spec = DEFAULT_CATALOG.get(node.instance_type)
        found.update({NEURON_RESOURCE: spec.neuron_devices, NEURONCORE_RESOURCE: spec.neuron_cores})
        if spec.has_efa:
            found[EFA_RESOURCE] = spec.efa_interfaces
    return found


def node_labels(node: NodeSet) -> dict[str, str]:
    """The node group's labels plus those every EKS node carries."""
    return {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": node.instance_type,
        "eks.amazonaws.com/nodegroup": node.name,
        **node.labels,
    }


_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, str]) -> bool:
    effect = _EFFECTS.get(taint["Effect"], taint["Effect"])
    for t in tolerations:
        if t.get("effect") and t["effect"] != effect:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint["Key"]:
                return True
        elif t.get("key") == taint["Key"] and t.get("value", "") == taint.get("Value", ""):
            return True
    return False


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expression["key"], expression["operator"], expression.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not modelled")


def why_not(pod: PodTemplate, node: NodeSet, daemon_sets: Iterable[PodTemplate] = (), *,
            checked: bool = True) -> list[str]:
    """Why ``pod`` cannot land on ``node``; empty when it can. A node is ``checked`` once its startup taints are off
    (the health check passed); a new node still carries them."""
    spec = pod.spec
    reasons = []
    for taint in (*node.taints, *(() if checked else node.startup_taints)):
        effect = _EFFECTS.get(taint["Effect"], taint["Effect"])
        if effect != "PreferNoSchedule" and not _tolerates(spec.get("tolerations") or [], taint):
            reasons.append(f"taint {taint['Key']}={taint.get('Value', '')}:{effect} not tolerated")
    labels = node_labels(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            reasons.append(f"nodeSelector {key}={value} (node has {labels.get(key)})")
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms")
    if terms and not any(all(_matches(e, labels) for e in t.get("matchExpressions") or []) for t in terms):
        reasons.append("required node affinity matches no label of the node")
    if reasons:
        return reasons
    free = allocatable(node)
    others = [d for d in daemon_sets if d is not pod and not why_not(d, node)]
    for other in others:
        for k, v in requests(other.spec).items():
            free[k] = free.get(k, 0) - v
    for resource, amount in requests(spec).items():
        if amount > free.get(resource, 0):
            reasons.append(f"requests {resource}={amount:g}, allocatable {free.get(resource, 0):g} "
                           f"after {len(others)} DaemonSets")
    return reasons


def lands_on(pod: PodTemplate, nodes: Iterable[NodeSet], daemon_sets: Iterable[PodTemplate] = (), *,
             checked: bool = True) -> list[NodeSet]:
    daemon_sets = list(daemon_sets)
    return [n for n in nodes if not why_not(pod, n, daemon_sets, checked=checked)]
