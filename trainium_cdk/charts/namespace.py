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
INSTANCE_METADATA_ADDRESS = "169.254.169.254"
METADATA_POLICY_NAME = "no-instance-metadata"


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
        # No pod here reaches the instance metadata service: the data shell, TensorBoard and the data loader
        # run as root on the system nodes, whose launch template (EKS's) allows two hops, and would take the
        # node role from it (their AWS access is EKS Pod Identity, 169.254.170.23, which stays open).
        # Everything else stays open: peers, DNS, the file system, AWS APIs. Enforced by the VPC CNI's network
        # policy agent (TrainiumCluster turns it on).
        self.metadata_policy = api_object(
            self, "NoInstanceMetadata", api_version="networking.k8s.io/v1", kind="NetworkPolicy",
            name=METADATA_POLICY_NAME, namespace=name,
            spec={
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [f"{INSTANCE_METADATA_ADDRESS}/32"]}}]}],
            },
        )
        self.metadata_policy.add_dependency(self.namespace_object)
