"""NodeHealthCheck: health before work on EKS. Trainium nodes join with the startup taint names.HEALTH_TAINT_KEY
(Karpenter NodePools' ``startupTaints``, managed node groups' taints); a DaemonSet per compute group runs
trainium_cdk/node/health_check.py on each new node against the catalog of the group's type and takes the taint
off on pass. On failure the taint stays, the node gets the condition TrainiumHealthy=False and a Karpenter node
is deleted (Karpenter terminates the instance and launches another for the pending pods).

Least privilege: the checker reads the host's /dev and /sys through read-only hostPath mounts, as an unprivileged
user with no capabilities (listing /dev and reading sysfs need neither). Its ClusterRole may get, patch and
delete nodes and patch their status: RBAC cannot name "the caller's own node" (resourceNames are fixed), so a
ValidatingAdmissionPolicy narrows it: the checker's service account may change or delete only the node its pod
runs on (the bound token's ``authentication.kubernetes.io/node-name``, Kubernetes 1.32+: KEP-4193, the same check
the NodeRestriction admission plugin makes for kubelets), and on that node may only take taints off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdk8s import Chart
from constructs import Construct

from trainium_cdk import node
from trainium_cdk.facts import versions
from trainium_cdk.charts._k8s import (
    CHART_LABELS, CRITICAL_ADDONS_ONLY, KUBE_SYSTEM, NEURON_NO_SCHEDULE, POD_SECURITY, SYSTEM_NODE_CRITICAL,
    api_object, check_name, cluster_role, cluster_role_binding, container_security, host_path, rule, service_account,
    toleration, workload,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import GROUP_LABEL, HEALTH_TAINT_KEY

NODE_HEALTH_CHART_ID = "node-health"
NAME = "trainium-node-health"
PROGRAM = "health_check.py"
PROGRAM_DIR = "/opt/trainium-cdk"
HOST_ROOT = "/host"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
NOBODY = 65534


@dataclass(frozen=True)
class NodeHealthProps:
    """What one compute group's nodes must show (the catalog of its type).

    :param group: the compute group (its nodes' GROUP_LABEL).
    :param devices: Neuron devices.
    :param cores: NeuronCore counts that pass (Trainium2: physical and logical).
    :param efa_interfaces: EFA interfaces.
    :param min_driver: the oldest Neuron driver (aws-neuronx-dkms version) that passes: the Neuron track's. The EKS AMI
        release brings the driver, which may be newer than the track's release; a runtime needs one at least as new
        as its own release's. Default: no driver check.
    """

    group: str
    devices: int
    cores: Sequence[int]
    efa_interfaces: int
    min_driver: str | None = None

    def __post_init__(self) -> None:
        check_name("NodeHealthProps.group", self.group)
        if self.devices < 1 or not self.cores:
            raise ConfigError(f"NodeHealthProps({self.group}).devices", self.devices, "at least 1, with core counts")

    @property
    def args(self) -> list[str]:
        return ["--devices", str(self.devices), "--cores", ",".join(map(str, self.cores)),
                "--efa", str(self.efa_interfaces), *(["--min-driver", self.min_driver] if self.min_driver else []),
                "--kube"]


def admission_policy(service_account_user: str) -> dict:
    """The ValidatingAdmissionPolicy spec: the checker changes only its own node, and only by taking taints off."""
    own_node = (f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                f"request.userInfo.extra['{NODE_NAME_EXTRA}'][0] == request.name")
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE", "DELETE"],
            "resources": ["nodes", "nodes/status"],
        }]},
        "matchConditions": [{"name": "the-health-checker", "expression": f"request.userInfo.username == '{service_account_user}'"}],
        "validations": [
            {"expression": own_node, "message": "the node health checker may change only the node it runs on"},
            {
                "expression": (
                    "request.operation != 'UPDATE' || request.subResource == 'status' || "
                    "(object.metadata.labels == oldObject.metadata.labels && "
                    "(!has(object.spec.taints) || object.spec.taints.all(t, has(oldObject.spec.taints) && "
                    "t in oldObject.spec.taints)))"
                ),
                "message": "the node health checker may only take taints off its node",
            },
        ],
    }


class NodeHealthCheck(Chart):
    """The checker's program (a ConfigMap), RBAC, admission policy and one DaemonSet per compute group.

    :param groups: one per compute group.
    :param namespace: where the namespaced objects go. Default: kube-system.
    :param image: a Python 3 image. Default: versions.NODE_HEALTH_IMAGE.
    """

    def __init__(self, scope: Construct, id: str, *, groups: Sequence[NodeHealthProps], namespace: str = KUBE_SYSTEM,
                 image: str = versions.NODE_HEALTH_IMAGE) -> None:
        if not groups:
            raise ConfigError("NodeHealthCheck.groups", [], "at least one compute group")
        super().__init__(scope, id, labels=CHART_LABELS)
        self.program = api_object(self, "Program", api_version="v1", kind="ConfigMap", name=NAME, namespace=namespace,
                                  data={PROGRAM: node.source(PROGRAM)})
        service_account(self, "ServiceAccount", name=NAME, namespace=namespace)
        cluster_role(self, "ClusterRole", name=NAME, rules=[
            rule(["nodes"], ["get", "patch", "delete"]), rule(["nodes/status"], ["patch"]),
        ])
        cluster_role_binding(self, "ClusterRoleBinding", name=NAME, role=NAME, service_account=NAME, namespace=namespace)
        user = f"system:serviceaccount:{namespace}:{NAME}"
        api_object(self, "OwnNodeOnly", api_version="admissionregistration.k8s.io/v1", kind="ValidatingAdmissionPolicy",
                   name=NAME, spec=admission_policy(user))
        api_object(self, "OwnNodeOnlyBinding", api_version="admissionregistration.k8s.io/v1",
                   kind="ValidatingAdmissionPolicyBinding", name=NAME,
                   spec={"policyName": NAME, "validationActions": ["Deny"]})
        self.daemon_sets = {g.group: self._daemon_set(g, namespace, image) for g in groups}

    def _daemon_set(self, group: NodeHealthProps, namespace: str, image: str):
        name = f"{NAME}-{group.group}"
        return workload(
            self, f"DaemonSet-{group.group}", kind="DaemonSet", name=name[:63].rstrip("-"), namespace=namespace,
            labels={"app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": group.group},
            pod_spec={
                "serviceAccountName": NAME,
                "priorityClassName": SYSTEM_NODE_CRITICAL,
                "securityContext": POD_SECURITY,
                "nodeSelector": {GROUP_LABEL: group.group},
                # The one pod (with the node agents) that runs on an unchecked node: training pods never tolerate it.
                "tolerations": [toleration(HEALTH_TAINT_KEY, "NoSchedule"), NEURON_NO_SCHEDULE, CRITICAL_ADDONS_ONLY],
                "containers": [{
                    "name": "check",
                    "image": image,
                    "command": ["python3", f"{PROGRAM_DIR}/{PROGRAM}", *group.args],
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
