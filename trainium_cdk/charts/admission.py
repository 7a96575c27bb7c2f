"""Admission policies of the training namespace: who may run as a service account that holds a role."""

from __future__ import annotations

from cdk8s import ApiObject
from constructs import Construct

from trainium_cdk.charts._k8s import api_object

ADMISSION_API = "admissionregistration.k8s.io/v1"
# The label the API server sets on every namespace (Kubernetes 1.22+): a binding selects its namespace by name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def loader_admission(
    scope: Construct, *, service_account: str, job: str, namespace: str
) -> tuple[ApiObject, ApiObject]:
    """A ValidatingAdmissionPolicy and its binding: a pod of ``namespace`` runs as ``service_account`` only when the
    batch/v1 Job ``job`` controls it. EKS Pod Identity hands a role to every pod of the association's namespace
    and service account (EKS user guide, "Pod Identity associations"), and any pod may name any service account of
    its namespace: without this, a training job naming ``data-loader`` would read the dataset bucket. Built into
    Kubernetes (admissionregistration.k8s.io/v1, GA in 1.30): no webhook to run."""
    name = f"{service_account}-only-{job}"
    # CREATE only: a pod's service account never changes after it (PodSpec.serviceAccountName is immutable), and an
    # UPDATE rule would refuse the garbage collector's removal of the owner reference when the Job is orphaned.
    owned = (
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, "
        f"r.apiVersion == 'batch/v1' && r.kind == 'Job' && r.name == '{job}' && has(r.controller) && r.controller)"
    )
    policy = api_object(
        scope, "ServiceAccountPolicy", api_version=ADMISSION_API,
        kind="ValidatingAdmissionPolicy", name=name,
        spec={
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                }],
            },
            "validations": [{
                "expression": f"!has(object.spec.serviceAccountName) || object.spec.serviceAccountName != "
                              f"'{service_account}' || ({owned})",
                "message": f"only the Job {job} runs as the service account {service_account} (its role reads the "
                           "dataset bucket): give your job a service account of its own",
                "reason": "Forbidden",
            }],
        },
    )
    binding = api_object(
        scope, "ServiceAccountPolicyBinding", api_version=ADMISSION_API,
        kind="ValidatingAdmissionPolicyBinding", name=name,
        spec={
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}},
        },
    )
    binding.add_dependency(policy)
    return policy, binding
