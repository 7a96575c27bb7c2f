"""What a deploy of a changed app does to running training jobs, judged by each service's own rules.

Read from the synthesized templates before and after the change (never from the constructs):

- **AWS Batch** (user guide, "Updating compute environments"): a change of a compute environment's
  ComputeResources other than its vCPU counts (or of the launch template it uses: a new version) is an
  infrastructure update. Batch replaces the instances; running jobs go on for the UpdatePolicy's
  JobExecutionTimeoutMinutes (30 without one) and are then stopped, at once with TerminateJobsOnUpdate. A
  job stopped before its own attempt timeout is a job the change stops. A create-only property change
  replaces the environment (CloudFormation), and its jobs with it.
- **EKS managed node groups** (user guide, "Update a managed node group"): a new launch template version,
  or any update of the node group but its scaling, rolls the nodes: each is drained, its pods evicted
  (forced after the update's timeout). Running pods are stopped. What an update cannot do at all
  (AWS::EKS::Nodegroup, CloudFormation reference): use a launch template unless the node group was created
  with one, and then another launch template than that one; CloudFormation updates the node group in
  place (LaunchTemplate is not create-only), so EKS refuses the update and the stack rolls back.
- **Karpenter** (docs, "Disruption"): a NodePool or EC2NodeClass change drifts the nodes; drift is a
  voluntary disruption, which a pod annotated ``karpenter.sh/do-not-disrupt`` blocks for as long as the
  pool sets no terminationGracePeriod, and ``expireAfter: Never`` leaves no forced expiry. Then the node
  is replaced after its job.

- **EKS cluster version** (user guide, "Update existing cluster to new Kubernetes version"; AWS::EKS::Cluster
  Version: "Update requires: No interruption"): the control plane moves one minor at a time, in place. EKS
  moves nothing else: add-ons stay on the version they run ("Update an Amazon EKS add-on") unless their
  AddonVersion moves, and managed node groups keep their release until it moves. CloudFormation updates a
  resource after the resources it references, so add-ons and node groups that name the cluster move after the
  control plane. The system node group holds no training job; rolling it moves Karpenter, Volcano and CoreDNS.
- **Karpenter AMI aliases** (Karpenter docs, EC2NodeClass "amiSelectorTerms"; AL2023 alias resolution in
  karpenter-provider-aws pkg/providers/amifamily): ``al2023@vYYYYMMDD`` resolves through the SSM parameter of
  that release for the cluster's Kubernetes minor (``/aws/service/eks/optimized-ami/<minor>/amazon-linux-2023/
  ...``): a new minor resolves another AMI with the same EC2NodeClass, and a node on an AMI its class no longer
  resolves has drifted (docs, "Disruption": Drift). A deleted NodePool takes its NodeClaims, and their nodes,
  with it (they are owned by the pool).

- **EC2 instances** (the development instance; AWS::EC2::Instance, CloudFormation reference): a change of a
  create-only property (ImageId, SubnetId, ...) replaces the instance, and its root volume with it
  (DeleteOnTermination). An ImageId read from a custom resource (the DLAMI lookup) changes when that resource's
  properties (its query) change: CloudFormation updates the resource, which answers the newest image of the new
  query, and then replaces the instance.

ParallelCluster's update policies come from its own package (tests/support/pcluster_schema.py), not from here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import paths

ROOT = paths.ROOT
CREATE_ONLY: dict[str, list[str]] = json.loads((ROOT / "tools" / "create_only.json").read_text())
# What Batch scales without an infrastructure update.
BATCH_SCALING = ("MaxvCpus", "MinvCpus", "DesiredvCpus")
BATCH_DEFAULT_UPDATE_TIMEOUT_MINUTES = 30
NODEGROUP_SCALING = ("ScalingConfig", "UpdateConfig", "Labels", "Tags")
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


@dataclass(frozen=True)
class Effect:
    backend: str
    resource: str
    stops_jobs: bool
    why: str


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template.get("Resources", {}).items() if r["Type"] == kind}


def _lt_changed(before: dict[str, Any], after: dict[str, Any], ref: Any) -> bool:
    """Whether the launch template a property names gets a new version (its data changes)."""
    logical = ref.get("Ref") if isinstance(ref, dict) else None
    if logical is None:
        return False
    old, new = before["Resources"].get(logical), after["Resources"].get(logical)
    return old is None or new is None or old["Properties"] != new["Properties"]


def _create_only_changes(kind: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [p for p in CREATE_ONLY.get(kind, []) if old.get(p) != new.get(p)]


def batch_effects(before: dict[str, Any], after: dict[str, Any]) -> list[Effect]:
    """Effects on the running jobs of each compute environment ``before`` has."""
    effects = []
    attempt_minutes = [
        d["Properties"].get("Timeout", {}).get("AttemptDurationSeconds", 0) / 60
        for d in _resources(after, "AWS::Batch::JobDefinition").values()
    ]
    longest = max(attempt_minutes, default=0)
    # "All jobs in the queue are eventually terminated when you delete a job queue" (AWS Batch API reference,
    # DeleteJobQueue): a queue gone from the template (replaced, or its group removed) takes its jobs with it.
    new_queues = _resources(after, "AWS::Batch::JobQueue")
    effects.extend(Effect("batch", logical, True, "the job queue is deleted: Batch terminates its jobs")
                   for logical in _resources(before, "AWS::Batch::JobQueue") if logical not in new_queues)
    new_environments = _resources(after, "AWS::Batch::ComputeEnvironment")
    for logical, resource in _resources(before, "AWS::Batch::ComputeEnvironment").items():
        old = resource["Properties"]
        new = new_environments.get(logical, {}).get("Properties")
        if new is None:
            effects.append(Effect("batch", logical, True, "the compute environment is deleted"))
            continue
        replaced = _create_only_changes("AWS::Batch::ComputeEnvironment", old, new)
        if replaced:
            effects.append(Effect("batch", logical, True, f"replaced ({', '.join(replaced)} changes)"))
            continue
        old_cr, new_cr = old["ComputeResources"], new["ComputeResources"]
        changed = sorted(k for k in {*old_cr, *new_cr} if k not in BATCH_SCALING and old_cr.get(k) != new_cr.get(k))
        if _lt_changed(before, after, old_cr.get("LaunchTemplate", {}).get("LaunchTemplateId")):
            changed.append("LaunchTemplate (a new version)")
        if not changed:
            continue
        policy = new.get("UpdatePolicy", {})
        timeout = policy.get("JobExecutionTimeoutMinutes", BATCH_DEFAULT_UPDATE_TIMEOUT_MINUTES)
        if policy.get("TerminateJobsOnUpdate"):
            effects.append(Effect("batch", logical, True, f"infrastructure update ({', '.join(changed)}): jobs terminated"))
        else:
            stops = timeout < longest
            effects.append(Effect(
                "batch", logical, stops,
                f"infrastructure update ({', '.join(changed)}): running jobs go on {timeout} minutes"
                + (f", less than the job timeout ({longest:.0f})" if stops else ", their whole timeout"),
            ))
    return effects


def managed_nodegroup_effects(before: dict[str, Any], after: dict[str, Any]) -> list[Effect]:
    effects = []
    new_groups = _resources(after, "AWS::EKS::Nodegroup")
    for logical, resource in _resources(before, "AWS::EKS::Nodegroup").items():
        old = resource["Properties"]
        if "trainium-cdk/compute-group" not in old.get("Labels", {}):
            continue  # the system nodes hold no training job
        new = new_groups.get(logical, {}).get("Properties")
        if new is None:
            effects.append(Effect("eks", logical, True, "the node group is deleted"))
            continue
        changed = sorted(k for k in {*old, *new} if k not in NODEGROUP_SCALING and old.get(k) != new.get(k))
        if _lt_changed(before, after, old.get("LaunchTemplate", {}).get("Id")):
            changed.append("LaunchTemplate (a new version)")
        if changed:
            effects.append(Effect("eks", logical, True, f"node group update ({', '.join(changed)}): nodes drained"))
    return effects


def nodegroup_update_refusals(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The node groups, kept under their logical ids, whose update EKS refuses: a launch template given to a
    node group created without one, or another launch template than the one it was created with (a new
    version of the same one is an update). A node group under a new logical id is a new one: CloudFormation
    creates it, then deletes the old."""
    refusals = []
    new_groups = _resources(after, "AWS::EKS::Nodegroup")
    for logical, resource in _resources(before, "AWS::EKS::Nodegroup").items():
        if logical not in new_groups:
            continue
        old = resource["Properties"].get("LaunchTemplate")
        new = new_groups[logical]["Properties"].get("LaunchTemplate")
        if new is not None and old is None:
            refusals.append(f"{logical}: a launch template for a node group created without one")
        elif new is not None and old is not None and new.get("Id") != old.get("Id"):
            refusals.append(f"{logical}: another launch template than the one it was created with")
    return refusals


def karpenter_effects(after_manifests: list[dict[str, Any]], job_pod_annotations: list[dict[str, str]]) -> list[Effect]:
    """Drift never stops a training pod when every job's pods are do-not-disrupt and no pool forces it."""
    effects = []
    for pool in (o for o in after_manifests if o.get("kind") == "NodePool"):
        spec = pool["spec"]["template"]["spec"]
        forced = spec.get("terminationGracePeriod") is not None or spec.get("expireAfter", "720h") != "Never"
        unprotected = [a for a in job_pod_annotations if a.get(DO_NOT_DISRUPT) != "true"]
        stops = forced or bool(unprotected)
        effects.append(Effect(
            "eks", f"nodepool/{pool['metadata']['name']}", stops,
            "drift replaces a node " + ("while its job runs" if stops else "after its job (do-not-disrupt pods)"),
        ))
    return effects


def instance_effects(before: dict[str, Any], after: dict[str, Any]) -> list[Effect]:
    """The EC2 instances of ``before`` that deploying ``after`` replaces or deletes: their running jobs stop."""
    effects = []
    new_instances = _resources(after, "AWS::EC2::Instance")
    for logical, resource in _resources(before, "AWS::EC2::Instance").items():
        old = resource["Properties"]
        new = new_instances.get(logical, {}).get("Properties")
        if new is None:
            effects.append(Effect("instance", logical, True, "the instance is deleted"))
            continue
        replaced = _create_only_changes("AWS::EC2::Instance", old, new)
        source = old.get("ImageId", {}).get("Fn::GetAtt", [None])[0] if isinstance(old.get("ImageId"), dict) else None
        if source is not None and "ImageId" not in replaced:
            lookup_old, lookup_new = before["Resources"].get(source), after["Resources"].get(source)
            if lookup_new is None or lookup_old["Properties"] != lookup_new["Properties"]:
                replaced.append(f"ImageId (from {source}, whose query changes)")
        if replaced:
            effects.append(Effect("instance", logical, True, f"replaced ({', '.join(replaced)} changes)"))
    return effects


# -- the cluster's own version: control plane, add-ons, system nodes, Karpenter's AMI resolution --------------


@dataclass(frozen=True)
class ControlPlaneUpdate:
    before: str
    after: str
    refused: str | None  # why EKS refuses the update, if it does
    moved_addons: tuple[str, ...]  # add-ons whose AddonVersion moves with it
    kept_addons: tuple[str, ...]  # add-ons pinned to the same version for both minors
    unpinned_addons: tuple[str, ...]  # add-ons without an AddonVersion: EKS leaves the old minor's build running
    after_control_plane: bool  # every add-on and node group names the cluster: CloudFormation updates it after


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _names(resource: Any, logical: str) -> bool:
    """Whether ``resource`` references ``logical`` (Ref, GetAtt or DependsOn): CloudFormation orders it after."""
    if isinstance(resource, list):
        return any(_names(v, logical) for v in resource)
    if not isinstance(resource, dict):
        return False
    depends, target = resource.get("DependsOn", []), resource.get("Fn::GetAtt", [""])
    return (logical in ([depends] if isinstance(depends, str) else depends) or resource.get("Ref") == logical
            or (target if isinstance(target, str) else target[0]).split(".")[0] == logical
            or any(_names(v, logical) for v in resource.values()))


def kubernetes_version(template: dict[str, Any]) -> str:
    (cluster,) = _resources(template, "AWS::EKS::Cluster").values()
    return str(cluster["Properties"]["Version"])


def control_plane_update(before: dict[str, Any], after: dict[str, Any]) -> ControlPlaneUpdate | None:
    """What deploying ``after`` does to the cluster of ``before``; None when its version does not move."""
    (logical, _), = _resources(before, "AWS::EKS::Cluster").items()
    old, new = kubernetes_version(before), kubernetes_version(after)
    if old == new:
        return None
    (o_major, o_minor), (n_major, n_minor) = _minor(old), _minor(new)
    refused = None
    if (n_major, n_minor) < (o_major, o_minor):
        refused = f"{old} -> {new}: EKS never downgrades a cluster"
    elif n_major != o_major or n_minor - o_minor > 1:
        refused = f"{old} -> {new}: EKS updates the control plane one minor at a time"
    old_addons = {r["Properties"]["AddonName"]: r["Properties"] for r in _resources(before, "AWS::EKS::Addon").values()}
    new_addons = {r["Properties"]["AddonName"]: r["Properties"] for r in _resources(after, "AWS::EKS::Addon").values()}
    moved = tuple(sorted(n for n, p in new_addons.items() if p.get("AddonVersion")
                         and p.get("AddonVersion") != old_addons.get(n, {}).get("AddonVersion")))
    kept = tuple(sorted(n for n, p in new_addons.items() if n not in moved and p.get("AddonVersion")))
    unpinned = tuple(sorted(n for n, p in new_addons.items() if not p.get("AddonVersion")))
    dependents = [*_resources(after, "AWS::EKS::Addon").values(), *_resources(after, "AWS::EKS::Nodegroup").values()]
    return ControlPlaneUpdate(old, new, refused, moved, kept, unpinned, all(_names(r, logical) for r in dependents))


def system_nodegroup_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What rolls the system node group (no training job; Karpenter, Volcano and CoreDNS move with it)."""
    changed = []
    new_groups = _resources(after, "AWS::EKS::Nodegroup")
    for logical, resource in _resources(before, "AWS::EKS::Nodegroup").items():
        old = resource["Properties"]
        if "trainium-cdk/compute-group" in old.get("Labels", {}) or logical not in new_groups:
            continue
        new = new_groups[logical]["Properties"]
        changed += sorted(k for k in {*old, *new} if k not in NODEGROUP_SCALING and old.get(k) != new.get(k))
        if _lt_changed(before, after, old.get("LaunchTemplate", {}).get("Id")):
            changed.append("LaunchTemplate (a new version)")
    return changed


def _karpenter_objects(manifests: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """What drifts nodes: a NodePool's template (Karpenter hashes spec.template; its limits, weight and disruption
    settings change nothing on the nodes: docs, "Disruption", Drift) and its EC2NodeClass."""
    return {(o["kind"], o["metadata"]["name"]): o["spec"] for o in manifests if o.get("kind") in ("NodePool", "EC2NodeClass")}


def _drifting(kind: str, spec: Any) -> Any:
    return spec.get("template") if kind == "NodePool" and spec is not None else spec


def karpenter_drift(
    before: list[dict[str, Any]], after: list[dict[str, Any]], minors: tuple[str, str],
    job_pod_annotations: list[dict[str, str]],
) -> list[Effect]:
    """The NodePools of ``before`` whose nodes a deploy of ``after`` drifts or deletes, on a cluster moving from
    ``minors[0]`` to ``minors[1]``: a changed NodePool or EC2NodeClass, or an AMI alias that resolves per minor.
    A drifted node waits for its job (karpenter_effects); a deleted pool's nodes go with it."""
    old, new = _karpenter_objects(before), _karpenter_objects(after)
    effects = []
    for (kind, name), spec in old.items():
        if kind != "NodePool":
            continue
        if ("NodePool", name) not in new:
            effects.append(Effect("eks", f"nodepool/{name}", True, "the NodePool is deleted, and its nodes with it"))
            continue
        node_class = spec["template"]["spec"]["nodeClassRef"]["name"]
        why = [k for k in (("NodePool", name), ("EC2NodeClass", node_class))
               if _drifting(k[0], old.get(k)) != _drifting(k[0], new.get(k))]
        aliases = [t["alias"] for t in old.get(("EC2NodeClass", node_class), {}).get("amiSelectorTerms", []) if "alias" in t]
        if minors[0] != minors[1] and aliases and not why:
            why.append(("AMI alias", f"{aliases[0]} resolves for Kubernetes {minors[1]}"))
        if why:
            (effect,) = karpenter_effects([o for o in after if o.get("kind") == "NodePool"
                                           and o["metadata"]["name"] == name], job_pod_annotations)
            effects.append(Effect("eks", effect.resource, effect.stops_jobs,
                                  f"drift ({', '.join(k for k, _ in why)}): {effect.why}"))
    return effects
