"""The app's stateful resources keep the logical ids they were deployed with, release to release (issue 48).

A new logical id is a new resource to CloudFormation: the old one deleted (or orphaned, when retained) and an empty
one created. tests/data/stateful-logical-ids.json holds each variant's stateful resources (the types of
tests/app/test_day2.py's REPLACED_BY: file systems, their associations, buckets, repositories, keys, the cluster, the
VPC, subnets, security groups, the Slurm cluster) by stack role, as main synthesized them when the library stopped
pinning ids itself (the app's stacks pin them now). Each must still be there, of the same type.

After a deliberate change (a resource added is not one: only the recorded ids are checked), record again:
``.venv/bin/python -m tests.app.test_logical_ids --write``, and say in the CHANGELOG what it replaces.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from tests.app.test_day2 import REPLACED_BY
from tests.support import paths
from tests.support.apps import VARIANTS, synthesized

RECORD = paths.DATA / "stateful-logical-ids.json"


def stateful_ids(name: str) -> dict[str, dict[str, str]]:
    """{stack role: {logical id: type}} of the stateful resources of variant ``name``."""
    result = synthesized(name)
    roles = ["network", *(["storage"] if result.stacks.storage else []), *result.stacks.backends]
    return {role: {logical_id: resource["Type"]
                   for logical_id, resource in sorted(result.template_with_nested(role)["Resources"].items())
                   if resource["Type"] in REPLACED_BY}
            for role in roles}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_recorded_stateful_resource_keeps_its_logical_id(name):
    recorded = json.loads(RECORD.read_text())["variants"][name]
    now = stateful_ids(name)
    gone = [f"{role}/{logical_id} ({kind})" for role, ids in recorded.items() for logical_id, kind in ids.items()
            if now.get(role, {}).get(logical_id) != kind]
    assert gone == []
    assert recorded["storage"]  # the file system and its group, at least: the record is not empty


def _write() -> None:
    record = {"source": "main's synth of tests/support/apps.py VARIANTS (python -m tests.app.test_logical_ids --write)",
              "variants": {name: stateful_ids(name) for name in sorted(VARIANTS)}}
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORD}: {sum(len(ids) for v in record['variants'].values() for ids in v.values())} ids")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.app.test_logical_ids --write")
    _write()
