"""TrainingNamespace: the namespace of the training workloads, with Pod Security Admission labels.

Enforced at ``baseline``: no privileged containers, host namespaces or host paths, which nothing there
needs (devices come from the Neuron and EFA device plugins, data from the FSx claim); not ``restricted``,
because the Neuron training images run as root. ``restricted`` is audited and warned about, so that
workloads can move towards it. The device plugins stay in kube-system, which EKS leaves privileged: the
EFA device plugin reads Neuron device topology and neuron-monitor reads hardware counters, both as
privileged containers (upstream charts), and the Neuron device plugin mounts host paths.
"""

from __future__ import annotations

from cdk8s import Chart
from constructs import Construct

from trainium_cdk.charts._k8s import CHART_LABELS, api_object, check_choice, check_name
from trainium_cdk.names import TRAINING_NAMESPACE
from trainium_cdk.versions import KUBERNETES_VERSION

PSA_LEVELS = ("privileged", "baseline", "restricted")
DEFAULT_ENFORCE = "baseline"
PSA_PREFIX = "pod-security.kubernetes.io"


class TrainingNamespace(Chart):
    """A namespace with Pod Security Admission labels pinned to the cluster's Kubernetes version.

    :param name: default ``training``.
    :param enforce: the enforced level. Default: ``baseline``.
    :param audit: the level audited and warned about. Default: ``restricted``.
    """

    def __init__(
        self, scope: Construct, id: str, *, name: str = TRAINING_NAMESPACE, enforce: str = DEFAULT_ENFORCE,
        audit: str = "restricted",
    ) -> None:
        check_name("TrainingNamespace.name", name)
        check_choice("TrainingNamespace.enforce", enforce, PSA_LEVELS)
        check_choice("TrainingNamespace.audit", audit, PSA_LEVELS)
        super().__init__(scope, id, labels=CHART_LABELS)
        version = f"v{KUBERNETES_VERSION}"
        labels = {}
        for mode, level in (("enforce", enforce), ("audit", audit), ("warn", audit)):
            labels[f"{PSA_PREFIX}/{mode}"] = level
            labels[f"{PSA_PREFIX}/{mode}-version"] = version
        self.namespace_name = name
        self.namespace_object = api_object(self, "Namespace", api_version="v1", kind="Namespace", name=name, labels=labels)
