"""MetricsExporters: the node exporter of Trainium nodes (EFA counters and per-job textfiles) for Prometheus.

One DaemonSet on Neuron instance types, in kube-system (its pods mount host paths, which the ``training``
namespace's Pod Security admission refuses): node_exporter with only its textfile collector, serving
``*.prom`` files of :data:`trainium_cdk.facts.names.NODE_METRICS_DIR`, and a second container that writes the EFA
hardware counters there (trainium_cdk/node/prometheus_node.py ``efa``). Neuron metrics come from neuron-monitor
(:class:`~trainium_cdk.charts.neuron_device_plugin.NeuronDevicePlugin` with ``monitor=True``). The managed
collector scrapes both by the pod labels and ports below (:func:`scrape_configuration`).
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml
from cdk8s import ApiObject, Chart
from constructs import Construct

from trainium_cdk import node
from trainium_cdk.charts._k8s import (
    CHART_LABELS,
    CRITICAL_ADDONS_ONLY,
    KUBE_SYSTEM,
    NEURON_NO_SCHEDULE,
    POD_SECURITY,
    SYSTEM_NODE_CRITICAL,
    api_object,
    check_instance_types,
    check_name,
    container_security,
    host_path,
    instance_type_affinity,
    workload,
)
from trainium_cdk.charts.neuron_device_plugin import MONITOR_NAME
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.names import NODE_METRICS_DIR, PUSHGATEWAY_NAME, PUSHGATEWAY_PORT, TRAINING_NAMESPACE
from trainium_cdk.node.prometheus_node import (
    DEPLOYMENT_LABEL,
    NEURON_JOB,
    NEURON_MONITOR_PORT,
    NODE_EXPORTER_PORT,
    NODE_JOB,
    NODE_LABEL,
    SCRAPE_INTERVAL,
    SYS_INFINIBAND,
)

NAME = NODE_JOB
PROGRAM = "prometheus_node.py"
PROGRAM_DIR = "/opt/trainium-cdk"
NAME_LABEL = "app.kubernetes.io/name"
NOBODY = 65534
DEFAULT_INSTANCE_TYPES: tuple[str, ...] = DEFAULT_CATALOG.neuron_types()
# What the scraper scrapes: (job, pod label app.kubernetes.io/name, container port).
TARGETS = ((NEURON_JOB, MONITOR_NAME, NEURON_MONITOR_PORT), (NODE_JOB, NAME, NODE_EXPORTER_PORT))


class MetricsExporters(Chart):
    """node_exporter (textfile collector) and the EFA counter writer on every Neuron node.

    :param instance_types: node types they run on. Default: every Neuron type of the default catalog.
    :param namespace: their namespace. Default: ``kube-system``.
    """

    def __init__(self, scope: Construct, id: str, *, instance_types: Sequence[str] = DEFAULT_INSTANCE_TYPES,
                 namespace: str = KUBE_SYSTEM) -> None:
        field = type(self).__name__
        types = check_instance_types(f"{field}.instance_types", instance_types)
        check_name(f"{field}.namespace", namespace)
        super().__init__(scope, id, labels=CHART_LABELS)
        self.program = api_object(self, "Program", api_version="v1", kind="ConfigMap", name=f"{NAME}-efa",
                                  namespace=namespace, data={PROGRAM: node.source(PROGRAM)})
        self.daemon_set: ApiObject = workload(
            self, "DaemonSet", kind="DaemonSet", name=NAME, namespace=namespace, labels={NAME_LABEL: NAME},
            updateStrategy={"type": "RollingUpdate"},
            pod_spec={
                "automountServiceAccountToken": False,
                "priorityClassName": SYSTEM_NODE_CRITICAL,
                "securityContext": POD_SECURITY,
                "tolerations": [NEURON_NO_SCHEDULE, CRITICAL_ADDONS_ONLY],
                "affinity": instance_type_affinity(types),
                "containers": [
                    {
                        "name": "node-exporter",
                        "image": versions.NODE_EXPORTER_IMAGE,
                        "args": ["--collector.disable-defaults", "--collector.textfile",
                                 f"--collector.textfile.directory={NODE_METRICS_DIR}",
                                 f"--web.listen-address=:{NODE_EXPORTER_PORT}"],
                        "ports": [{"name": "metrics", "containerPort": NODE_EXPORTER_PORT}],
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
                        "securityContext": {**container_security(run_as_user=NOBODY), "readOnlyRootFilesystem": True},
                        "volumeMounts": [{"name": "metrics", "mountPath": NODE_METRICS_DIR, "readOnly": True}],
                    },
                    {
                        # Root, no capabilities: the textfile directory on the host belongs to root.
                        "name": "efa-counters",
                        "image": versions.NODE_HEALTH_IMAGE,
                        "command": ["python3", f"{PROGRAM_DIR}/{PROGRAM}", "efa", "--sys", SYS_INFINIBAND,
                                    "--dir", NODE_METRICS_DIR],
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
                        "securityContext": {**container_security(), "readOnlyRootFilesystem": True},
                        "volumeMounts": [
                            {"name": "program", "mountPath": PROGRAM_DIR, "readOnly": True},
                            {"name": "infiniband", "mountPath": SYS_INFINIBAND, "readOnly": True},
                            {"name": "metrics", "mountPath": NODE_METRICS_DIR},
                        ],
                    },
                ],
                "volumes": [
                    {"name": "program", "configMap": {"name": f"{NAME}-efa"}},
                    # A node without EFA (trn1.2xlarge) has no such directory: DirectoryOrCreate, and no counters.
                    host_path("infiniband", SYS_INFINIBAND, "DirectoryOrCreate"),
                    host_path("metrics", NODE_METRICS_DIR, "DirectoryOrCreate"),
                ],
            },
        )


def scrape_configuration(deployment: str, namespace: str = KUBE_SYSTEM, training_namespace: str = TRAINING_NAMESPACE) -> str:
    """The managed collector's Prometheus configuration: each exporter's pods in ``namespace`` by their
    ``app.kubernetes.io/name`` label and container port, with the node's name as ``node`` and the deployment's
    name as ``deployment`` (the labels the host agents set, trainium_cdk/node/prometheus_node.py); and the EKS jobs'
    Pushgateway in ``training_namespace`` (charts/job_metrics.py), whose series keep the ``job`` and ``node`` labels
    the launcher pushed them with (``honor_labels``, as the Pushgateway's README asks)."""
    def job(name: str, app: str, port: int, *, where: str = namespace, node: bool = True) -> dict:
        return {
            "job_name": name,
            "honor_labels": name in (NODE_JOB, PUSHGATEWAY_NAME),
            "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [where]}}],
            "relabel_configs": [
                {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"], "regex": app, "action": "keep"},
                {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": str(port), "action": "keep"},
                # The gateway's node says nothing about a pushed series: its ``node`` is the job's rank.
                *([{"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": NODE_LABEL}] if node else []),
                {"target_label": DEPLOYMENT_LABEL, "replacement": deployment},
            ],
        }

    jobs = [job(name, app, port) for name, app, port in TARGETS]
    jobs.append(job(PUSHGATEWAY_NAME, PUSHGATEWAY_NAME, PUSHGATEWAY_PORT, where=training_namespace, node=False))
    config = {"global": {"scrape_interval": SCRAPE_INTERVAL}, "scrape_configs": jobs}
    return yaml.safe_dump(config, sort_keys=False)
