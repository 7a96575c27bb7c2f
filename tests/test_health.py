"""Node health on Slurm: the prolog that runs the node health check (node/health_check.py) before every job and
drains a node that fails it, against stand-in good and bad nodes (a host tree, neuron-ls), and how the cluster
installs it. (EKS and Batch gates: tests/test_node_health.py; Batch retries: tests/test_resume.py.)"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests import node_files
from tests.helpers import config_with
from tests.rehearsal import neuron_ls, scontrol_recorder
from tests.test_node_health import host_tree
from trainium_cdk.parallelcluster.cluster_config import placeholder_ids, cluster_configuration
from trainium_cdk.parallelcluster.dist import fetched_digests
from trainium_cdk.parallelcluster.health import PROLOG_NAME, SCRIPT, render_prolog

NODE = "train-st-trn1-32xlarge-3"


@pytest.fixture(scope="module")
def config():
    return config_with(backends=["parallelcluster"])


def _run(tmp_path, config, devices: int | None, node: str = NODE, *, efa: int = 8, driver: str | None = None,
         lustre: bool = True):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # neuron-ls where the Neuron packages put it (tests/rehearsal.py), off the PATH slurmd gives a prolog.
    neuron_bin = tmp_path / "opt-aws-neuron-bin"
    neuron_bin.mkdir()
    if devices is not None:
        neuron_ls(neuron_bin, devices)
    # The node's /sys and /proc (tests/test_node_health.py): its EFA interfaces, loaded driver and mounts.
    root = host_tree(tmp_path / "host", devices=devices or 0, cores_per_device=2, efa=efa,
                     driver=driver or config.neuron_track.driver, lustre=lustre)
    log = tmp_path / "scontrol.log"
    scontrol_recorder(bin_dir, log)
    # The prolog as the cluster installs it (its header's values), but for where the Neuron tools are.
    values = {**node_files.split(render_prolog(config), SCRIPT), "NEURON_BIN": str(neuron_bin)}
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMD_NODENAME": node, "SLURM_JOB_ID": "7",
           "TRN_HEALTH_ROOT": str(root)}
    proc = node_files.run(SCRIPT, values, env, timeout=30)
    return proc, (log.read_text() if log.exists() else "")


def test_a_healthy_node_runs_the_job(tmp_path, config):
    assert config.spec(config.compute_groups[0]).neuron_devices == 16
    proc, calls = _run(tmp_path, config, 16)
    assert proc.returncode == 0, proc.stderr
    assert calls == ""


def test_a_node_short_of_devices_is_drained_and_the_prolog_fails(tmp_path, config):
    proc, calls = _run(tmp_path, config, 15)
    assert proc.returncode == 1
    assert calls.startswith(f"update nodename={NODE} state=drain reason=")
    assert "devices: found 15 Neuron devices, expected 16" in calls


def test_a_node_where_neuron_ls_fails_is_drained(tmp_path, config):
    proc, calls = _run(tmp_path, config, None)
    assert proc.returncode == 1 and "found 0 Neuron devices, expected 16" in calls


def test_a_node_with_a_bad_efa_interface_another_driver_and_no_fsx_is_drained_with_every_reason(tmp_path, config):
    """Each failed check is one part of the drain reason (`scontrol show node` shows it)."""
    proc, calls = _run(tmp_path, config, 16, efa=7, driver="2.19.64.0", lustre=False)
    assert proc.returncode == 1
    reason = calls.split("reason=", 1)[1].strip()
    assert reason == (f"trainium-cdk health: efa: found 7 EFA interfaces, expected 8;"
                      f"driver: Neuron driver 2.19.64.0 loaded, expected {config.neuron_track.driver};"
                      "fsx: /fsx is not mounted")


def test_nodes_of_other_queues_are_left_alone(tmp_path, config):
    proc, calls = _run(tmp_path, config, 0, node="cpu-dy-c5-xlarge-1")
    assert proc.returncode == 0 and calls == ""


def test_the_head_node_installs_the_prolog(config):
    ids = placeholder_ids(config, fetched_digests(config))
    cluster = cluster_configuration(config, ids)
    args = cluster["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]
    assert f"{PROLOG_NAME}={ids.prologs[PROLOG_NAME].checked_url}" in args
    assert args[args.index(f"{PROLOG_NAME}={ids.prologs[PROLOG_NAME].checked_url}") - 1] == "--prolog"
    (access,) = cluster["HeadNode"]["Iam"]["S3Access"]
    assert ids.prologs[PROLOG_NAME].key.startswith(access["KeyName"].removesuffix("*"))
    # The fixed OnNodeConfigured of the head node stays as it is (tests/test_day2.py).
    assert "Args" not in cluster["HeadNode"]["CustomActions"]["OnNodeConfigured"]
