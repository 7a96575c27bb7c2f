"""Builders the charts share: plain Kubernetes dicts, token-aware checks, one way to emit an object.

Charts are built twice: with plain values for `make synth`, and with CDK tokens ("${Token[...]}")
when the EKS stack adds them to a cluster. Every check here lets an unresolved token through. The
charts never import the CDK: they recognise a token by its encoding, and the caller turns list and
number tokens into string tokens (``Fn.join``, ``Token.as_string``) where a chart needs a string.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cdk8s import ApiObject, JsonPatch
from constructs import Construct

from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts.names import NEURON_TAINT_KEY
from trainium_cdk.runtime import envsubst

KUBE_SYSTEM = "kube-system"
SYSTEM_NODE_CRITICAL = "system-node-critical"
# A well-known label the kubelet sets on every node from its cloud provider (Kubernetes docs, "Node Labels Populated
# By The Kubelet" and "Well-Known Labels, Annotations and Taints": node.kubernetes.io/instance-type).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
EFA_TAINT = "aws.amazon.com/efa"
CHART_LABELS = {"app.kubernetes.io/part-of": "trainium-cdk", "app.kubernetes.io/managed-by": "cdk8s"}
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# Pod level: the container runtime's default seccomp profile (Kubernetes runs Unconfined otherwise).
POD_SECURITY = {"seccompProfile": {"type": "RuntimeDefault"}}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


# A value dist/ manifests leave for `envsubst` to fill from the stack outputs, such as ${FSX_FILE_SYSTEM_ID}.
_PLACEHOLDER = re.compile(r"^\$\{[A-Z][A-Z0-9_]*\}$")
# CDK's token encodings (aws-cdk-lib core/lib/private/encoding.ts): a string token anywhere in a string,
# a list token as the one element of a list, a number token as a float carrying a marker in its top bits.
_TOKEN_KEY = r"\[[a-zA-Z0-9:._-]+\]\}"
_STRING_TOKEN = re.compile(r"\$\{Token" + _TOKEN_KEY)
_LIST_TOKEN = re.compile(r"#\{Token" + _TOKEN_KEY)
_NUMBER_TOKEN_MARKER = 0xFBFF


def placeholder(name: str) -> str:
    """``${NAME}``: a value known only after deploy, for dist/ manifests (trainium_cdk/runtime/envsubst.py)."""
    value = envsubst.placeholder(name)
    assert _PLACEHOLDER.fullmatch(value), name
    return value


def is_token(value: Any) -> bool:
    """A value not known at synth: a CDK token ("${Token[...]}", an encoded number or list), or a
    dist/ placeholder such as ${FSX_FILE_SYSTEM_ID}. Checks let both through.

    The same answer as ``aws_cdk.Token.is_unresolved``, read from the token encodings so that charts
    need no CDK (and the ``trn`` CLI, which renders them, loads none).
    """
    if isinstance(value, str):
        return bool(_PLACEHOLDER.fullmatch(value) or _STRING_TOKEN.search(value))
    if isinstance(value, float):
        return is_number_token(value)
    if isinstance(value, (list, tuple)):
        return len(value) == 1 and isinstance(value[0], str) and bool(_LIST_TOKEN.search(value[0]))
    # An IResolvable (Lazy, an intrinsic) passed as it is.
    return callable(getattr(value, "resolve", None)) and hasattr(type(value), "creation_stack")


def literal(text: str) -> str:
    """A container's command word or env value that Kubernetes passes as written. It expands ``$(VAR)`` in both and
    reduces ``$$`` to ``$`` ("Double $$ are reduced to a single $, which allows for escaping the $(VAR_NAME) syntax",
    the Container API's command, args and env value), so every ``$`` is doubled: a job's ``$(date)`` argument, or the
    launcher's ``$$`` (its PID), reaches the node as it would on every other backend. A token or a dist/ placeholder
    (resolved later) stays as it is."""
    return text if is_token(text) else text.replace("$", "$$")


def is_number_token(value: Any) -> bool:
    """A CDK number token: a float whose top 16 bits are CDK's marker (a huge negative number)."""
    if not isinstance(value, float):
        return False
    return struct.unpack("<Q", struct.pack("<d", value))[0] >> 48 == _NUMBER_TOKEN_MARKER


def check_not_number_token(field: str, value: Any) -> None:
    """A number token prints as a huge float: without the CDK a chart cannot make it a string."""
    if is_number_token(value):
        raise ConfigError(field, value, "a number or a string token: pass Token.as_string(value) for a number token")


def check_choice(field: str, value: Any, allowed: Iterable[Any]) -> None:
    allowed = tuple(allowed)
    if not is_token(value) and value not in allowed:
        raise ConfigError(field, value, one_of(allowed))


def check_name(field: str, value: str) -> str:
    """A Kubernetes object name usable everywhere: an RFC 1123 label (namespaces and Services need one)."""
    if not is_token(value) and not (isinstance(value, str) and _DNS_LABEL.fullmatch(value)):
        raise ConfigError(field, value, "at most 63 lower-case letters, digits and '-', alphanumeric at both ends")
    return value


def check_instance_types(field: str, instance_types: Sequence[str]) -> list[str]:
    """A non-empty list of instance type names; a list token passes as it is."""
    if is_token(instance_types):
        return instance_types  # type: ignore[return-value]
    if isinstance(instance_types, str):
        raise ConfigError(field, instance_types, "a list of instance types, not one string")
    types = list(instance_types)
    if not types:
        raise ConfigError(field, types, "at least one instance type: an empty In list matches no node")
    for i, name in enumerate(types):
        if not is_token(name) and (not isinstance(name, str) or "." not in name):
            raise ConfigError(f"{field}[{i}]", name, "an instance type name such as trn1.32xlarge")
    return types


def api_object(
    scope: Construct, id: str, *, api_version: str, kind: str, name: str, namespace: str | None = None,
    labels: Mapping[str, str] | None = None, **body: Any,
) -> ApiObject:
    """An ApiObject with top-level fields beyond metadata (spec, data, rules, provisioner, ...).

    cdk8s's Python ApiObject only takes apiVersion, kind and metadata; the rest goes in as JSON
    patches, which also keep the field order of ``body`` in the output.
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    obj = ApiObject(scope, id, api_version=api_version, kind=kind, metadata=metadata)
    for key, value in body.items():
        obj.add_json_patch(JsonPatch.add(f"/{key}", value))
    return obj


def toleration(key: str, effect: str | None = None) -> dict[str, str]:
    return {"key": key, "operator": "Exists", **({"effect": effect} if effect else {})}


# Device plugins and node agents must also land on nodes reserved for critical add-ons.
CRITICAL_ADDONS_ONLY = toleration("CriticalAddonsOnly")
NEURON_NO_SCHEDULE = toleration(NEURON_TAINT_KEY, "NoSchedule")


def instance_type_affinity(instance_types: Sequence[str]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": instance_types}]}
                ]
            }
        }
    }


def host_path(name: str, path: str, type: str | None = None) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, **({"type": type} if type else {})}}


def rule(resources: Sequence[str], verbs: Sequence[str], api_group: str = "") -> dict[str, Any]:
    return {"apiGroups": [api_group], "resources": list(resources), "verbs": list(verbs)}


def service_account(scope: Construct, id: str, *, name: str, namespace: str) -> ApiObject:
    return api_object(scope, id, api_version="v1", kind="ServiceAccount", name=name, namespace=namespace)


def cluster_role(scope: Construct, id: str, *, name: str, rules: Sequence[Mapping[str, Any]]) -> ApiObject:
    return api_object(
        scope, id, api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole", name=name, rules=list(rules)
    )


def cluster_role_binding(
    scope: Construct, id: str, *, name: str, role: str, service_account: str, namespace: str
) -> ApiObject:
    return api_object(
        scope, id, api_version="rbac.authorization.k8s.io/v1", kind="ClusterRoleBinding", name=name,
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        subjects=[{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    )


def workload(
    scope: Construct, id: str, *, kind: str, name: str, namespace: str, labels: Mapping[str, str],
    pod_spec: Mapping[str, Any], pod_annotations: Mapping[str, str] | None = None, **spec: Any,
) -> ApiObject:
    """A DaemonSet or Deployment whose selector is exactly its pod labels."""
    template_metadata: dict[str, Any] = {"labels": dict(labels)}
    if pod_annotations:
        template_metadata["annotations"] = dict(pod_annotations)
    return api_object(
        scope, id, api_version="apps/v1", kind=kind, name=name, namespace=namespace, labels=labels,
        spec={
            "selector": {"matchLabels": dict(labels)},
            **spec,
            "template": {"metadata": template_metadata, "spec": dict(pod_spec)},
        },
    )


def container_security(*, drop: Sequence[str] = ("ALL",), run_as_user: int | None = None) -> dict[str, Any]:
    """A container securityContext: no privilege escalation, the given capabilities dropped, and, with
    ``run_as_user``, a non-root user."""
    context: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": list(drop)}}
    if run_as_user is not None:
        context.update(runAsNonRoot=True, runAsUser=run_as_user, runAsGroup=run_as_user)
    return context
