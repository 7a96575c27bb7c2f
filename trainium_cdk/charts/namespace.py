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
from trainium_cdk.facts import versions
from trainium_cdk.facts.names import TRAINING_NAMESPACE

PSA_LEVELS = ("privileged", "baseline", "restricted")
DEFAULT_ENFORCE = "baseline"
PSA_PREFIX = "pod-security.kubernetes.io"
INSTANCE_METADATA_ADDRESS = "169.254.169.254"
POD_IDENTITY_ADDRESS = "169.254.170.23"
DENY_POLICY_NAME = "default-deny"
ALLOW_POLICY_NAME = "job-traffic"


class TrainingNamespace(Chart):
    """A namespace with Pod Security Admission labels pinned to the cluster's Kubernetes version.

    :param name: Default: ``training``.
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
        version = "v" + versions.KUBERNETES_VERSION
        labels = {}
        for mode, level in (("enforce", enforce), ("audit", audit), ("warn", audit)):
            labels[f"{PSA_PREFIX}/{mode}"] = level
            labels[f"{PSA_PREFIX}/{mode}-version"] = version
        self.namespace_name = name
        self.namespace_object = api_object(self, "Namespace", api_version="v1", kind="Namespace", name=name, labels=labels)
        # Default deny, in both directions, then what jobs need. Policies add up, so a team that needs more
        # (another port to the internet, a metrics scraper) applies its own policy beside these. Enforced by the
        # VPC CNI's network policy agent (TrainiumCluster turns it on), which always lets the node's own
        # address in: kubelet probes keep working (aws/aws-network-policy-agent#56).
        self.deny_policy = api_object(
            self, "DefaultDeny", api_version="networking.k8s.io/v1", kind="NetworkPolicy",
            name=DENY_POLICY_NAME, namespace=name,
            spec={"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        )
        self.allow_policy = api_object(
            self, "JobTraffic", api_version="networking.k8s.io/v1", kind="NetworkPolicy",
            name=ALLOW_POLICY_NAME, namespace=name,
            spec={
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                # Peers of a job (torchrun's rendezvous, the Neuron runtime's bootstrap; EFA traffic is not IP
                # and no policy sees it) and TensorBoard behind `kubectl port-forward`, which enters the pod's
                # own network namespace. Nothing outside the namespace opens a connection to a job.
                "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [
                    {"to": [{"podSelector": {}}]},
                    # DNS, wherever the resolver is (CoreDNS behind its service address).
                    {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                    # EKS Pod Identity's agent on the node: the data loader's S3 access.
                    {"to": [{"ipBlock": {"cidr": f"{POD_IDENTITY_ADDRESS}/32"}}], "ports": [{"protocol": "TCP", "port": 80}]},
                    # HTTPS: AWS APIs (S3 through the gateway endpoint, interface endpoints in the VPC), the API
                    # server, model hubs and package indexes through NAT; never the instance metadata service,
                    # whose node role the root data shell, TensorBoard and data loader would otherwise take.
                    {
                        "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [f"{INSTANCE_METADATA_ADDRESS}/32"]}}],
                        "ports": [{"protocol": "TCP", "port": 443}],
                    },
                ],
            },
        )
        for policy in (self.deny_policy, self.allow_policy):
            policy.add_dependency(self.namespace_object)
