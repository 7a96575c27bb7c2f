"""Node health on Slurm: the prolog that runs the node health check (node/health_check.py) before every job and
drains a node that fails it, against stand-in good and bad nodes (a host tree, neuron-ls, nccom-test), how the
cluster installs it, and the same check with the on-node collective once at a compute node's first boot. (EKS and Batch gates: tests/unit/node/test_node_health.py; Batch retries: tests/e2e/test_resume.py.)"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import node_files
from tests.support.helpers import config_with
from tests.support.rehearsal import neuron_ls, scontrol_recorder
from tests.unit.node.test_node_health import DATA, host_tree, nccom_test
from trainium_cdk.app.dist.parallelcluster import fetched_digests
from trainium_cdk.app.parallelcluster.cluster_config import cluster_configuration, placeholder_ids
from trainium_cdk.app.parallelcluster.health import PROLOG_NAME, SCRIPT, render_prolog

NODE = "train-st-trn1-32xlarge-3"
ONE_NODE, FAILURE = DATA / "nccom_test_allr_one_node.txt", DATA / "nccom_test_failure.txt"


@pytest.fixture(scope="module")
def config():
    return config_with(backends=["parallelcluster"])


def _run(tmp_path, config, devices: int | None, node: str = NODE, *, efa: int = 8, driver: str | None = None,
         lustre: bool = True, boot: bool = False, collective: Path = ONE_NODE, collective_exit: int = 0):
    """The prolog as the cluster installs it, on a stand-in node; ``boot``: as neuron_setup.sh runs it at the node's
    first boot (TRN_HEALTH_BOOT=1). nccom-test is there, reporting ``collective`` (tests/data) and exiting as told;
    its calls go to tmp_path/nccom.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # neuron-ls and nccom-test where the Neuron packages put them (tests/support/rehearsal.py), off the PATH slurmd gives.
    neuron_bin = tmp_path / "opt-aws-neuron-bin"
    neuron_bin.mkdir()
    if devices is not None:
        neuron_ls(neuron_bin, devices)
    nccom_test(neuron_bin, collective, tmp_path / "nccom.log", exit_code=collective_exit)
    # The node's /sys and /proc (tests/unit/node/test_node_health.py): its EFA interfaces, loaded driver and mounts.
    root = host_tree(tmp_path / "host", devices=devices or 0, cores_per_device=2, efa=efa,
                     driver=driver or config.neuron_track.driver, lustre=lustre)
    log = tmp_path / "scontrol.log"
    scontrol_recorder(bin_dir, log)
    # The prolog as the cluster installs it (its header's values), but for where the Neuron tools are.
    values = {**node_files.split(render_prolog(config), SCRIPT), "NEURON_BIN": str(neuron_bin)}
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMD_NODENAME": node, "TRN_HEALTH_ROOT": str(root),
           **({"TRN_HEALTH_BOOT": "1"} if boot else {"SLURM_JOB_ID": "7"})}
    proc = node_files.run(SCRIPT, values, env, timeout=30)
    return proc, (log.read_text() if log.exists() else "")


def test_a_healthy_node_runs_the_job(tmp_path, config):
    assert config.spec(config.compute_groups[0]).neuron_devices == 16
    proc, calls = _run(tmp_path, config, 16)
    assert proc.returncode == 0, proc.stderr
    assert calls == ""
    assert not (tmp_path / "nccom.log").exists()  # no collective before a job: the prolog stays about a second


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
    # The fixed OnNodeConfigured of the head node stays as it is (tests/app/test_day2.py).
    assert "Args" not in cluster["HeadNode"]["CustomActions"]["OnNodeConfigured"]


# -- the first boot: the on-node collective, once, before the node registers ------------------------------------------

def test_at_first_boot_a_good_node_passes_its_on_node_collective_over_every_neuroncore(tmp_path, config):
    """neuron_setup.sh runs the prolog once at boot with TRN_HEALTH_BOOT=1: the same checks and nccom-test's bf16
    all-reduce over the node's 32 NeuronCores, given the explicit timeout; nothing is drained."""
    proc, calls = _run(tmp_path, config, 16, boot=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "nccom.log").read_text() == "-r 32 -N 1 -b 32MB -e 32MB -n 5 -w 2 -d bf16 allr\n"
    assert "trainium-cdk health: collective: bf16 all-reduce over 32 NeuronCores, bus bandwidth 40.69 GB/s" in proc.stdout
    assert calls == ""
    values = node_files.split(render_prolog(config), SCRIPT)
    assert values["COLLECTIVE_TIMEOUT"] == "300"


def test_at_first_boot_a_failing_collective_fails_the_bootstrap_and_drains_nothing(tmp_path, config):
    """The node is not in service yet: no drain (it would stay on the Slurm node name for the replacement), the check
    fails, and with it the node's OnNodeConfigured (ParallelCluster then replaces the instance)."""
    proc, calls = _run(tmp_path, config, 16, boot=True, collective=FAILURE, collective_exit=1)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "trainium-cdk health: FAIL collective: nccom-test all-reduce over 32 NeuronCores failed (exit 1): "
        "1 errors found - test failed",
        f"trainium-cdk health: node {NODE} failed its first-boot check: its bootstrap fails",
    ]
    assert calls == ""


def _boot(tmp_path: Path, config, *, collective: Path, collective_exit: int = 0):
    """A compute node's OnNodeConfigured as the cluster configuration gives it (neuron_setup.sh and its Args), on a
    stand-in ParallelCluster Ubuntu host (tests/app/parallelcluster/test_parallelcluster_image.py) whose shared prolog.d holds the health
    prolog the head node installed, named as Slurm names the node."""
    from tests.app.parallelcluster.test_parallelcluster_image import make_host
    from trainium_cdk.parallelcluster.parts import SETUP_SCRIPT

    # Without the metrics program (its install is tests/app/test_node_metrics.py's): no S3 and no systemd here.
    ids = dataclasses.replace(placeholder_ids(config, fetched_digests(config)), neuron_metrics=None)
    (queue, *_) = cluster_configuration(config, ids)["Scheduling"]["SlurmQueues"]
    args = queue["CustomActions"]["OnNodeConfigured"]["Args"]
    host = make_host(tmp_path / "node")
    host.boot()
    (host.bindir / "hostname").write_text(f'#!/bin/bash\ncase "$1" in -I) echo 10.0.0.5 ;; -s) echo {NODE} ;; esac\n')
    neuron_ls(host.bindir, 16)
    nccom_test(host.bindir, collective, tmp_path / "nccom.log", exit_code=collective_exit)
    prologs = tmp_path / "prolog.d"
    prologs.mkdir()
    (prologs / PROLOG_NAME).write_text(render_prolog(config))
    (prologs / PROLOG_NAME).chmod(0o755)
    root = host_tree(tmp_path / "devices", devices=16, cores_per_device=2, efa=8, driver=config.neuron_track.driver)
    text = SETUP_SCRIPT.read_text().replace("/etc/", f"{host.root}/etc/").replace("/sys/module/", f"{host.root}/sys/module/")
    (host.root / "setup.sh").write_text(text)
    env = {"PATH": f"{host.bindir}:/usr/bin:/bin", "STATE": str(host.state), "ROOT": str(host.root),
           "HOME": str(host.root), "TRN_PROLOG_DIR": str(prologs), "TRN_HEALTH_ROOT": str(root)}
    return args, subprocess.run(["bash", str(host.root / "setup.sh"), *args], env=env, capture_output=True, text=True,
                                timeout=60, check=False)


@pytest.mark.parametrize("healthy", [True, False], ids=["good-node", "bad-collective"])
def test_a_compute_node_runs_the_collective_once_at_boot_and_one_that_fails_it_never_joins(tmp_path, config, healthy):
    """The compute queues' OnNodeConfigured carries --boot-check <the health prolog>; the node's setup runs it last:
    a good node's setup ends, one whose collective fails ends non-zero (ParallelCluster fails its bootstrap and
    replaces it)."""
    args, proc = _boot(tmp_path, config, collective=ONE_NODE if healthy else FAILURE, collective_exit=0 if healthy else 1)
    assert args[-2:] == ["--boot-check", PROLOG_NAME]
    assert (tmp_path / "nccom.log").read_text() == "-r 32 -N 1 -b 32MB -e 32MB -n 5 -w 2 -d bf16 allr\n"
    if healthy:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.rstrip().endswith("neuron_setup: done")
    else:
        assert proc.returncode == 1
        assert f"trainium-cdk health: node {NODE} failed its first-boot check" in proc.stderr
        assert "neuron_setup: done" not in proc.stdout
