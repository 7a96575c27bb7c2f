"""The update policy of every setting that differs between two ParallelCluster configurations,
as `pcluster update-cluster` computes it, with ParallelCluster's own code.

Runs inside the aws-parallelcluster virtual environment (.venv-pcluster), as a subprocess:

    .venv-pcluster/bin/python tools/pcluster_update_policies.py < request.json

Request: a JSON list of {"name": cluster name, "base": configuration, "target": configuration}.
Answer: a JSON list, one list per request item of {"path", "policy", "old", "new", "running",
"stopped"} per change. The policies come from the `update_policy` metadata of
pcluster.schemas.cluster_schema, compared the way ConfigPatch does (lists by their update key);
"running" and "stopped" are ParallelCluster's check of the change (SUCCEEDED, ACTION NEEDED, FAILED)
with compute nodes running, as during a training job, and with the compute fleet stopped. The one
fact those checks ask AWS for, whether compute nodes run, is what we answer for them.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

from pcluster.config.config_patch import ConfigPatch  # noqa: E402


def _check(change, patch) -> str:  # noqa: ANN001
    try:
        result, _, _, _ = change.update_policy.check(change, patch)
    except Exception as err:  # noqa: BLE001 - a policy that needs more than we can answer offline
        return f"UNKNOWN ({type(err).__name__}: {err})"
    return result.value


def changes(name: str, base: dict, target: dict) -> list[dict]:
    checked = {}
    for running in (True, False):
        cluster = SimpleNamespace(name=name, stack_name=name, has_running_capacity=lambda running=running: running)
        patch = ConfigPatch(cluster, base, target)
        checked[running] = [_check(change, patch) for change in patch.changes]
    return [
        {
            "path": ".".join([*change.path, change.key]),
            "policy": change.update_policy.name,
            "old": change.old_value,
            "new": change.new_value,
            "running": checked[True][i],
            "stopped": checked[False][i],
        }
        for i, change in enumerate(patch.changes)
    ]


def main() -> None:
    requests = json.load(sys.stdin)
    json.dump([changes(r["name"], r["base"], r["target"]) for r in requests], sys.stdout, default=str)


if __name__ == "__main__":
    main()
