"""NodeHealthCheck: health before work on EKS. Trainium nodes join with the startup taint names.HEALTH_TAINT_KEY
(Karpenter NodePools' ``startupTaints``, managed node groups' taints); a DaemonSet per instance type runs
trainium_cdk/node/health_check.py on each new node of our compute groups of that type, against the catalog of the
type, and takes the taint off on pass. Per type, not per compute group: everything it checks (devices, cores, EFA
interfaces, the probe pod's devices) is the type's, and the driver the track's; a DaemonSet and a probe spec per
group took the EKS stack's template past CloudFormation's 1 MB at 50 managed node groups
(tests/app/eks/test_scale_eks.py). On failure the taint stays, the node gets the condition TrainiumHealthy=False
and a Karpenter node is deleted (Karpenter terminates the instance and launches another for the pending pods).

Least privilege: the checker reads the host's /dev and /sys through read-only hostPath mounts, as an unprivileged
user with no capabilities (listing /dev and reading sysfs need neither). Its ClusterRole may get, patch and
delete nodes and patch their status: RBAC cannot name "the caller's own node" (resourceNames are fixed), so a
ValidatingAdmissionPolicy narrows it: the checker's service account may change or delete only the node its pod
runs on (the bound token's ``authentication.kubernetes.io/node-name``, Kubernetes 1.32+: KEP-4193, the same check
the NodeRestriction admission plugin makes for kubelets), and on that node may only take taints off.

The on-node collective (with ``probe_image``): the checker's own pod holds no Neuron device (a DaemonSet pod that
requested them would hold them for as long as it lives) and its image has no Neuron runtime. So, its own checks
passed, it starts a short probe Pod on its node (spec.nodeName: no scheduler) that requests all of the node's
Neuron devices through the device plugin, in the track's Neuron training image, and runs the collective there
(trainium_cdk/node/kube_probe.py); the probe's spec is this chart's, shipped in the ConfigMap beside the program.
A namespaced Role lets it create, read and delete pods and read their logs in its namespace only, and the policy
narrows that to a probe pod on its own node: the pinned image, the program's ConfigMap as its only volume, no
privilege, no host namespace, no service-account token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cdk8s import Chart
from constructs import Construct

from trainium_cdk import node
from trainium_cdk.charts._k8s import (
    CHART_LABELS,
    CRITICAL_ADDONS_ONLY,
    INSTANCE_TYPE_LABEL,
    KUBE_SYSTEM,
    NEURON_NO_SCHEDULE,
    POD_SECURITY,
    SYSTEM_NODE_CRITICAL,
    api_object,
    check_name,
    cluster_role,
    cluster_role_binding,
    container_security,
    host_path,
    rule,
    service_account,
    toleration,
    workload,
)
from trainium_cdk.charts.training import TRAINING_SECURITY
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import NEURON_RESOURCE
from trainium_cdk.facts.names import GROUP_LABEL, HEALTH_TAINT_KEY, instance_type_dns_label
from trainium_cdk.node.health_check import COLLECTIVE_TIMEOUT_S

NODE_HEALTH_CHART_ID = "node-health"
NAME = "trainium-node-health"
PROGRAM = "health_check.py"
PROBE_PROGRAM = "kube_probe.py"
PROGRAM_DIR = "/opt/trainium-cdk"
HOST_ROOT = "/host"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
NOBODY = 65534
PROBE_COMPONENT = "probe"
# How long the probe pod may live (activeDeadlineSeconds: the kubelet fails it then): the collective's own bound
# (COLLECTIVE_TIMEOUT_S) and 15 minutes to pull the Neuron training image, several GB, where the node's boot-time
# pre-pull (node/prepull_images.sh) has not finished it yet.
PROBE_DEADLINE_S = 900 + COLLECTIVE_TIMEOUT_S


@dataclass(frozen=True)
class NodeHealthProps:
    """What the nodes of one instance type in our compute groups must show (the catalog of the type).

    :param instance_type: the EC2 instance type (its nodes' well-known label node.kubernetes.io/instance-type).
    :param devices: Neuron devices.
    :param cores: NeuronCore counts that pass (Trainium2: physical and logical).
    :param efa_interfaces: EFA interfaces.
    :param min_driver: the oldest Neuron driver (aws-neuronx-dkms version) that passes: the Neuron track's. The EKS AMI
        release brings the driver, which may be newer than the track's release; a runtime needs one at least as new
        as its own release's. Default: no driver check.
    """

    instance_type: str
    devices: int
    cores: Sequence[int]
    efa_interfaces: int
    min_driver: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.instance_type, str) or "." not in self.instance_type:
            raise ConfigError("NodeHealthProps.instance_type", self.instance_type,
                              "an EC2 instance type: trn1.32xlarge")
        check_name("NodeHealthProps.instance_type", f"{NAME}-{self.key}")
        if self.devices < 1 or not self.cores:
            raise ConfigError(f"NodeHealthProps({self.instance_type}).devices", self.devices,
                              "at least 1, with core counts")

    @property
    def key(self) -> str:
        """The type as a DNS label (trn1-32xlarge): its DaemonSet's name and app.kubernetes.io/instance."""
        return instance_type_dns_label(self.instance_type)

    @property
    def args(self) -> list[str]:
        return ["--devices", str(self.devices), "--cores", ",".join(map(str, self.cores)),
                "--efa", str(self.efa_interfaces), *(["--min-driver", self.min_driver] if self.min_driver else []),
                "--kube"]

    @property
    def probe_file(self) -> str:
        """The ConfigMap key of this type's probe pod."""
        return f"probe-{self.key}.json"


def probe_pod(group: NodeHealthProps, image: str, namespace: str = KUBE_SYSTEM) -> dict[str, Any]:
    """The probe Pod of the nodes of ``group``'s instance type, but for its name and spec.nodeName (the checker sets
    both): all the node's Neuron devices, the Neuron training image, the collective (kube_probe.py) from the checker's ConfigMap.

    spec.nodeName, not a node affinity: the pod is bound at its creation and never pending, so neither the scheduler
    nor Karpenter or Cluster Autoscaler (which launch nodes for unschedulable pods) ever consider it elsewhere."""
    devices = str(group.devices)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": namespace, "labels": {
            "app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": group.key,
            "app.kubernetes.io/component": PROBE_COMPONENT}},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": PROBE_DEADLINE_S,
            # No API access: the probe reports through its log and exit, which the checker reads.
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": POD_SECURITY,
            # spec.nodeName skips the scheduler, and the kubelet admits a pod whatever NoSchedule taints its node has;
            # the tolerations say what the pod is, for anything that reads them (the node's taints are these two).
            "tolerations": [toleration(HEALTH_TAINT_KEY, "NoSchedule"), NEURON_NO_SCHEDULE],
            "containers": [{
                "name": PROBE_COMPONENT,
                "image": image,
                # The image's entrypoint (the DLC's hostname workaround for SageMaker) is not needed: python3 directly.
                "command": ["python3", f"{PROGRAM_DIR}/{PROBE_PROGRAM}", "--cores", str(min(group.cores)),
                            "--timeout", str(COLLECTIVE_TIMEOUT_S)],
                # Every Neuron device of the node, so that no training pod can take one while the collective runs: the
                # device plugin then hands the container the /dev/neuron<N> nodes, no privilege or hostPath needed.
                "resources": {"requests": {NEURON_RESOURCE: devices}, "limits": {NEURON_RESOURCE: devices}},
                # The training pods' own: root, the image's user, with the runtime's default capabilities but NET_RAW
                # (charts/training.py). The probe measures the node as a job uses it; one with fewer capabilities
                # than the jobs' could fail on every node and have Karpenter replace nodes in a loop.
                "securityContext": TRAINING_SECURITY,
                "volumeMounts": [{"name": "program", "mountPath": PROGRAM_DIR, "readOnly": True}],
            }],
            "volumes": [{"name": "program", "configMap": {"name": NAME}}],
        },
    }


def admission_policy(service_account_user: str, probe_images: Sequence[str] = ()) -> dict:
    """The ValidatingAdmissionPolicy spec: the checker changes only its own node, and only by taking taints off; and,
    with ``probe_images``, creates and deletes only a probe pod on its own node, in one of those images."""
    token_node = (f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                  f"request.userInfo.extra['{NODE_NAME_EXTRA}'][0]")
    nodes, pods = "request.resource.resource == 'nodes'", "request.resource.resource == 'pods'"

    def same(path: str) -> str:
        # The API server hands CEL an object as its JSON: an unset field is absent, reading it is an error, has()
        # tests it (Kubernetes docs, "Validating Admission Policy").
        return f"(has(object.{path}) ? has(oldObject.{path}) && object.{path} == oldObject.{path} : !has(oldObject.{path}))"

    # Every field of a Node an update may change but its taints: metadata (a write to nodes/status keeps the
    # metadata it is sent: pkg/registry/core/node/strategy.go, nodeStatusStrategy.PrepareForUpdate resets only
    # spec) and spec.unschedulable (the other spec fields cannot change once set). No exception for nodes/status:
    # request.subResource is absent from a request to the node itself (omitempty), so reading it would err.
    unchanged = " && ".join(same(f) for f in ("metadata.labels", "metadata.annotations", "metadata.finalizers",
                                              "metadata.ownerReferences", "spec.unschedulable"))
    validations = [
        {"expression": f"!({nodes}) || ({token_node} == request.name)",
         "message": "the node health checker may change only the node it runs on"},
        {
            "expression": (
                f"!({nodes}) || request.operation != 'UPDATE' || ({unchanged} && "
                "(!has(object.spec.taints) || object.spec.taints.all(t, has(oldObject.spec.taints) && "
                "t in oldObject.spec.taints)))"
            ),
            "message": "the node health checker may only take taints off its node",
        },
    ]
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE", "DELETE"],
              "resources": ["nodes", "nodes/status"]}]
    if probe_images:
        rules.append({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "DELETE"], "resources": ["pods"]})

        def probe(p: str) -> str:
            return (f"has({p}.metadata.labels) && 'app.kubernetes.io/name' in {p}.metadata.labels && "
                    f"{p}.metadata.labels['app.kubernetes.io/name'] == '{NAME}' && "
                    f"'app.kubernetes.io/component' in {p}.metadata.labels && "
                    f"{p}.metadata.labels['app.kubernetes.io/component'] == '{PROBE_COMPONENT}' && "
                    f"has({p}.spec.nodeName) && {token_node} == {p}.spec.nodeName")

        images = ", ".join(f"'{image}'" for image in probe_images)
        validations += [
            {"expression": (f"!({pods}) || (request.operation == 'CREATE' && {probe('object')}) || "
                            f"(request.operation == 'DELETE' && {probe('oldObject')})"),
             "message": "the node health checker may create and delete only a probe pod on the node it runs on"},
            {
                "expression": (
                    f"!({pods}) || request.operation != 'CREATE' || ("
                    f"object.spec.containers.all(c, c.image in [{images}] && (!has(c.securityContext) || ("
                    "(!has(c.securityContext.privileged) || !c.securityContext.privileged) && "
                    "(!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add))))) && "
                    "!has(object.spec.initContainers) && !has(object.spec.ephemeralContainers) && "
                    "(!has(object.spec.volumes) || object.spec.volumes.all(v, has(v.configMap) && "
                    f"v.configMap.name == '{NAME}')) && "
                    "(!has(object.spec.hostNetwork) || !object.spec.hostNetwork) && "
                    "(!has(object.spec.hostPID) || !object.spec.hostPID) && "
                    "(!has(object.spec.hostIPC) || !object.spec.hostIPC) && "
                    "has(object.spec.automountServiceAccountToken) && !object.spec.automountServiceAccountToken)"
                ),
                "message": ("the node health checker's probe pod runs the pinned image, unprivileged, with no volume but "
                            "its program and no service account token"),
            },
        ]
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": rules},
        "matchConditions": [{"name": "the-health-checker", "expression": f"request.userInfo.username == '{service_account_user}'"}],
        "validations": validations,
    }


class NodeHealthCheck(Chart):
    """The checker's program (a ConfigMap), RBAC, admission policy and one DaemonSet per instance type.

    :param groups: one per instance type of the compute groups (the nodes of every GROUP_LABEL of that type).
    :param namespace: where the namespaced objects go. Default: kube-system.
    :param image: a Python 3 image. Default: versions.NODE_HEALTH_IMAGE.
    :param probe_image: the Neuron training image the on-node collective's probe pod runs in (the track's:
        ``versions.neuron_public_training_image``, or ``neuron_training_image`` of a region). Default: none, and no
        on-node collective.
    """

    def __init__(self, scope: Construct, id: str, *, groups: Sequence[NodeHealthProps], namespace: str = KUBE_SYSTEM,
                 image: str = versions.NODE_HEALTH_IMAGE, probe_image: str | None = None) -> None:
        if not groups:
            raise ConfigError("NodeHealthCheck.groups", [], "at least one instance type")
        types = [g.instance_type for g in groups]
        if len(set(types)) != len(types):
            raise ConfigError("NodeHealthCheck.groups", types, "one NodeHealthProps per instance type")
        super().__init__(scope, id, labels=CHART_LABELS)
        self.probe_image = probe_image
        self.probes = {g.instance_type: probe_pod(g, probe_image, namespace) for g in groups} if probe_image else {}
        data = {PROGRAM: node.source(PROGRAM)}
        if probe_image:
            data[PROBE_PROGRAM] = node.source(PROBE_PROGRAM)
            # Compact: the ConfigMap travels as a string in the EKS stack's template (CloudFormation's 1 MB).
            data.update({g.probe_file: json.dumps(self.probes[g.instance_type], separators=(",", ":")) for g in groups})
        self.program = api_object(self, "Program", api_version="v1", kind="ConfigMap", name=NAME, namespace=namespace,
                                  data=data)
        service_account(self, "ServiceAccount", name=NAME, namespace=namespace)
        cluster_role(self, "ClusterRole", name=NAME, rules=[
            rule(["nodes"], ["get", "patch", "delete"]), rule(["nodes/status"], ["patch"]),
        ])
        cluster_role_binding(self, "ClusterRoleBinding", name=NAME, role=NAME, service_account=NAME, namespace=namespace)
        if probe_image:
            # Pods in its own namespace only (a Role, not a ClusterRole); the policy below narrows it to its probe.
            api_object(self, "ProbeRole", api_version="rbac.authorization.k8s.io/v1", kind="Role", name=NAME,
                       namespace=namespace, rules=[rule(["pods"], ["create", "get", "delete"]), rule(["pods/log"], ["get"])])
            api_object(self, "ProbeRoleBinding", api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding",
                       name=NAME, namespace=namespace,
                       roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
                       subjects=[{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}])
        user = f"system:serviceaccount:{namespace}:{NAME}"
        api_object(self, "OwnNodeOnly", api_version="admissionregistration.k8s.io/v1", kind="ValidatingAdmissionPolicy",
                   name=NAME, spec=admission_policy(user, [probe_image] if probe_image else []))
        api_object(self, "OwnNodeOnlyBinding", api_version="admissionregistration.k8s.io/v1",
                   kind="ValidatingAdmissionPolicyBinding", name=NAME,
                   spec={"policyName": NAME, "validationActions": ["Deny"]})
        self.daemon_sets = {g.instance_type: self._daemon_set(g, namespace, image) for g in groups}

    def _daemon_set(self, group: NodeHealthProps, namespace: str, image: str):
        return workload(
            self, f"DaemonSet-{group.key}", kind="DaemonSet", name=f"{NAME}-{group.key}", namespace=namespace,
            labels={"app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": group.key},
            pod_spec={
                "serviceAccountName": NAME,
                "priorityClassName": SYSTEM_NODE_CRITICAL,
                "securityContext": POD_SECURITY,
                # The nodes of our compute groups (every one carries GROUP_LABEL: charts/karpenter.py
                # compute_node_labels, for NodePools and managed node groups alike) of this instance type.
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": GROUP_LABEL, "operator": "Exists"},
                        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [group.instance_type]},
                    ]},
                ]}}},
                # The one pod (with the node agents) that runs on an unchecked node: training pods never tolerate it.
                "tolerations": [toleration(HEALTH_TAINT_KEY, "NoSchedule"), NEURON_NO_SCHEDULE, CRITICAL_ADDONS_ONLY],
                "containers": [{
                    "name": "check",
                    "image": image,
                    "command": ["python3", f"{PROGRAM_DIR}/{PROGRAM}", *group.args,
                                *(["--probe", f"{PROGRAM_DIR}/{group.probe_file}"] if self.probe_image else [])],
                    "env": [
                        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "TAINT_KEY", "value": HEALTH_TAINT_KEY},
                        {"name": "TRN_HEALTH_ROOT", "value": HOST_ROOT},
                    ],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
                    "securityContext": {**container_security(run_as_user=NOBODY), "readOnlyRootFilesystem": True},
                    "volumeMounts": [
                        {"name": "program", "mountPath": PROGRAM_DIR, "readOnly": True},
                        {"name": "dev", "mountPath": f"{HOST_ROOT}/dev", "readOnly": True},
                        {"name": "sys", "mountPath": f"{HOST_ROOT}/sys", "readOnly": True},
                    ],
                }],
                "volumes": [
                    {"name": "program", "configMap": {"name": NAME}},
                    host_path("dev", "/dev", "Directory"),
                    host_path("sys", "/sys", "Directory"),
                ],
            },
        )
