"""Your own job, run: a script written as a user writes one (not an example), through `trn rehearse` on every
backend and through `trn submit/status/logs/jobs/cancel` against stand-ins that run it.

Every run asserts, on every rank, that the command's arguments and the `--env` given arrived and that an
all-reduce across all ranks completed (the sum of 1..world on each). The Slurm head node and the development
instance are tests/support/ssm_host.py's (SSM Run Command runs the scripts `trn` sends there); the EKS API server is
tests/support/fake_kube.py's; the jobs run through the launch rehearsal (trainium_cdk.rehearsal), whose substitutions
are listed there.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli_support import client_error, run_cli
from tests.support.rehearsal import Stage
from tests.support.ssm_host import Host, serve_run_command
from tests.unit.jobs.test_own_job import config  # noqa: F401 (the fixture: the default config with every backend)
from trainium_cdk.app.parallelcluster.sbatch import head_node_files

pytestmark = pytest.mark.e2e

# A user's training script: its own arguments, its own variable, a collective over every rank.
USER_SCRIPT = '''\
import argparse, json, os
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--tag", default="")
args = parser.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
print("REPORT " + json.dumps({"rank": rank, "world": world, "lr": args.lr, "tag": args.tag,
                              "team": os.environ.get("TEAM"), "sum": total.item()}), flush=True)
dist.destroy_process_group()
'''
HEAD_NODE = "i-0123456789abcdef0"
DEV_INSTANCE = "i-0fedcba9876543210"


def reports(text: str) -> list[dict[str, Any]]:
    """Every rank's report. The processes of a node share its output stream: two reports may share a line."""
    return [json.loads(found) for found in re.findall(r"REPORT (\{[^{}]*\})", text)]


def assert_every_rank(text: str, *, world: int, lr: float = 3e-4, tag: str = "mine", team: str = "vision") -> None:
    found = sorted(reports(text), key=lambda r: r["rank"])
    assert [r["rank"] for r in found] == list(range(world)), text[-4000:]
    expected_sum = world * (world + 1) / 2
    for r in found:
        assert (r["world"], r["lr"], r["tag"], r["team"], r["sum"]) == (world, lr, tag, team, expected_sum), r


# -- trn rehearse: 2 nodes x 2 processes, as each backend launches it --------------------------------------


def _rehearse_users_script(backend: str, config: Path, tmp_path: Path, monkeypatch: Any) -> tuple[Path, Any]:
    """`trn rehearse` of the user's train.py from their project folder, as the README shows it; it must succeed."""
    work = tmp_path / "my-project"
    work.mkdir()
    (work / "train.py").write_text(USER_SCRIPT)
    monkeypatch.chdir(work)
    result = run_cli("rehearse", "--backend", backend, "--config", str(config), "--env", "TEAM=vision",
                     "--", "train.py", "--lr", "3e-4", "--tag", "mine")
    assert result.code == 0, result.out[-4000:] + result.err
    return work, result


@pytest.mark.parametrize("backend", ["eks", "batch", "parallelcluster"])
def test_rehearse_runs_a_users_script_on_two_nodes_of_two_processes(backend, config, tmp_path, monkeypatch):
    work, result = _rehearse_users_script(backend, config, tmp_path, monkeypatch)
    assert_every_rank(result.out, world=4)
    assert "node 0 exit 0, node 1 exit 0" in result.out or "node 0 exit 0" in result.out
    assert f"/fsx -> {work / '.trn-rehearse' / 'fsx'}" in result.out
    assert "2 processes on the CPU (gloo)" in result.out
    # The job's compile cache went to the stand-in /fsx, as on the backend's /fsx.
    assert (work / ".trn-rehearse" / "fsx" / "neuron-cache" / "train").is_dir()


def test_rehearse_on_a_batch_group_without_efa_runs_a_one_node_multinode_job(config, tmp_path, monkeypatch):
    """trn1.2xlarge's job definition is multi-node parallel (awsvpc, away from the instance metadata): the job gets
    Batch's node variables for one node, and the launcher runs it on the type's 2 NeuronCores."""
    raw = yaml.safe_load(config.read_text())
    raw["compute_groups"][0] |= {"instance_type": "trn1.2xlarge", "nodes": 1, "max_nodes": 2}
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    _, result = _rehearse_users_script("batch", config, tmp_path, monkeypatch)
    assert "a multi-node parallel job of 1 node(s)" in result.out
    assert_every_rank(result.out, world=2)


def test_rehearse_on_the_development_instance_runs_its_run_script(config, tmp_path, monkeypatch):
    _, result = _rehearse_users_script("instance", config, tmp_path, monkeypatch)
    assert_every_rank(result.out, world=2)
    assert "rehearsed unit trn-rehearsal (1 node) on instance" in result.out


def test_rehearse_says_what_a_failing_job_printed_and_exits_1(config, tmp_path, monkeypatch):
    work = tmp_path / "my-project"
    work.mkdir()
    (work / "train.py").write_text("import sys\nprint('bad data', flush=True)\nsys.exit(3)\n")
    monkeypatch.chdir(work)
    result = run_cli("rehearse", "--backend", "batch", "--config", str(config), "--", "train.py")
    assert result.code == 1
    assert "bad data" in result.out and "node 0 exit 1" in result.out


def test_rehearse_without_torch_says_how_to_get_it(config, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    monkeypatch.chdir(tmp_path)
    result = run_cli("rehearse", "--backend", "batch", "--config", str(config), "--", "train.py")
    assert result.code == 2 and "pip install torch==2.13.0" in result.err
    assert len(result.err.strip().splitlines()) == 1


# -- Slurm through SSM Run Command ----------------------------------------------------------------------


def _outputs(stack: str, **values: str) -> Any:
    def answer(params: dict[str, Any]) -> Any:
        if params["StackName"] != stack:
            return client_error("ValidationError", "DescribeStacks", f"Stack with id {params['StackName']} does not exist")
        return {"Stacks": [{"StackName": stack, "StackStatus": "CREATE_COMPLETE", "CreationTime": dt.datetime(2026, 11, 1),
                            "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in values.items()]}]}

    return answer


@pytest.fixture
def head_node(aws, config, tmp_path, no_sleep) -> Host:
    """The deployed cluster's head node: ~/trainium as its OnNodeConfigured action leaves it, Slurm stand-ins."""
    from trainium_cdk.app.config import load_config

    stage = Stage(tmp_path / "nodes")
    host = Host(tmp_path / "head-node", stage)
    (host.home / "trainium").mkdir()
    for name, text in head_node_files(load_config(config)).items():
        (host.home / "trainium" / name).write_text(text)
    aws.fake("DescribeStacks", _outputs("trainium-parallelcluster", HeadNodeInstanceId=HEAD_NODE))
    serve_run_command(aws, {HEAD_NODE: host})
    # The user's code on /fsx, as `trn sync` leaves it.
    code = stage.fsx / "code" / "mine"
    code.mkdir(parents=True)
    (code / "train.py").write_text(USER_SCRIPT)
    return host


def test_slurm_submit_status_logs_jobs_of_your_own_job(aws, head_node, config):
    flags = ("--backend", "parallelcluster", "--config", str(config))
    result = run_cli("submit", *flags, "--name", "mine", "--env", "TEAM=vision", "--workdir", "/fsx/code/mine",
                     "--", "train.py", "--lr", "3e-4", "--tag", "mine")
    assert result.code == 0, result.err
    assert result.out.startswith("submitted mine: Slurm job 101 (2 x trn1.32xlarge, queue train)\n")
    (request,) = aws.of("SendCommand")
    assert request["InstanceIds"] == [HEAD_NODE] and request["DocumentName"] == "AWS-RunShellScript"
    assert request["Parameters"]["commands"][-2] == (
        'sbatch --parsable --nodes=2 --job-name=mine "$HOME"/trainium/train-train.sbatch train.py --lr 3e-4 --tag mine'
    )
    assert run_cli("status", "101", *flags).out.startswith("job 101: PENDING (mine, 2 nodes, pending, Resources)")

    (ran,) = head_node.run_slurm_jobs()  # the cluster runs the queued job
    assert_every_rank(ran["results"][0].output, world=4)

    status = run_cli("status", "101", *flags)
    assert status.code == 0 and status.out.startswith("job 101: SUCCEEDED (mine, 2 nodes, completed, exit code 0:0)")
    node1 = run_cli("logs", "101", "--rank", "1", *flags)
    assert node1.code == 0, node1.err
    assert sorted(r["rank"] for r in reports(node1.out)) == [2, 3]  # node 1's processes only
    assert "slurm: node 1 of 2" in node1.out and "node 0 of 2" not in node1.out
    node0 = run_cli("logs", "101", "--follow", *flags)  # the default: node rank 0, to the job's end
    assert node0.code == 0 and sorted(r["rank"] for r in reports(node0.out)) == [0, 1]
    assert "job 101 SUCCEEDED" in node0.err
    jobs = run_cli("jobs", *flags)
    assert jobs.code == 0 and "101" in jobs.out and "SUCCEEDED" in jobs.out and "mine" in jobs.out

    # Once Slurm has forgotten it (MinJobAge), the job's own exit record answers.
    (head_node.spool / "forgotten-101").touch()
    status = run_cli("status", "101", *flags)
    assert status.code == 0 and "SUCCEEDED (ended (exit code 0; Slurm no longer lists it))" in status.out


def test_slurm_cancel_of_a_queued_job(aws, head_node, config):
    flags = ("--backend", "parallelcluster", "--config", str(config))
    assert run_cli("submit", *flags, "--name", "long", "--", "/fsx/code/mine/train.py", "--lr", "1").code == 0
    result = run_cli("cancel", "101", *flags)
    assert result.code == 0 and "cancelled Slurm job 101 (was PENDING)" in result.out
    assert head_node.run_slurm_jobs() == []
    status = run_cli("status", "101", *flags)
    assert status.code == 1 and "FAILED" in status.out and "cancelled" in status.out
    assert "nothing to cancel" in run_cli("cancel", "101", *flags).out


def test_slurm_unreachable_head_node_is_one_line(aws, head_node, config):
    aws.fake("DescribeStacks", _outputs("trainium-parallelcluster", HeadNodeInstanceId="i-0000000000000000a"))
    result = run_cli("status", "101", "--backend", "parallelcluster", "--config", str(config))
    assert result.code == 2 and "head node i-0000000000000000a is not reachable with SSM Run Command" in result.err


# -- the development instance through SSM Run Command -----------------------------------------------------


@pytest.fixture
def dev_instance(aws, tmp_path, no_sleep) -> Host:
    host = Host(tmp_path / "dev-instance", Stage(tmp_path / "nodes"))
    aws.fake("DescribeStacks", _outputs("trainium-instance", InstanceId=DEV_INSTANCE))
    serve_run_command(aws, {DEV_INSTANCE: host})
    (host.home / "train.py").write_text(USER_SCRIPT)
    return host


def test_instance_submit_status_logs_jobs_of_your_own_job(aws, dev_instance, config):
    flags = ("--backend", "instance", "--config", str(config))
    result = run_cli("submit", *flags, "--name", "mine", "--env", "TEAM=vision", "--", "train.py", "--lr", "3e-4",
                     "--tag", "mine")  # the stand-in's systemd-run runs the unit to its end
    assert result.code == 0, result.err
    assert "submitted mine: unit trn-mine on the development instance (trn1.2xlarge)" in result.out
    units = [json.loads(line) for line in (dev_instance.root / "systemd.units").read_text().splitlines()]
    assert units == [{"properties": ["RemainAfterExit=yes"], "unit": "trn-mine", "uid": "ubuntu",
                      "argv": ["/bin/bash", f"{dev_instance.home}/.trainium/jobs/mine/run.sh"]}]
    status = run_cli("status", "mine", *flags)
    assert status.code == 0 and status.out.startswith("job mine: SUCCEEDED"), status.out
    logs = run_cli("logs", "mine", *flags)
    assert_every_rank(logs.out, world=2)
    assert "mine" in run_cli("jobs", *flags).out
    again = run_cli("submit", *flags, "--name", "mine", "--", "train.py", "--lr", "1")
    assert again.code == 1 and "a job named mine exists on this instance" in again.err


# -- EKS through its API server --------------------------------------------------------------------------


@pytest.fixture
def cluster(aws, tmp_path, no_sleep, monkeypatch) -> Any:
    """The API server stand-in running each job through the rehearsal, and a kubeconfig for it."""

    from tests.support.fake_kube import FakeCluster
    from tests.support.rehearsal import run_kubernetes_job, run_volcano_job

    stage = Stage(tmp_path / "nodes")
    code = stage.fsx / "code" / "mine"
    code.mkdir(parents=True)
    (code / "train.py").write_text(USER_SCRIPT)

    def runner(job: dict[str, Any]) -> list[tuple[int, str]]:
        run = run_volcano_job if job["apiVersion"].startswith("batch.volcano.sh") else run_kubernetes_job
        return [(r.code, r.output) for r in run(stage, job)]

    fake = FakeCluster(runner=runner)
    port = fake.start()
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", port)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    yield fake
    fake.stop()


def test_eks_submit_status_logs_jobs_cancel_of_your_own_job(aws, cluster, config):
    flags = ("--backend", "eks", "--config", str(config))
    result = run_cli("submit", *flags, "--name", "mine", "--image", "example.com/team/train:2", "--env", "TEAM=vision",
                     "--workdir", "/fsx/code/mine", "--", "train.py", "--lr", "3e-4", "--tag", "mine")
    assert result.code == 0, result.err
    cluster.wait_for_jobs()
    status = run_cli("status", "mine", *flags)
    assert status.code == 0 and "SUCCEEDED" in status.out, status.out
    ranks = {rank: reports(run_cli("logs", "mine", "--rank", str(rank), *flags).out) for rank in (0, 1)}
    assert sorted(r["rank"] for r in ranks[0]) == [0, 1] and sorted(r["rank"] for r in ranks[1]) == [2, 3]
    assert_every_rank("\n".join(f"REPORT {json.dumps(r)}" for rs in ranks.values() for r in rs), world=4)
    jobs = run_cli("jobs", *flags)
    assert jobs.code == 0 and "mine" in jobs.out and "SUCCEEDED" in jobs.out and " 2 " in jobs.out
    assert run_cli("logs", "mine", "--rank", "2", *flags).code == 2  # a node the job does not have
    cancel = run_cli("cancel", "mine", *flags)
    assert cancel.code == 0 and "deleted Volcano Job training/mine" in cancel.out

