"""Resume: a node dies mid-run, the scheduler restarts the job, and training continues from the newest
checkpoint on shared storage (/fsx/checkpoints/<job>), not from epoch 0.

The jobs are the deployed artefacts the launch rehearsal runs (tests/e2e/test_rehearsal.py), with the same
substitutions (tests/support/rehearsal.py). Only the training length changes (more epochs and samples), so that
the kill lands mid-run. The scheduler's restart is modelled by running the same job again with what the
scheduler keeps across it: the Volcano job's name (RestartJob), the Batch job id (a retry), the Slurm job
id (a requeue). That each scheduler does restart is asserted on the artefact itself.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_rehearsal import app, config, dist, run_batch_job, run_slurm_script, run_volcano_job  # noqa: F401
from tests.support.helpers import group_resources
from tests.support.rehearsal import EXAMPLE_DIR, Stage, assert_trained, batch_retry_action
from trainium_cdk.app.parallelcluster.sbatch import render_sbatch
from trainium_cdk.runtime.launcher import PEER_LOST_EXIT_CODE

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e

EPOCHS = 12
LONGER = ["--epochs", str(EPOCHS)]


def _checkpoint_after(directory: Path, epoch: int):
    return lambda: (directory / f"epoch-{epoch:05d}.pt").exists() or (directory / f"epoch-{epoch + 1:05d}.pt").exists()


def _resumed(results) -> int:
    """The epoch the restarted job resumed at (rank 0's report)."""
    found = [
        json.loads(line[line.index("{"):])["next_epoch"]
        for r in results
        for line in r.output.splitlines()
        if '"resumed_from"' in line
    ]
    assert found, "the restarted job did not resume from a checkpoint:\n" + "\n".join(r.output[-2000:] for r in results)
    return min(found)


def _kill_then_restart(stage: Stage, run, checkpoints: Path) -> int:
    first = run(kill=(1, _checkpoint_after(checkpoints, 1)))
    assert any(r.code != 0 for r in first), "the kill landed after the job finished: make it longer"
    assert not any('"loss_per_epoch"' in r.output for r in first)
    second = run()
    history = assert_trained(second)
    assert len(history) == EPOCHS
    resumed = _resumed(second)
    assert resumed >= 2, resumed
    # The second attempt trained only the epochs after the checkpoint.
    trained_again = sum('"checkpoint"' in line for r in second for line in r.output.splitlines())
    assert trained_again == EPOCHS - resumed
    return resumed


def test_volcano_job_restarts_and_resumes_after_a_node_dies(stage, dist):
    (job,) = dist["job-mlp-distributed.k8s.yaml"]
    spec = job["spec"]
    # Volcano restarts the whole job when a pod fails or is evicted (a node that dies evicts its pods).
    assert {p["event"]: p["action"] for p in spec["policies"]} == {"PodFailed": "RestartJob", "PodEvicted": "RestartJob"}
    assert spec["maxRetry"] >= 1
    job = copy.deepcopy(job)
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        container["command"] = [*container["command"], *LONGER]
        assert {"name": "TRN_JOB_NAME", "value": "mlp-distributed"} in container["env"]
    checkpoints = stage.fsx / "checkpoints" / "mlp-distributed"
    _kill_then_restart(stage, lambda **kw: run_volcano_job(stage, job, **kw), checkpoints)


def test_batch_job_retries_host_failures_and_resumes(stage, app):
    (definition,) = group_resources(app.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
    strategy = definition["Properties"]["RetryStrategy"]
    assert strategy["Attempts"] >= 2
    conditions = strategy["EvaluateOnExit"]
    assert conditions[0] == {"Action": "RETRY", "OnStatusReason": "Host EC2*"}
    for platform in ("CannotPullContainerError: pull access denied", "CannotStartContainerError: x"):
        assert batch_retry_action(strategy, exit_code=137, reason=platform) == "RETRY"
    assert batch_retry_action(strategy, exit_code=1, status_reason="Host EC2 (instance i-0a) terminated.") == "RETRY"
    # Last: everything else is the training program's own error, which a retry would only repeat.
    assert conditions[-1] == {"Action": "EXIT", "OnReason": "*"}
    assert len(conditions) <= 5  # the Batch API's limit
    definition = copy.deepcopy(definition)
    container = definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    container["Command"] = [*container["Command"], *LONGER]
    (stage.fsx / "code").mkdir()
    shutil.copy(EXAMPLE_DIR / "train.py", stage.fsx / "code" / "train.py")
    # The rehearsal's Batch job id is "rehearsal#<node>": a retry keeps the job id.
    checkpoints = stage.fsx / "checkpoints" / "rehearsal"
    attempts = iter(range(1, 10))
    _kill_then_restart(stage, lambda **kw: run_batch_job(stage, definition, 2, attempt=next(attempts), **kw),
                       checkpoints)


def _longer_batch_definition(app, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    (definition,) = group_resources(app.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
    definition = copy.deepcopy(definition)
    container = definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    container["Command"] = [*container["Command"], *LONGER, *extra]
    return definition, definition["Properties"]["RetryStrategy"]


def test_a_child_nodes_host_loss_ends_in_a_retry_that_resumes(stage, app):
    """Batch retries a multi-node job for its main node's host, not a child's: the launcher on the main node
    sees the child's beat stop without an exit and ends with PEER_LOST_EXIT_CODE, which the job definition's
    own retry strategy retries (the old definition ended it as the program's error: EXIT)."""
    definition, strategy = _longer_batch_definition(app)
    (stage.fsx / "code").mkdir()
    shutil.copy(EXAMPLE_DIR / "train.py", stage.fsx / "code" / "train.py")
    checkpoints = stage.fsx / "checkpoints" / "rehearsal"
    first = run_batch_job(stage, definition, 2, attempt=1, kill=(1, _checkpoint_after(checkpoints, 1)))
    main = first[0]
    assert main.code == PEER_LOST_EXIT_CODE, main.output[-3000:]
    assert "node(s) 1 stopped without an exit: a host is gone" in main.output
    assert batch_retry_action(strategy, exit_code=main.code) == "RETRY"
    second = run_batch_job(stage, definition, 2, attempt=2)
    assert len(assert_trained(second)) == EPOCHS
    assert _resumed(second) >= 2


def test_a_child_that_starts_late_is_not_lost(stage, app):
    """Batch starts a child node only once the main node runs, with no timing guarantee, and a fresh host pulls
    a multi-GB image first: a child whose first beat comes late has not lost its host. (The launcher once counted
    every child from the main node's start and ended such a job with PEER_LOST_EXIT_CODE, using up a retry.)"""
    definition, _ = _longer_batch_definition(app)
    container = definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    container["Environment"].append({"Name": "TRN_HEARTBEAT_S", "Value": "1"})
    (stage.fsx / "code").mkdir()
    shutil.copy(EXAMPLE_DIR / "train.py", stage.fsx / "code" / "train.py")
    # 10 intervals is when the old launcher gave up on a child it had not heard from yet.
    results = run_batch_job(stage, definition, 2, start_after={1: 14})
    main = results[0]
    assert main.code == 0, main.output[-3000:]
    assert "a host is gone" not in main.output
    assert len(assert_trained(results)) == EPOCHS


def test_a_child_that_never_starts_ends_in_a_retry(stage, app):
    """A child whose host never comes up never beats: after TRN_PEER_START_S from the main node's start, that is
    a host lost, which the job definition retries, not the program's error."""
    definition, strategy = _longer_batch_definition(app)
    container = definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    container["Environment"] += [{"Name": "TRN_HEARTBEAT_S", "Value": "1"}, {"Name": "TRN_PEER_START_S", "Value": "8"}]
    (stage.fsx / "code").mkdir()
    shutil.copy(EXAMPLE_DIR / "train.py", stage.fsx / "code" / "train.py")
    results = run_batch_job(stage, definition, 2, start_after={1: 10_000})
    main = results[0]
    assert main.code == PEER_LOST_EXIT_CODE, main.output[-3000:]
    assert "node(s) 1 never started" in main.output
    assert batch_retry_action(strategy, exit_code=main.code) == "RETRY"


def test_the_programs_own_error_on_every_node_is_not_retried(stage, app):
    definition, strategy = _longer_batch_definition(app, "--no-such-option")
    (stage.fsx / "code").mkdir()
    shutil.copy(EXAMPLE_DIR / "train.py", stage.fsx / "code" / "train.py")
    results = run_batch_job(stage, definition, 2)
    main = results[0]
    assert main.code not in (0, PEER_LOST_EXIT_CODE), main.output[-3000:]
    assert "a host is gone" not in main.output
    assert batch_retry_action(strategy, exit_code=main.code) == "EXIT"


def test_slurm_requeue_resumes_under_the_same_job_id(stage, config):
    script = render_sbatch(config, config.compute_groups[0])
    assert "#SBATCH --requeue" in script.splitlines()
    (stage.fsx / "code").mkdir()
    shutil.copy(EXAMPLE_DIR / "train.py", stage.fsx / "code" / "train.py")
    args = ["/fsx/code/train.py", "--samples", "256"]
    first = run_slurm_script(stage, script, 2, *args, "--epochs", "2")
    assert first[0].code == 0, first[0].output[-3000:]
    # Slurm keeps the job id (42 in the rehearsal) when it requeues a job: the same directory (beside the launcher's
    # hidden compile-cache summaries).
    found = sorted(p.name for p in (stage.fsx / "checkpoints" / "42").iterdir())
    assert found == [".compile_cache", "epoch-00000.pt", "epoch-00001.pt"]
    second = run_slurm_script(stage, script, 2, *args, "--epochs", "4")
    assert second[0].code == 0, second[0].output[-3000:]
    assert _resumed(second) == 2


def test_without_shared_storage_no_checkpoint_directory_is_set(config):
    from trainium_cdk.runtime.jobs import JobSpec

    job = JobSpec(name="x", instance=config.spec(config.compute_groups[0]), command=["t.py"], image="i", shared_storage=False)
    assert "TRN_CHECKPOINT_ROOT" not in job.environment()
    shared: dict[str, Any] = JobSpec(name="x", instance=job.instance, command=["t.py"], image="i").environment()
    assert shared["TRN_CHECKPOINT_ROOT"] == "/fsx/checkpoints"
