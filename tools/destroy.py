"""`make destroy`: the stacks of the last `make synth` that CloudFormation can delete, and what stays.

    python tools/destroy.py plan          # the stacks `make destroy` deletes, on one line
    python tools/destroy.py kept          # what stays and how to remove it (nothing when nothing stays)
    python tools/destroy.py kept-stacks   # the stacks it keeps (`make destroy-kept`, once their users are gone)

A resource with ``DeletionPolicy: Retain`` (the file system and its security group with
``storage.removal_policy: retain``) outlives its stack, and whatever it uses cannot be deleted while it
exists: the network stack's subnets and VPC hold the file system's interfaces and its group, so deleting
that stack ends in DELETE_FAILED. A stack is kept when a retained resource of a deleted stack imports
from it (and so, in turn, what a kept stack imports from). Read offline from cdk.out, like `make plan`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Stack display name (what `cdk destroy` takes) -> template, in deploy order (tools/ is this script's sys.path[0]).
from plan import templates as stacks


def _imports(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Fn::ImportValue" and isinstance(inner, str):
                yield inner
            else:
                yield from _imports(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _imports(inner)


def retained(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template.get("Resources", {}).items() if r.get("DeletionPolicy") == "Retain"}


def kept_stacks(templates: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Stacks that cannot be deleted -> why (the retained resources that use them)."""
    exporter = {
        output["Export"]["Name"]: name
        for name, template in templates.items()
        for output in template.get("Outputs", {}).values()
        if isinstance(output.get("Export", {}).get("Name"), str)
    }
    kept: dict[str, list[str]] = {}
    todo = [(name, logical, resource) for name, t in templates.items() for logical, resource in retained(t).items()]
    while todo:
        stack, logical, resource = todo.pop()
        for export in _imports(resource.get("Properties", {})):
            target = exporter.get(export)
            if target is None or target == stack:
                continue
            first = target not in kept
            kept.setdefault(target, []).append(f"{stack}/{logical} ({resource['Type']})")
            if first:  # a kept stack keeps everything it imports from, too
                todo += [(target, k, r) for k, r in templates[target].get("Resources", {}).items()]
    return kept


def plan(out: Path) -> list[str]:
    templates = stacks(out)
    kept = kept_stacks(templates)
    return [name for name in templates if name not in kept]


def physical_ids(stack: str) -> dict[str, str]:
    """The stack's deployed resources, logical id -> physical id; empty when AWS cannot be asked (the
    message then names logical ids only)."""
    try:
        import boto3

        pages = boto3.client("cloudformation").get_paginator("list_stack_resources").paginate(StackName=stack)
        return {r["LogicalResourceId"]: r.get("PhysicalResourceId", "") for p in pages for r in p["StackResourceSummaries"]}
    except Exception:  # noqa: BLE001 - no credentials, no stack: the ids are a convenience
        return {}


def kept_message(out: Path, ids=physical_ids) -> str:
    """What stays after `make destroy`, with the physical ids (read before the stacks go)."""
    templates = stacks(out)
    kept = kept_stacks(templates)
    lines = []
    for name, template in templates.items():
        held = retained(template) if name not in kept else {}  # a kept stack is listed whole, below
        found = ids(name) if held else {}
        for logical, resource in held.items():
            where = f" {found[logical]}" if found.get(logical) else ""
            lines.append(f"kept:{where} {name}/{logical} ({resource['Type']}): DeletionPolicy Retain")
    for name, users in kept.items():
        lines.append(f"kept: stack {name}, used by the retained {', '.join(sorted(set(users)))}")
    if kept:
        lines.append(
            "to delete the kept stacks: back up what you need, delete the file system (`aws fsx delete-file-system "
            "--file-system-id fs-...`) and, once it is gone, its security group (`aws ec2 delete-security-group "
            "--group-id sg-...`), ids above, then `make destroy-kept`"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    out = Path("cdk.out")
    if argv[:1] == ["plan"]:
        print(" ".join(plan(out)))
    elif argv[:1] == ["kept-stacks"]:
        print(" ".join(kept_stacks(stacks(out))))
    elif argv[:1] == ["kept"]:
        message = kept_message(out)
        if message:
            print(message)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
