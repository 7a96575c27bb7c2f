"""The launcher derives node rank, node count and rendezvous address from each scheduler's variables.

torchrun itself runs in tests/e2e/test_rehearsal.py; here a stand-in prints the arguments it would get, so
every scheduler and node count (5 nodes, rank 3) is checked in milliseconds.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from trainium_cdk.runtime.launcher import launch_command

BASE = {"NPROC_PER_NODE": "32", "MASTER_PORT": "29500"}


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    for name, text in {
        "torchrun": 'echo "torchrun $*"\n',
        "neuron_parallel_compile": 'echo "neuron_parallel_compile $*"\n',
        "hostname": 'echo "169.254.172.2 10.0.1.7 fe80::1"\n',  # awsvpc: ecs-eth0 first, then the task ENI
        "scontrol": 'test "$1 $2" = "show hostnames" && printf "trn-st-1\\ntrn-st-2\\ntrn-st-3\\n"\n',
    }.items():
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + text)
        path.chmod(0o755)
    return tmp_path


def launch(bin_dir: Path, env: dict[str, str], *program: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", **BASE, **env}
    return subprocess.run(launch_command(program or ("train.py", "--lr", "1e-4")), env=full, capture_output=True,
                          text=True, check=False)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"AWS_BATCH_JOB_NUM_NODES": "5", "AWS_BATCH_JOB_NODE_INDEX": "3", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
          "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.1.5"}, ("batch", 3, 5, "10.0.1.5")),
        # The main node has no main-node address: its own, skipping the link-local ecs-eth0.
        ({"AWS_BATCH_JOB_NUM_NODES": "5", "AWS_BATCH_JOB_NODE_INDEX": "0", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0"},
         ("batch", 0, 5, "10.0.1.7")),
        ({"SLURM_JOB_NUM_NODES": "5", "SLURM_NODEID": "3", "SLURM_JOB_NODELIST": "trn-st-[1-5]"},
         ("slurm", 3, 5, "trn-st-1")),
        ({"VC_TASK_INDEX": "2", "TRN_NODE_RANK_OFFSET": "1", "VC_LEADER_NUM": "1", "VC_WORKER_NUM": "4",
          "VC_LEADER_HOSTS": "job-leader-0.job", "VC_WORKER_HOSTS": "job-worker-0.job,job-worker-1.job"},
         ("volcano", 3, 5, "job-leader-0.job")),
        ({}, ("none", 0, 1, "127.0.0.1")),
    ],
)
def test_rank_count_and_address_come_from_the_scheduler(bin_dir, env, expected):
    scheduler, rank, nodes, address = expected
    result = launch(bin_dir, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"torchrun --nnodes={nodes} --node_rank={rank} --nproc_per_node=32 --master_addr={address} "
        "--master_port=29500 train.py --lr 1e-4"
    )
    assert f"trainium-launch: {scheduler}: node {rank} of {nodes}" in result.stderr


def test_a_command_that_is_not_a_script_runs_as_written(bin_dir):
    result = launch(bin_dir, {}, "python3", "train.py")
    assert result.stdout.strip().endswith("--master_port=29500 --no-python python3 train.py")


def test_precompile_then_train_and_the_cache_directory(bin_dir, tmp_path):
    cache = tmp_path / "cache" / "bert"
    result = launch(bin_dir, {"TRN_PRECOMPILE": "1", "TRN_CACHE_DIR": str(cache)})
    lines = result.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["neuron_parallel_compile", "torchrun"]
    assert lines[0].removeprefix("neuron_parallel_compile ") == lines[1]
    assert cache.is_dir()


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "a[1-2]"}, "node rank 2 of 2 nodes"),
        ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1"}, "batch: no rendezvous address"),
        ({"NPROC_PER_NODE": ""}, "NPROC_PER_NODE"),
    ],
)
def test_a_broken_environment_fails_before_torchrun(bin_dir, env, words):
    result = launch(bin_dir, env)
    assert result.returncode != 0 and "torchrun" not in result.stdout
    assert words in result.stderr


@pytest.mark.parametrize(
    "env",
    [
        {},
        # A Batch child node with shared storage: the heartbeat loop runs beside torchrun.
        {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
         "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.1.5", "TRN_HEARTBEAT_S": "30"},
    ],
    ids=["one node", "batch child with heartbeats"],
)
def test_the_launchers_output_ends_when_it_exits(bin_dir, tmp_path, env):
    """Whatever reads the launcher's output (SSM Run Command on Slurm and the dev instance, `trn rehearse`) sees its
    end when it exits: the counters' 10 s guard and the heartbeat's sleep held it open after the exit."""
    import time

    env = {**env, "TRN_CHECKPOINT_DIR": str(tmp_path / "ckpt")} if env else env
    started = time.monotonic()
    result = launch(bin_dir, env)  # returns at the end of the output, not at the exit
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 5
