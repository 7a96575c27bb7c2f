"""A failing rank ends the job, as each backend ends it, and the rehearsal says which (issue 49, "Failures end runs");
and what a job is given arrives as written (`$` included) on every backend.

A team's script whose rank 3 exits 3 runs through `trn rehearse` as 2 nodes x 2 processes on eks (Volcano: a failed
pod ends the job, its PodFailed policy), batch (the main node ends it: the launcher reads the peers' exit codes
from the checkpoint folder) and parallelcluster (srun --kill-on-bad-exit). It fails before the process group forms,
the case where the other ranks would otherwise wait in their rendezvous until its timeout (30 minutes): the run
must end in seconds, every node in the summary, and the failing rank's own exit code in it (torchrun exits 1).
A run cut by the time limit says so, for every node.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from tests.support.cli_support import run_cli

pytestmark = pytest.mark.e2e

FAILS_BEFORE_THE_GROUP = '''\
import os, sys
if os.environ["RANK"] == "3":
    print("rank 3: no data shard for me", flush=True)
    sys.exit(3)
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
'''
# Every backend of the xla track, 2 nodes of trn1.32xlarge (the rehearsal gives each 2 processes).
CONFIG = {"region": "us-west-2", "backends": ["eks", "batch", "parallelcluster"],
          "compute_groups": [{"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2}]}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(FAILS_BEFORE_THE_GROUP)
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(600)\n")
    (tmp_path / "trn.yaml").write_text(yaml.safe_dump(CONFIG))
    return tmp_path


def _summary(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith("rehearsed ")]
    return line


@pytest.mark.parametrize("backend", ["eks", "batch", "parallelcluster"])
def test_a_rank_that_exits_3_ends_the_job_in_seconds_and_is_named(project, backend):
    started = time.monotonic()
    result = run_cli("rehearse", "--config", "trn.yaml", "--backend", backend, "--timeout", "120", "--", "train.py")
    took = time.monotonic() - started
    assert result.code == 1, result.out[-3000:]
    summary = _summary(result.out)
    assert took < 40, summary  # the time limit is 120 s; the rendezvous would wait 30 minutes
    assert "stopped by the time limit" not in summary
    assert re.search(r"node 1 exit 1 \(rank 3 exited 3\)", summary), summary
    assert re.search(r"node 0 (exit \d+|stopped by (node 1's failure|srun --kill-on-bad-exit \(node 1's failure\)))",
                     summary), summary
    # The failing rank's own words, on the lines above the summary.
    assert "rank 3: no data shard for me" in result.out


@pytest.mark.parametrize("backend", ["eks", "parallelcluster"])
def test_a_run_cut_by_the_time_limit_says_so_for_every_node(project, backend):
    result = run_cli("rehearse", "--config", "trn.yaml", "--backend", backend, "--timeout", "5", "--", "slow.py")
    assert result.code == 1
    summary = _summary(result.out)
    assert summary.endswith(": node 0 stopped by the time limit (5 s, --timeout), node 1 stopped by the time limit "
                            "(5 s, --timeout)"), summary


@pytest.mark.parametrize("backend", ["eks", "batch", "parallelcluster"])
def test_dollar_signs_in_args_and_env_arrive_as_written(project, backend):
    """Kubernetes expands $(VAR) and $$ in a container's command and env; the EKS manifest writes every $ as $$ and the
    rehearsal applies Kubernetes' expansion, so this runs what the kubelet would. Every backend passes them as written."""
    (project / "show.py").write_text(
        "import json, os, sys\n"
        "if os.environ['RANK'] == '0':\n"
        "    print('SEEN ' + json.dumps({'argv': sys.argv[1:], 'note': os.environ['NOTE']}), flush=True)\n")
    result = run_cli("rehearse", "--config", "trn.yaml", "--backend", backend, "--env", "NOTE=$(HOSTNAME) $$5",
                     "--", "show.py", "--tag", "$(HOSTNAME)", "$$", "$(date)")
    assert result.code == 0, result.out[-3000:]
    (seen,) = [line.split("SEEN ", 1)[1] for line in result.out.splitlines() if "SEEN {" in line]
    import json

    # torchrun itself turns an argument's $$ into $ (its ${local_rank} macro: string.Template.safe_substitute,
    # torch/distributed/elastic/utils/api.py), on every backend alike; the environment it leaves alone.
    assert json.loads(seen) == {"argv": ["--tag", "$(HOSTNAME)", "$", "$(date)"], "note": "$(HOSTNAME) $$5"}
