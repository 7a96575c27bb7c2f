"""`make plan`: what `cdk deploy --all` would create, read offline from cdk.out (no AWS call).

Stacks in deploy order with their region and dependencies, then each stack's resources counted by type.
On an account where the stacks already exist a deploy changes less: `make diff` compares with them
(it needs credentials).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

STACK = "aws:cloudformation:stack"


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
    stacks = len(deploy_order(manifest))
    lines.append(f"{stacks} stacks, {total} resources (offline, from {out}; `make diff` compares with a deployed account)")
    return lines


if __name__ == "__main__":
    print("\n".join(plan(Path(sys.argv[1] if len(sys.argv) > 1 else "cdk.out"))))
