"""An IAM model of a role's identity policies, read from a synthesized template: may the role call an action on a
resource, as IAM decides it (IAM user guide, "Policy evaluation logic" and "IAM JSON policy elements")?

- the policies are the template's ``AWS::IAM::Policy`` resources attached to the role (``Roles``) and the role's
  own inline ``Policies``; an explicit Deny wins, else an Allow whose statement matches, else an implicit deny;
- a statement matches when one of its actions matches (case-insensitive, ``*`` and ``?``), one of its resources
  matches the request's ARN (case-sensitive, ``*`` any run of characters, ``/`` and ``:`` included, ``?`` one
  character), and every condition holds (a key absent from the request's context fails its condition);
- the values are CloudFormation's: ``Ref``, ``Fn::GetAtt``, ``Fn::Join``, ``Fn::Split``, ``Fn::Select`` and
  ``Fn::Sub`` are resolved with what deploy would give each (``refs``: pseudo parameters, the ARNs and names CloudFormation
  generates). A statement whose action does not match is never resolved.

NotAction, NotResource, Principal and the other condition operators are not modelled: the model refuses them
rather than guess. ``Statements`` evaluates statements from elsewhere (an upstream policy, transcribed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com"}


class Unresolved(Exception):
    """A value the model cannot resolve with the refs it was given."""


def resolve(value: Any, refs: Mapping[str, Any]) -> Any:
    """``value`` with CloudFormation's intrinsic functions applied, references taken from ``refs``."""
    if isinstance(value, (str, int)):
        return value
    if isinstance(value, list):
        return [resolve(v, refs) for v in value]
    if isinstance(value, dict) and not (len(value) == 1 and (set(value) == {"Ref"} or next(iter(value)).startswith("Fn::"))):
        return {k: resolve(v, refs) for k, v in value.items()}  # not a function: a condition block, say
    if isinstance(value, dict):
        ((function, argument),) = value.items()
        if function == "Ref":
            if argument in refs:
                return refs[argument]
            if argument in PSEUDO:
                return PSEUDO[argument]
            raise Unresolved(argument)
        if function == "Fn::GetAtt":
            key = ".".join(argument) if isinstance(argument, list) else argument
            if key in refs:
                return refs[key]
            raise Unresolved(key)
        if function == "Fn::Join":
            separator, parts = argument
            return separator.join(resolve(p, refs) for p in parts)
        if function == "Fn::Split":
            separator, text = argument
            return resolve(text, refs).split(separator)
        if function == "Fn::Select":
            index, items = argument
            return resolve(items, refs)[int(resolve(index, refs))]
        if function == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument

            def substitute(match: re.Match[str]) -> str:
                name = match.group(1)
                if name in variables:
                    return str(resolve(variables[name], refs))
                return str(resolve({"Fn::GetAtt": name} if "." in name else {"Ref": name}, refs))

            return re.sub(r"\$\{([^}!]+)\}", substitute, text)
    raise Unresolved(str(value))


def wildcard(pattern: str, value: str, *, case_sensitive: bool = True) -> bool:
    """IAM's match of an Action or Resource element: ``*`` any run of characters, ``?`` exactly one."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case_sensitive else re.IGNORECASE) is not None


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


_OPERATORS = {
    "StringEquals": lambda pattern, value: pattern == value,
    "StringLike": wildcard,
    "ArnEquals": lambda pattern, value: pattern == value,
    "ArnLike": wildcard,
}


def condition_holds(conditions: Mapping[str, Mapping[str, Any]], context: Mapping[str, str]) -> bool:
    for operator, tests in conditions.items():
        if operator not in _OPERATORS:
            raise NotImplementedError(f"condition operator {operator}")
        for key, patterns in tests.items():
            value = context.get(key)
            if value is None or not any(_OPERATORS[operator](p, value) for p in _listed(patterns)):
                return False
    return True


class _Evaluated:
    refs: Mapping[str, Any]

    def statements(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _matches(self, statement: dict[str, Any], action: str, resource: str, context: Mapping[str, str]) -> bool:
        if {"NotAction", "NotResource", "Principal"} & set(statement):
            raise NotImplementedError(f"statement elements {sorted(statement)}")
        if not any(wildcard(a, action, case_sensitive=False) for a in _listed(statement["Action"])):
            return False
        resources = _listed(resolve(statement["Resource"], self.refs))
        if not any(wildcard(r, resource) for r in resources):
            return False
        return condition_holds(resolve(statement.get("Condition", {}), self.refs), context)

    def allows(self, action: str, resource: str, context: Mapping[str, str] | None = None) -> bool:
        """Whether IAM allows the principal ``action`` on ``resource`` (an ARN), with the request's condition keys."""
        context = context or {}
        allowed = False
        for statement in self.statements():
            if self._matches(statement, action, resource, context):
                if statement["Effect"] == "Deny":
                    return False
                allowed = True
        return allowed


@dataclass
class Statements(_Evaluated):
    """The identity policies of a principal given as their statements."""

    listed: list[dict[str, Any]]
    refs: Mapping[str, Any]

    def statements(self) -> list[dict[str, Any]]:
        return self.listed


@dataclass
class RolePolicies(_Evaluated):
    """The identity policies of one role of a template."""

    template: dict[str, Any]
    role: str  # the role's logical id
    refs: Mapping[str, Any]

    def statements(self) -> list[dict[str, Any]]:
        documents = [
            p["Properties"]["PolicyDocument"]
            for p in self.template["Resources"].values()
            if p["Type"] == "AWS::IAM::Policy" and {"Ref": self.role} in p["Properties"].get("Roles", [])
        ]
        role = self.template["Resources"][self.role]["Properties"]
        documents += [p["PolicyDocument"] for p in role.get("Policies", [])]
        return [s for d in documents for s in d["Statement"]]
