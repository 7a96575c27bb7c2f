"""EfaDevicePlugin: advertises vpc.amazonaws.com/efa on EFA nodes, and runs nowhere else.

Without an EFA device the plugin crash-loops, so its node affinity lists the catalog's EFA types only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cdk8s import Chart
from constructs import Construct

from trainium_cdk.charts._k8s import (
    CHART_LABELS,
    CRITICAL_ADDONS_ONLY,
    DEVICE_PLUGIN_DIR,
    EFA_TAINT,
    KUBE_SYSTEM,
    NEURON_NO_SCHEDULE,
    POD_SECURITY,
    SYSTEM_NODE_CRITICAL,
    check_instance_types,
    check_name,
    host_path,
    instance_type_affinity,
    is_token,
    toleration,
    workload,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG

DEFAULT_NAMESPACE = KUBE_SYSTEM
DEFAULT_INSTANCE_TYPES: tuple[str, ...] = DEFAULT_CATALOG.efa_types()
NAME = "aws-efa-k8s-device-plugin"
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")


class EfaDevicePlugin(Chart):
    """The EFA device plugin DaemonSet (host network), pinned to EFA instance types.

    :param region: AWS region of the cluster: the plugin image lives in that region's EKS registry.
        A CDK token (``Stack.of(cluster).region``) works.
    :param instance_types: node types with EFA. Default: ``DEFAULT_CATALOG.efa_types()``.
    :param namespace: namespace of the DaemonSet. Default: ``kube-system``.
    :param image: plugin image. Default: ``versions.efa_device_plugin_image(region)``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        region: str,
        instance_types: Sequence[str] = DEFAULT_INSTANCE_TYPES,
        namespace: str = DEFAULT_NAMESPACE,
        image: str | None = None,
    ) -> None:
        field = type(self).__name__
        types = check_instance_types(f"{field}.instance_types", instance_types)
        check_name(f"{field}.namespace", namespace)
        if not is_token(region) and not (isinstance(region, str) and _REGION.fullmatch(region)):
            raise ConfigError(f"{field}.region", region, "an AWS region code such as us-west-2")
        super().__init__(scope, id, labels=CHART_LABELS)

        self.daemon_set = workload(
            self, "DaemonSet", kind="DaemonSet", name=NAME, namespace=namespace,
            labels={"app.kubernetes.io/name": NAME},
            updateStrategy={"type": "RollingUpdate"},
            pod_spec={
                "automountServiceAccountToken": False,
                "hostNetwork": True,
                "priorityClassName": SYSTEM_NODE_CRITICAL,
                "securityContext": POD_SECURITY,
                # Trainium nodes carry the Neuron taint as well as (or instead of) the EFA one.
                "tolerations": [CRITICAL_ADDONS_ONLY, toleration(EFA_TAINT, "NoSchedule"), NEURON_NO_SCHEDULE],
                "affinity": instance_type_affinity(types),
                "containers": [{
                    "name": NAME,
                    "image": image if image is not None else versions.efa_device_plugin_image(region),
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
                    # Privileged as in the upstream eks-charts chart (v0.5.8 to v0.5.20): the plugin reads Neuron device
                    # topology to hand out the EFA interfaces next to a pod's Neuron devices, which needs it.
                    "securityContext": {
                        "privileged": True, "allowPrivilegeEscalation": True, "runAsNonRoot": False, "runAsUser": 0,
                    },
                    "volumeMounts": [
                        {"name": "device-plugin", "mountPath": DEVICE_PLUGIN_DIR},
                        {"name": "infiniband", "mountPath": "/dev/infiniband/"},
                        {"name": "neuron-tools", "mountPath": "/opt/aws/neuron/"},
                    ],
                }],
                "volumes": [
                    host_path("device-plugin", DEVICE_PLUGIN_DIR),
                    host_path("infiniband", "/dev/infiniband/"),
                    host_path("neuron-tools", "/opt/aws/neuron/", type="DirectoryOrCreate"),
                ],
            },
        )
