"""JobMetricsGateway: the Prometheus Pushgateway that EKS jobs push their metrics to at their end.

On Slurm, Batch and the development instance the launcher writes a job's compile-cache counters as a textfile that
the node's exporter serves; on EKS the training namespace's Pod Security admission refuses the hostPath that would
take. The Prometheus docs name the Pushgateway for exactly this ("When to use the Pushgateway",
https://prometheus.io/docs/practices/pushing/: "capturing the outcome of a service-level batch job"), and its
caveats fit: one gateway per cluster, series kept until deleted, as the textfiles are kept on a host.

One Deployment and its Service (:data:`~trainium_cdk.facts.names.PUSHGATEWAY_URL`) in the training namespace, restricted
Pod Security (non-root, read-only root, no capabilities, RuntimeDefault seccomp, no API token), and a
NetworkPolicy beside the namespace's own: the namespace's pods may push (port 9091), and the managed collector may
scrape from its network interfaces, which sit in the cluster's subnets (``collector_cidr``). Nothing else may
open a connection to it: the namespace's default-deny covers every other port and peer.
"""

from __future__ import annotations

from typing import Any

from cdk8s import ApiObject, Chart
from constructs import Construct

from trainium_cdk.charts._k8s import CHART_LABELS, POD_SECURITY, api_object, check_name, container_security, workload
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.names import PUSHGATEWAY_NAME, PUSHGATEWAY_PORT, TRAINING_NAMESPACE

NAME_LABEL = "app.kubernetes.io/name"
NOBODY = 65534
DATA_DIR = "/data"
# Pushed series survive a restart of the container (not of the pod: an emptyDir lives with the pod).
PERSISTENCE_FILE = f"{DATA_DIR}/metrics"


class JobMetricsGateway(Chart):
    """The Pushgateway of EKS jobs' metrics, and who may reach it.

    :param collector_cidr: the addresses the managed collector scrapes from (its interfaces are in the cluster's
        subnets: the VPC's CIDR; a CDK token works).
    :param namespace: the training namespace, whose pods push. Default: ``training``.
    """

    def __init__(self, scope: Construct, id: str, *, collector_cidr: str, namespace: str = TRAINING_NAMESPACE) -> None:
        field = type(self).__name__
        check_name(f"{field}.namespace", namespace)
        if not isinstance(collector_cidr, str) or not collector_cidr:
            raise ConfigError(f"{field}.collector_cidr", collector_cidr, "an IPv4 CIDR such as 10.0.0.0/16")
        super().__init__(scope, id, labels=CHART_LABELS)
        labels = {NAME_LABEL: PUSHGATEWAY_NAME}
        def probe(path: str) -> dict[str, Any]:
            return {"httpGet": {"path": path, "port": PUSHGATEWAY_PORT}, "periodSeconds": 10}
        self.deployment: ApiObject = workload(
            self, "Deployment", kind="Deployment", name=PUSHGATEWAY_NAME, namespace=namespace, labels=labels,
            replicas=1,
            pod_spec={
                "automountServiceAccountToken": False,
                "securityContext": {**POD_SECURITY, "runAsNonRoot": True, "runAsUser": NOBODY, "runAsGroup": NOBODY,
                                    "fsGroup": NOBODY},
                "containers": [{
                    "name": PUSHGATEWAY_NAME,
                    "image": versions.PUSHGATEWAY_IMAGE,
                    "args": [f"--web.listen-address=:{PUSHGATEWAY_PORT}", f"--persistence.file={PERSISTENCE_FILE}"],
                    "ports": [{"name": "http", "containerPort": PUSHGATEWAY_PORT}],
                    "readinessProbe": probe("/-/ready"),
                    "livenessProbe": probe("/-/healthy"),
                    # Limits well above its use (a few pushes a job, a scrape a minute) bound it on the node
                    # (checkov CKV_K8S_11, CKV_K8S_13).
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"},
                    },
                    "securityContext": {**container_security(run_as_user=NOBODY), "readOnlyRootFilesystem": True},
                    "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
                }],
                "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "64Mi"}}],
            },
        )
        self.service = api_object(
            self, "Service", api_version="v1", kind="Service", name=PUSHGATEWAY_NAME, namespace=namespace,
            labels=labels,
            spec={"selector": labels,
                  "ports": [{"name": "http", "port": PUSHGATEWAY_PORT, "targetPort": PUSHGATEWAY_PORT}]},
        )
        port = [{"protocol": "TCP", "port": PUSHGATEWAY_PORT}]
        self.network_policy = api_object(
            self, "NetworkPolicy", api_version="networking.k8s.io/v1", kind="NetworkPolicy",
            name=PUSHGATEWAY_NAME, namespace=namespace,
            spec={
                "podSelector": {"matchLabels": labels},
                "policyTypes": ["Ingress"],
                "ingress": [
                    # The jobs' pushes (the namespace's own policy admits its pods already: said here for the reader).
                    {"from": [{"podSelector": {}}], "ports": port},
                    # The AMP managed collector, from its interfaces in the cluster's subnets (AMP user guide, "Using
                    # an AWS managed collector"). An address is all a NetworkPolicy can match it by, and pods take
                    # theirs from the same subnets (VPC CNI): see docs/guide/health.md.
                    {"from": [{"ipBlock": {"cidr": collector_cidr}}], "ports": port},
                ],
            },
        )
