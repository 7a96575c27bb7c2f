"""NeuronDevicePlugin: the Neuron device plugin, optionally the scheduler extension and neuron-monitor.

The device plugin advertises aws.amazon.com/neuron (devices) and aws.amazon.com/neuroncore (cores) on
every Neuron node. The scheduler extension makes a second kube-scheduler allocate contiguous cores
and devices; pods opt in with ``schedulerName`` (:attr:`NeuronDevicePlugin.scheduler_name`).
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml
from cdk8s import ApiObject, Chart
from constructs import Construct

from trainium_cdk.charts._k8s import (
    CHART_LABELS,
    CRITICAL_ADDONS_ONLY,
    DEVICE_PLUGIN_DIR,
    KUBE_SYSTEM,
    NEURON_NO_SCHEDULE,
    POD_SECURITY,
    SYSTEM_NODE_CRITICAL,
    api_object,
    check_instance_types,
    check_name,
    cluster_role,
    cluster_role_binding,
    host_path,
    instance_type_affinity,
    rule,
    service_account,
    toleration,
    workload,
)
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, NEURON_RESOURCE, NEURONCORE_RESOURCE
from trainium_cdk.facts.names import HEALTH_TAINT_KEY

DEFAULT_NAMESPACE = KUBE_SYSTEM
DEFAULT_INSTANCE_TYPES: tuple[str, ...] = DEFAULT_CATALOG.neuron_types()
DEFAULT_SCHEDULER_NAME = "neuron-scheduler"

DEVICE_PLUGIN_NAME = "neuron-device-plugin"
SCHEDULER_EXTENSION_NAME = "k8s-neuron-scheduler"
SCHEDULER_EXTENSION_PORT = 12345
MONITOR_NAME = "neuron-monitor"
MONITOR_PORT = 8000
NEURONDEVICE_RESOURCE = "aws.amazon.com/neurondevice"
# kube-scheduler's secure port: its /healthz is readable without credentials.
KUBE_SCHEDULER_PORT = 10259

_NO_ESCALATION = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# And the health taint: a node is checked with its devices advertised (the health check's probe pod requests them all),
# and neuron-monitor watches a node from its start.
_NEURON_NODE_TOLERATIONS = [CRITICAL_ADDONS_ONLY, NEURON_NO_SCHEDULE, toleration(HEALTH_TAINT_KEY, "NoSchedule")]


class NeuronDevicePlugin(Chart):
    """The Neuron device plugin DaemonSet with its RBAC, on Neuron instance types only.

    :param instance_types: node types the plugin (and neuron-monitor) run on.
        Default: every type of the default catalog (``DEFAULT_CATALOG.neuron_types()``).
    :param namespace: namespace of every namespaced object. Default: ``kube-system``.
    :param image: device plugin image. Default: ``versions.NEURON_DEVICE_PLUGIN_IMAGE``.
    :param scheduler_extension: also deploy the Neuron scheduler extension and a second
        kube-scheduler that consults it. Default: False.
    :param scheduler_name: name of that second scheduler, the ``schedulerName`` pods use.
        Default: ``neuron-scheduler``.
    :param monitor: also deploy neuron-monitor with a Prometheus endpoint on port 8000. Default: False.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        instance_types: Sequence[str] = DEFAULT_INSTANCE_TYPES,
        namespace: str = DEFAULT_NAMESPACE,
        image: str | None = None,
        scheduler_extension: bool = False,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        monitor: bool = False,
    ) -> None:
        field = type(self).__name__
        types = check_instance_types(f"{field}.instance_types", instance_types)
        check_name(f"{field}.namespace", namespace)
        check_name(f"{field}.scheduler_name", scheduler_name)
        super().__init__(scope, id, labels=CHART_LABELS)
        self._ns = namespace
        self.affinity = instance_type_affinity(types)

        self.service_account = service_account(self, "ServiceAccount", name=DEVICE_PLUGIN_NAME, namespace=namespace)
        self.cluster_role = cluster_role(
            self, "ClusterRole", name=DEVICE_PLUGIN_NAME,
            rules=[
                rule(["nodes"], ["get", "list", "watch"]),
                rule(["events"], ["create", "patch"]),
                rule(["pods"], ["update", "patch", "get", "list", "watch"]),
                rule(["nodes/status"], ["patch", "update"]),
            ],
        )
        cluster_role_binding(
            self, "ClusterRoleBinding", name=DEVICE_PLUGIN_NAME, role=DEVICE_PLUGIN_NAME,
            service_account=DEVICE_PLUGIN_NAME, namespace=namespace,
        )
        self.daemon_set = workload(
            self, "DaemonSet", kind="DaemonSet", name=DEVICE_PLUGIN_NAME, namespace=namespace,
            labels={"app.kubernetes.io/name": DEVICE_PLUGIN_NAME},
            updateStrategy={"type": "RollingUpdate"},
            pod_spec={
                "serviceAccountName": DEVICE_PLUGIN_NAME,
                "priorityClassName": SYSTEM_NODE_CRITICAL,
                "securityContext": POD_SECURITY,
                "tolerations": _NEURON_NODE_TOLERATIONS,
                "affinity": self.affinity,
                "containers": [{
                    "name": DEVICE_PLUGIN_NAME,
                    "image": image or versions.NEURON_DEVICE_PLUGIN_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    # The plugin labels and patches its own node: it finds it by name.
                    "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    # Upstream's static manifest runs it without capabilities: host paths are all it needs.
                    "securityContext": _NO_ESCALATION,
                    "volumeMounts": [
                        {"name": "device-plugin", "mountPath": DEVICE_PLUGIN_DIR},
                        {"name": "run", "mountPath": "/run"},
                        {"name": "opt-aws", "mountPath": "/opt/aws", "readOnly": True},
                    ],
                }],
                "volumes": [
                    host_path("device-plugin", DEVICE_PLUGIN_DIR),
                    host_path("run", "/run"),
                    # The Neuron Helm chart that ships this image tag mounts /opt/aws read-only.
                    host_path("opt-aws", "/opt/aws"),
                ],
            },
        )

        self.scheduler_name: str | None = None
        if scheduler_extension:
            self.scheduler_name = scheduler_name
            self._add_scheduler_extension(scheduler_name)
        self.monitor_service: ApiObject | None = self._add_monitor(types) if monitor else None

    def _add_scheduler_extension(self, scheduler_name: str) -> None:
        ns = self._ns
        labels = {"app.kubernetes.io/name": SCHEDULER_EXTENSION_NAME}
        service_account(self, "ExtensionServiceAccount", name=SCHEDULER_EXTENSION_NAME, namespace=ns)
        cluster_role(
            self, "ExtensionClusterRole", name=SCHEDULER_EXTENSION_NAME,
            rules=[
                rule(["nodes"], ["get", "list", "watch"]),
                rule(["nodes/status"], ["get", "list", "watch", "patch", "update"]),
                rule(["events"], ["create", "patch"]),
                rule(["pods"], ["get", "list", "watch", "patch", "update"]),
                # The extender binds the pods it places (bindVerb below).
                rule(["bindings", "pods/binding"], ["create"]),
            ],
        )
        cluster_role_binding(
            self, "ExtensionClusterRoleBinding", name=SCHEDULER_EXTENSION_NAME, role=SCHEDULER_EXTENSION_NAME,
            service_account=SCHEDULER_EXTENSION_NAME, namespace=ns,
        )
        workload(
            self, "ExtensionDeployment", kind="Deployment", name=SCHEDULER_EXTENSION_NAME, namespace=ns, labels=labels,
            # One extender, never two side by side: upstream runs a single replica replaced with Recreate.
            replicas=1, strategy={"type": "Recreate"},
            pod_spec={
                "serviceAccountName": SCHEDULER_EXTENSION_NAME,
                "priorityClassName": SYSTEM_NODE_CRITICAL,
                "tolerations": [CRITICAL_ADDONS_ONLY],
                "containers": [{
                    "name": "neuron-scheduler-exp",
                    "image": versions.NEURON_SCHEDULER_IMAGE,
                    "env": [{"name": "PORT", "value": str(SCHEDULER_EXTENSION_PORT)}],
                    "ports": [{"name": "http", "containerPort": SCHEDULER_EXTENSION_PORT}],
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    "securityContext": _NO_ESCALATION,
                }],
            },
        )
        api_object(
            self, "ExtensionService", api_version="v1", kind="Service", name=SCHEDULER_EXTENSION_NAME, namespace=ns,
            spec={
                "selector": labels,
                "ports": [{"name": "http", "port": SCHEDULER_EXTENSION_PORT, "targetPort": SCHEDULER_EXTENSION_PORT}],
            },
        )
        self._add_scheduler(scheduler_name)

    def _add_scheduler(self, name: str) -> None:
        """A second kube-scheduler that sends Neuron pods through the extension; the default one stays."""
        ns = self._ns
        config_dir = f"/etc/kubernetes/{name}"
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": name}],
            "extenders": [{
                "urlPrefix": f"http://{SCHEDULER_EXTENSION_NAME}.{ns}.svc.cluster.local:{SCHEDULER_EXTENSION_PORT}",
                "filterVerb": "filter",
                "bindVerb": "bind",
                "enableHTTPS": False,
                "nodeCacheCapable": False,
                "managedResources": [
                    {"name": r, "ignoredByScheduler": False}
                    for r in (NEURON_RESOURCE, NEURONCORE_RESOURCE, NEURONDEVICE_RESOURCE)
                ],
                # Placing a Neuron pod without the extension would hand out fragmented cores.
                "ignorable": False,
            }],
            "leaderElection": {"leaderElect": True, "resourceNamespace": ns, "resourceName": name},
        }
        service_account(self, "SchedulerServiceAccount", name=name, namespace=ns)
        # The built-in roles cover scheduling; their lease rule names only "kube-scheduler".
        for role in ("kube-scheduler", "volume-scheduler"):
            cluster_role_binding(
                self, f"SchedulerAs-{role}", name=f"{name}-as-{role}", role=f"system:{role}",
                service_account=name, namespace=ns,
            )
        cluster_role(
            self, "SchedulerClusterRole", name=name,
            rules=[
                rule(["configmaps"], ["get", "list", "watch"]),
                rule(["leases"], ["create", "get", "list", "update"], api_group="coordination.k8s.io"),
            ],
        )
        cluster_role_binding(
            self, "SchedulerClusterRoleBinding", name=name, role=name, service_account=name, namespace=ns
        )
        api_object(
            self, "SchedulerConfig", api_version="v1", kind="ConfigMap", name=f"{name}-config", namespace=ns,
            data={"config.yaml": yaml.safe_dump(config, sort_keys=False)},
        )
        probe = {"httpGet": {"path": "/healthz", "port": KUBE_SCHEDULER_PORT, "scheme": "HTTPS"}}
        workload(
            self, "SchedulerDeployment", kind="Deployment", name=name, namespace=ns,
            labels={"app.kubernetes.io/name": name, "app.kubernetes.io/component": "scheduler"},
            replicas=1,
            pod_spec={
                "serviceAccountName": name,
                "priorityClassName": "system-cluster-critical",
                "tolerations": [CRITICAL_ADDONS_ONLY],
                "containers": [{
                    "name": "kube-scheduler",
                    "image": versions.kube_scheduler_image(),
                    "command": ["/usr/local/bin/kube-scheduler", f"--config={config_dir}/config.yaml", "--v=2"],
                    "livenessProbe": {**probe, "initialDelaySeconds": 15},
                    "readinessProbe": probe,
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "securityContext": {**_NO_ESCALATION, "readOnlyRootFilesystem": True},
                    "volumeMounts": [{"name": "config", "mountPath": config_dir, "readOnly": True}],
                }],
                "volumes": [{"name": "config", "configMap": {"name": f"{name}-config"}}],
            },
        )

    def _add_monitor(self, instance_types: Sequence[str]) -> ApiObject:
        ns = self._ns
        labels = {"app.kubernetes.io/name": MONITOR_NAME}
        workload(
            self, "MonitorDaemonSet", kind="DaemonSet", name=MONITOR_NAME, namespace=ns, labels=labels,
            updateStrategy={"type": "RollingUpdate"},
            pod_annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(MONITOR_PORT)},
            pod_spec={
                "automountServiceAccountToken": False,
                "securityContext": POD_SECURITY,
                "tolerations": _NEURON_NODE_TOLERATIONS,
                "affinity": instance_type_affinity(instance_types),
                "containers": [{
                    "name": MONITOR_NAME,
                    "image": versions.NEURON_MONITOR_IMAGE,
                    "command": ["/opt/bin/entrypoint.sh"],
                    "args": ["--port", str(MONITOR_PORT)],
                    "ports": [{"name": "metrics", "containerPort": MONITOR_PORT}],
                    # Go runtime soft limit below the container limit, as the upstream manifest sets it.
                    "env": [{"name": "GOMEMLIMIT", "value": "160MiB"}],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                    },
                    # neuron-monitor reads hardware counters from the Neuron driver: upstream runs it privileged.
                    "securityContext": {"privileged": True},
                }],
            },
        )
        # Headless: Prometheus must scrape every node's pod, not one picked by a virtual IP.
        return api_object(
            self, "MonitorService", api_version="v1", kind="Service", name=MONITOR_NAME, namespace=ns, labels=labels,
            spec={
                "clusterIP": "None",
                "selector": labels,
                "ports": [{"name": "metrics", "port": MONITOR_PORT, "targetPort": MONITOR_PORT}],
            },
        )
