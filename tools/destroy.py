"""`make destroy`: the stacks of the last `make synth` that CloudFormation can delete, and what stays.

    python tools/destroy.py plan          # the stacks `make destroy` deletes, on one line
    python tools/destroy.py kept          # what stays and how to remove it (nothing when nothing stays)
    python tools/destroy.py kept-stacks   # the stacks it keeps (`make destroy-kept`, once their users are gone)
    python tools/destroy.py removed       # the stacks the last synth dropped (`make destroy-removed`); exit 2: none
    python tools/destroy.py failed TARGET [ARGS]   # after a failed `cdk destroy`: the non-interactive form; exit 1

`make deploy` never deletes a stack: one that the last synth dropped (a backend switched off) stays deployed
until `make destroy-removed` deletes it with the CDK CLI from the synth before (cdk.out.prev), which still
has it (`--exclusively`: the stacks that used it in that synth are not its to delete).

A resource with ``DeletionPolicy: Retain`` (the file system and its security group with
``storage.removal_policy: retain``) outlives its stack, and whatever it uses cannot be deleted while it
exists: the network stack's subnets and VPC hold the file system's interfaces and its group, so deleting
that stack ends in DELETE_FAILED. A stack is kept when a retained resource of a deleted stack imports
from it (and so, in turn, what a kept stack imports from). Read offline from cdk.out, like `make plan`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# Stack display name (what `cdk destroy` takes) -> template, in deploy order (tools/ is this script's sys.path[0]).
from plan import PREVIOUS, removed
from plan import imports as _imports
from plan import templates as stacks


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


# The CDK CLI's options that answer its "Are you sure you want to delete" prompt (aws-cdk 2.1148: destroy's
# --force, and the global --yes); without one and without a terminal it stops with "TTY is not attached".
NO_PROMPT = ("--force", "-f", "--yes", "-y")


def removed_stacks(out: Path) -> tuple[list[str], str]:
    """(the stacks of cdk.out.prev absent from cdk.out, why there are none)."""
    previous = out.with_name(PREVIOUS)
    if not (previous / "manifest.json").is_file():
        return [], f"no {previous}: the synth before the last one is gone, and with it the stacks it had"
    gone = removed(previous, out)
    return gone, "" if gone else f"the last `make synth` dropped no stack of the one before ({previous})"


def failed(target: str, args: list[str], *, terminal: bool) -> int:
    """After `cdk destroy` failed: without a terminal, the CDK CLI could not ask to confirm; say how not to ask."""
    if not terminal and not any(a in NO_PROMPT for a in args):
        print(f"make: the CDK CLI asks to confirm a destroy and there is no terminal to answer: `make {target} "
              "ARGS=--force` destroys without asking", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    out = Path("cdk.out")
    if argv[:1] == ["removed"]:
        gone, why = removed_stacks(out)
        if not gone:
            print(f"make: nothing to destroy: {why}", file=sys.stderr)
            return 2
        print(" ".join(gone))
    elif argv[:1] == ["failed"] and len(argv) > 1:
        return failed(argv[1], argv[2:], terminal=sys.stdout.isatty())
    elif argv[:1] == ["plan"]:
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
