"""A ValidatingAdmissionPolicy evaluated as the API server evaluates it, by a real CEL engine (cel-python), for what
this project's policies use: the binding's namespaceSelector, matchConstraints' resourceRules (operations,
resources and subresources), matchConditions, then every validation's expression, under failurePolicy.

The variables are bound as Kubernetes binds them (Kubernetes docs, "Validating Admission Policy", "Validation
expression": ``object`` is null on DELETE and ``oldObject`` null on CREATE; ``request`` is the AdmissionRequest
(admission.k8s.io/v1) of the call). The API server hands CEL the objects as their JSON would look
(k8s.io/apiserver/pkg/cel/common/values.go, UnstructuredReflectToVal: "mimics how the value would look if it were
converted to an unstructured map using JSON serialization"): a field the JSON leaves out (``omitempty``: an empty
subResource, a request without a name, a user without extra) is absent, reading it is an error ("no such key") and
``has()`` is how an expression tests it. So are the objects here: what a test passes is the object's JSON.

An expression that errs is a failure, and under failurePolicy Fail refuses the request (the docs, "Failure
Policy"); a matchCondition that errs does too. A Verdict says which expressions refused, and which of them erred, so
that a test can tell a refusal the policy means from one an expression's error causes.

cel-python implements the CEL standard definitions these policies use (has, in, all, exists, ==, &&, ||, !) with
CEL's error-absorbing logical operators; none of the Kubernetes CEL libraries (quantity, url, ip, optional types)
is used by these policies, and none is implemented here: an expression that used one fails to compile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import celpy

from trainium_cdk.charts.admission import NAMESPACE_NAME_LABEL

Json = dict[str, Any]
_ENV = celpy.Environment()


@dataclass(frozen=True)
class Request:
    """One call to the API server, as a user or an attacker sends it: ``object`` the object after it (CREATE, UPDATE:
    what the API server would store, after defaulting and mutating admission), ``old_object`` the one before
    (UPDATE, DELETE). ``extra``: the authenticated user's extra (a bound service-account token carries
    ``authentication.kubernetes.io/node-name``, Kubernetes 1.32+)."""

    operation: str
    resource: str
    user: str
    name: str = ""
    namespace: str = ""
    sub_resource: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict)
    object: Json | None = None
    old_object: Json | None = None
    group: str = ""
    version: str = "v1"

    def admission_request(self) -> Json:
        """The AdmissionRequest's JSON (k8s.io/api/admission/v1 types.go): empty omitempty fields left out."""
        user: Json = {"username": self.user}
        if self.extra:
            user["extra"] = self.extra
        request: Json = {
            "operation": self.operation, "userInfo": user,
            "resource": {"group": self.group, "version": self.version, "resource": self.resource},
        }
        for key, value in (("name", self.name), ("namespace", self.namespace), ("subResource", self.sub_resource)):
            if value:
                request[key] = value
        return request


@dataclass(frozen=True)
class Verdict:
    """``applies``: the binding and policy match the request (else it is admitted untouched). ``refused``: the
    messages of the validations that refused it (empty: admitted); ``errors``: of those, the ones whose expression
    erred (or the matchCondition that did)."""

    applies: bool
    refused: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.refused


def _cel(value: Any) -> Any:
    return celpy.json_to_cel(value)


def evaluate_expression(expression: str, request: Request) -> Any:
    """``expression`` over the request's variables; raises celpy.CELEvalError where CEL would produce an error."""
    program = _ENV.program(_ENV.compile(expression))
    return program.evaluate({
        "request": _cel(request.admission_request()), "object": _cel(request.object),
        "oldObject": _cel(request.old_object),
    })


def _rule_matches(rule: Json, request: Request) -> bool:
    """A resourceRule (admissionregistration.k8s.io/v1 Rule): 'pods' is the resource alone, 'pods/status' its
    subresource, '*' every resource but no subresource, '*/*' everything."""
    wanted = f"{request.resource}/{request.sub_resource}" if request.sub_resource else request.resource
    resources = rule.get("resources", [])
    resource_ok = wanted in resources or "*/*" in resources or (not request.sub_resource and "*" in resources) or (
        bool(request.sub_resource) and f"{request.resource}/*" in resources)
    operations = rule.get("operations", [])
    return (resource_ok and (request.operation in operations or "*" in operations)
            and any(g in ("*", request.group) for g in rule.get("apiGroups", []))
            and any(v in ("*", request.version) for v in rule.get("apiVersions", [])))


def _selected(binding: Json | None, request: Request) -> bool:
    """The binding's matchResources.namespaceSelector (matchLabels only, what this project's bindings use) against
    the request's namespace, labelled by the API server with its name; a cluster-scoped object has no namespace."""
    selector = ((binding or {}).get("spec", {}).get("matchResources") or {}).get("namespaceSelector")
    if not selector:
        return True
    unknown = set(selector) - {"matchLabels"}
    assert not unknown, f"not modelled: namespaceSelector {unknown}"
    labels = {NAMESPACE_NAME_LABEL: request.namespace} if request.namespace else {}
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def evaluate(policy: Json, request: Request, binding: Json | None = None) -> Verdict:
    """The verdict of ``policy`` (a ValidatingAdmissionPolicy object, as the chart emits it) on ``request``."""
    assert policy["kind"] == "ValidatingAdmissionPolicy", policy["kind"]
    spec = policy["spec"]
    if binding is not None:
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"], "only Deny is modelled"
    fail = spec.get("failurePolicy", "Fail") == "Fail"
    unknown = set(spec) - {"failurePolicy", "matchConstraints", "matchConditions", "validations"}
    assert not unknown, f"not modelled: {unknown}"
    constraints = spec["matchConstraints"]
    assert set(constraints) == {"resourceRules"}, f"not modelled: {set(constraints) - {'resourceRules'}}"
    if not _selected(binding, request) or not any(_rule_matches(r, request) for r in constraints["resourceRules"]):
        return Verdict(applies=False)
    for condition in spec.get("matchConditions", []):
        try:
            if not evaluate_expression(condition["expression"], request):
                return Verdict(applies=False)
        except celpy.CELEvalError as error:
            if not fail:
                return Verdict(applies=False)
            message = f"matchCondition {condition['name']}: {error}"
            return Verdict(applies=True, refused=(message,), errors=(message,))
    refused, errors = [], []
    for validation in spec["validations"]:
        try:
            result = evaluate_expression(validation["expression"], request)
        except celpy.CELEvalError as error:
            if fail:
                refused.append(validation["message"])
                errors.append(f"{validation['message']}: {error}")
            continue
        assert isinstance(result, celpy.celtypes.BoolType), (validation["expression"], result)
        if not result:
            refused.append(validation["message"])
    return Verdict(applies=True, refused=tuple(refused), errors=tuple(errors))
