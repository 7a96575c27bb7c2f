"""A team's data in the rehearsal (issue 49, "Data in the rehearsal"): `trn rehearse --data LOCAL_DIR=/fsx/PATH` seeds
the folder that stands for /fsx, and `trn sync --rehearsal` puts a folder where `trn sync` would make it appear on
every node. The job reads its shards at the /fsx path it is given on the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.cli_support import assert_one_clean_line, run_cli

pytestmark = pytest.mark.e2e

READS_ITS_SHARDS = '''\
import argparse, json, os, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
args = parser.parse_args()
rows = [json.loads(line) for p in sorted(pathlib.Path(args.data).glob("*.jsonl")) for line in p.read_text().splitlines()]
if os.environ["RANK"] == "0":
    print("ROWS", len(rows), flush=True)
'''
CONFIG = {"region": "us-west-2", "backends": ["batch", "eks"], "storage": {"data_repository": {}},
          "compute_groups": [{"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2}]}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(READS_ITS_SHARDS)
    (tmp_path / "data").mkdir()
    for shard in range(3):
        (tmp_path / "data" / f"part-{shard}.jsonl").write_text("".join(json.dumps({"i": i}) + "\n" for i in range(5)))
    (tmp_path / "trn.yaml").write_text(yaml.safe_dump(CONFIG))
    return tmp_path


def test_data_seeded_with_data_is_read_at_its_fsx_path(project):
    argv = ("rehearse", "--config", "trn.yaml", "--backend", "batch", "--data", "data=/fsx/datasets/mine", "--",
            "train.py", "--data", "/fsx/datasets/mine")
    first = run_cli(*argv)
    assert first.code == 0, first.out[-3000:] + first.err
    assert "ROWS 15" in first.out
    assert "data -> /fsx/datasets/mine (.trn-rehearse/fsx/datasets/mine): 3 copied, 0 unchanged" in first.err
    # Again: nothing copied twice; a changed shard is.
    (project / "data" / "part-1.jsonl").write_text(json.dumps({"i": 0}) + "\n")
    second = run_cli(*argv)
    assert second.code == 0 and "ROWS 11" in second.out
    assert ": 1 copied, 2 unchanged" in second.err


def test_trn_sync_rehearsal_puts_it_where_the_nodes_see_it(project):
    synced = run_cli("sync", "data", "--to", "datasets/mine", "--rehearsal", "--config", "trn.yaml")
    assert synced.code == 0, synced.err
    assert synced.out == "/fsx/s3/datasets/mine\n"  # what `trn sync` prints: the path on every node
    assert sorted(p.name for p in (project / ".trn-rehearse/fsx/s3/datasets/mine").iterdir()) == [
        "part-0.jsonl", "part-1.jsonl", "part-2.jsonl"]
    run = run_cli("rehearse", "--config", "trn.yaml", "--backend", "eks", "--", "train.py", "--data",
                  synced.out.strip())
    assert run.code == 0, run.out[-3000:]
    assert "ROWS 15" in run.out


@pytest.mark.parametrize("value, words", [
    ("data", "LOCAL_DIR=/fsx/PATH"), ("nosuch=/fsx/x", "LOCAL_DIR=/fsx/PATH"),
    ("data=/tmp/x", "a path under /fsx/"), ("data=/fsx/../etc", "a path under /fsx/"),
])
def test_a_data_flag_that_cannot_work_is_one_line(project, value, words):
    assert_one_clean_line(run_cli("rehearse", "--config", "trn.yaml", "--data", value, "--", "train.py"),
                          "--data", words)
