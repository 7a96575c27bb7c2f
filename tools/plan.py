"""`make plan`: what `cdk deploy --all` would create, read offline from cdk.out (no AWS call).

Stacks in deploy order with their region and dependencies, then each stack's resources counted by type.
When `make synth` kept the assembly before it (cdk.out.prev), what changed since: resources added,
removed, changed (each changed value, also inside the Kubernetes manifests the EKS stack applies) and
replaced, judged by CloudFormation's own rule: a change to a create-only property of the resource type
(tools/create_only.json, from the resource schemas cfn-lint ships; tests/e2e/test_make_plan.py keeps it in
step). On an account where the stacks already exist `make diff` compares with them (it needs credentials).

A stack of the synth before that this synth no longer has (a backend switched off) is not deleted by
`make deploy`, which deploys the stacks of cdk.out and never deletes one: the plan says it stays, deployed
and billed, whether it blocks the deploy (an export of a kept stack it imports, which this synth drops:
CloudFormation refuses to delete an export in use), and how to delete it (`make destroy-removed`).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STACK = "aws:cloudformation:stack"
PREVIOUS = "cdk.out.prev"  # the assembly before the last `make synth` (tools/synth.py keeps it)
CREATE_ONLY: dict[str, list[str]] = json.loads((Path(__file__).with_name("create_only.json")).read_text())
MAX_CHANGES = 12  # changed values shown per resource


def deploy_order(manifest: dict[str, Any]) -> list[str]:
    """Stack artifacts, each after the stacks it depends on (the manifest's order among equals)."""
    artifacts = manifest.get("artifacts", {})
    stacks = [name for name, a in artifacts.items() if a.get("type") == STACK]
    done: list[str] = []

    def visit(name: str, seen: tuple[str, ...] = ()) -> None:
        if name in done or name in seen:
            return
        for dep in artifacts[name].get("dependencies", []):
            if dep in stacks:
                visit(dep, (*seen, name))
        done.append(name)

    for name in stacks:
        visit(name)
    return done


def plan(out: Path) -> list[str]:
    manifest_path = out / "manifest.json"
    if not manifest_path.is_file():
        raise SystemExit(f"plan: no {manifest_path}: run `make synth` first")
    manifest = json.loads(manifest_path.read_text())
    artifacts = manifest["artifacts"]
    lines: list[str] = []
    total = 0
    for name in deploy_order(manifest):
        artifact = artifacts[name]
        template_file = artifact["properties"]["templateFile"]
        template = json.loads((out / template_file).read_text())
        kinds = Counter(r["Type"] for r in template.get("Resources", {}).values())
        kinds.pop("AWS::CDK::Metadata", None)
        count = sum(kinds.values())
        total += count
        region = artifact.get("environment", "").rsplit("/", 1)[-1]
        deps = [d for d in artifact.get("dependencies", []) if artifacts.get(d, {}).get("type") == STACK]
        after = f", after {', '.join(deps)}" if deps else ""
        lines.append(f"{artifact.get('displayName', name)} ({region}{after}): {count} resources")
        lines += [f"  {n:4d}  {kind}" for kind, n in sorted(kinds.items())]
    # Nested stacks (one per Batch compute group) are templates of their own in the assembly, deployed with
    # their parent: their resources count as much as a stack's.
    nested = nested_templates(out)
    for name, template in nested.items():
        kinds = Counter(r["Type"] for r in template.get("Resources", {}).values())
        kinds.pop("AWS::CDK::Metadata", None)
        total += sum(kinds.values())
        lines.append(f"{name}: {sum(kinds.values())} resources")
        lines += [f"  {n:4d}  {kind}" for kind, n in sorted(kinds.items())]
    stacks = len(deploy_order(manifest))
    lines.append(f"{stacks} stacks ({len(nested)} nested), {total} resources (offline, from {out}; `make diff` "
                 "compares with a deployed account)")
    return lines


NESTED_SUFFIX = ".nested.template.json"


def nested_templates(out: Path) -> dict[str, dict[str, Any]]:
    """Nested stack name (its template file, which CDK names by construct path) -> template."""
    return {f"{path.name.removesuffix(NESTED_SUFFIX)} (nested)": json.loads(path.read_text())
            for path in sorted(out.glob(f"*{NESTED_SUFFIX}"))}


def templates(out: Path) -> dict[str, dict[str, Any]]:
    """Stack display name -> template, in deploy order."""
    manifest = json.loads((out / "manifest.json").read_text())
    artifacts = manifest["artifacts"]
    return {
        artifacts[name].get("displayName", name): json.loads((out / artifacts[name]["properties"]["templateFile"]).read_text())
        for name in deploy_order(manifest)
    }


def regions(out: Path) -> dict[str, str]:
    """Stack display name -> its region (the manifest's environment aws://account/region)."""
    artifacts = json.loads((out / "manifest.json").read_text())["artifacts"]
    return {a.get("displayName", name): a.get("environment", "").rsplit("/", 1)[-1]
            for name, a in artifacts.items() if a.get("type") == STACK}


def imports(value: Any) -> Iterator[str]:
    """The export names a template value imports (Fn::ImportValue of a literal name)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Fn::ImportValue" and isinstance(inner, str):
                yield inner
            else:
                yield from imports(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from imports(inner)


def exports(template: dict[str, Any]) -> set[str]:
    return {o["Export"]["Name"] for o in template.get("Outputs", {}).values()
            if isinstance(o.get("Export", {}).get("Name"), str)}


def removed(previous: Path, current: Path) -> list[str]:
    """The stacks of the synth before that this one no longer has, in the order of the synth before."""
    new = templates(current)
    return [name for name in templates(previous) if name not in new]


def staying(previous: Path, current: Path) -> dict[str, list[str]]:
    """Per stack that this synth dropped: what `make deploy` does to it (nothing), and how to delete it."""
    old, new = templates(previous), templates(current)
    gone = removed(previous, current)
    dropped = set().union(*map(exports, old.values())) - set().union(*map(exports, new.values()))
    lines: dict[str, list[str]] = {}
    for name in gone:
        template = old[name]
        blocking = sorted(set(imports(template.get("Resources", {}))) & dropped)
        exported = exports(template)
        users = sorted(s for s in new if s in old and exported & set(imports(old[s].get("Resources", {}))))
        kept = [f"{k} ({r['Type']})" for k, r in template.get("Resources", {}).items() if r.get("DeletionPolicy") == "Retain"]
        said = [f"{name}: not in this synth: STAYS deployed (if it was), and billed: `make deploy` deploys the stacks "
                "of cdk.out and deletes none"]
        if blocking:
            owners = ", ".join(dict.fromkeys(b.split(":", 1)[0] for b in blocking))
            said.append(f"  while it is deployed, `make deploy` fails: this synth drops {len(blocking)} export(s) of "
                        f"{owners} that it imports (CloudFormation refuses to delete an export in use)")
        if users:
            said.append(f"  the deployed {', '.join(users)} import(s) its exports until `make deploy` updates them")
        when = {(True, False): ", before `make deploy`", (False, True): ", after `make deploy`",
                (True, True): " (each order meets an import above)", (False, False): ""}[(bool(blocking), bool(users))]
        said.append(f"  to delete it{when}: `make destroy-removed` (the stacks the last synth dropped, from "
                    f"cdk.out.prev, which the next `make synth` replaces), or `aws cloudformation delete-stack "
                    f"--stack-name {name} --region {regions(previous).get(name) or 'REGION'}`")
        if kept:
            said.append(f"  what it retains stays after it (DeletionPolicy Retain): {', '.join(kept)}")
        said.append("  to keep it instead: `make synth` with what made it (its backend in backends; storage.enabled "
                    "for the storage stack)")
        lines[name] = said
    return lines


def _token(value: Any) -> str:
    """A short, quote-free stand-in for an unresolved CloudFormation value inside a joined string."""
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return f"<Ref {arg}>"
        if fn == "Fn::GetAtt":
            return f"<GetAtt {'.'.join(arg) if isinstance(arg, list) else arg}>"
        if fn == "Fn::ImportValue":
            return f"<Import {arg if isinstance(arg, str) else 'value'}>"
    return "<token>"


def _joined(value: Any) -> Any:
    """A Fn::Join of strings and tokens (how CDK writes a Kubernetes manifest with deploy-time values) as
    one string, tokens shown as <Ref X>: so that the manifest inside can be opened and compared."""
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        if isinstance(separator, str) and isinstance(parts, list):
            return separator.join(p if isinstance(p, str) else _token(p) for p in parts)
    return value


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Path -> scalar of a JSON value; a string holding JSON (a Kubernetes manifest) is opened too."""
    value = _joined(value)
    if isinstance(value, str) and value[:1] in "[{":
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, dict):
        found: dict[str, Any] = {}
        for key, item in value.items():
            found.update(leaves(item, f"{path}.{key}" if path else key))
        return found or {path: {}}
    if isinstance(value, list):
        found = {f"{path}[#]": len(value)}  # the length: a list that grows or shrinks is one line of the plan
        for index, item in enumerate(value):
            found.update(leaves(item, f"{path}[{index}]"))
        return found or {path: []}
    return {path: value}


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 3] + "..."


def _create_only(kind: str, changed: list[str]) -> list[str]:
    """The create-only properties of a resource type (schema paths such as LustreConfiguration/DeploymentType)
    that a changed value lies under."""
    paths = {re.sub(r"\[[0-9#]+\]", "", key).replace(".", "/") for key in changed}
    return sorted({p for p in CREATE_ONLY.get(kind, []) for path in paths if path == p or path.startswith(p + "/")})


def _summarized(changed: list[str], a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Changed values first, then lists that grew or shrank (as one line: 8 items -> 16 items, not a line
    per element), then values added or removed elsewhere."""
    resized = [k[: -len("[#]")] for k in changed if k.endswith("[#]")]

    def inside_resized(key: str) -> bool:
        return any(key.startswith(f"{r}[") for r in resized) and (key not in a or key not in b)

    values = [f"{k}: {_short(a[k])} -> {_short(b[k])}" for k in changed
              if k in a and k in b and not k.endswith("[#]")]
    sizes = [f"{k[:-3]}: {a.get(k, 0)} items -> {b.get(k, 0)} items" for k in changed if k.endswith("[#]")]
    other = [f"{k}: {_short(a.get(k, '(none)'))} -> {_short(b.get(k, '(none)'))}" for k in changed
             if not k.endswith("[#]") and not (k in a and k in b) and not inside_resized(k)]
    return values + sizes + other


def changes(previous: Path, current: Path) -> list[str]:
    """What changed between two assemblies, stack by stack."""
    old = {**templates(previous), **nested_templates(previous)}
    new = {**templates(current), **nested_templates(current)}
    stays = staying(previous, current)
    lines: list[str] = []
    for stack in [*new, *(s for s in old if s not in new)]:
        if stack not in new:
            # A nested stack its parent no longer names is deleted with the parent's update (CloudFormation).
            lines += stays.get(stack, [f"{stack}: deleted with its parent's update"])
            continue
        if stack not in old:
            lines.append(f"{stack}: new stack")
            continue
        before, after = old[stack].get("Resources", {}), new[stack].get("Resources", {})
        stack_lines: list[str] = []
        for logical in after:
            if logical not in before:
                stack_lines.append(f"  + {logical} ({after[logical]['Type']})")
        for logical in before:
            if logical not in after:
                stack_lines.append(f"  - {logical} ({before[logical]['Type']})")
        for logical, resource in after.items():
            if logical not in before or resource["Type"] == "AWS::CDK::Metadata":
                continue
            a, b = leaves(before[logical].get("Properties", {})), leaves(resource.get("Properties", {}))
            changed = sorted(k for k in a.keys() | b.keys() if a.get(k, "(none)") != b.get(k, "(none)"))
            if not changed:
                continue
            create_only = _create_only(resource["Type"], changed)
            mark = "!" if create_only else "~"
            why = f": REPLACED (create-only {', '.join(create_only)})" if create_only else ""
            stack_lines.append(f"  {mark} {logical} ({resource['Type']}){why}")
            shown = _summarized(changed, a, b)
            for line in shown[:MAX_CHANGES]:
                stack_lines.append(f"      {line}")
            if len(shown) > MAX_CHANGES:
                stack_lines.append(f"      ... and {len(shown) - MAX_CHANGES} more")
        if stack_lines:
            lines.append(f"{stack}:")
            lines += stack_lines
    return lines or ["no change"]


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "cdk.out")
    print("\n".join(plan(out)))
    previous = out.with_name(PREVIOUS)
    if (previous / "manifest.json").is_file():
        print(f"\nChanges since the synth before ({previous}):")
        print("\n".join(changes(previous, out)))
