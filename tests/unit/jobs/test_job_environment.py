"""One job environment: an EKS job, the Batch job definition and the Slurm batch script of one compute group
give the training program the same variables, read back from what a user deploys (the EKS job manifest in
dist/, the synthesized Batch job definition, the batch script the head node gets).

They differ only where the backend does (training_env.job_environment): CCOM_SOCKET_IFNAME in containers
(a host's runtime finds its interface), TRN_JOB_NAME on EKS (Batch and Slurm give a job an id of their
own), the compile cache's set (an EKS job names its own, Batch and Slurm use the group's),
TRN_PRECOMPILE, which Slurm takes at submit time (``PRECOMPILE=1 sbatch``), and TRN_METRICS_DIR, the node's
metrics folder, which an EKS pod may not mount (Pod Security baseline forbids hostPath). Neuron's large-model settings are
in all three, and a job's own value of each wins on every backend.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from typing import Any

import pytest
import yaml

from tests.support.apps import synthesized
from tests.support.helpers import group_resources
from trainium_cdk.app.dist import write_dist
from trainium_cdk.app.parallelcluster.cluster_config import batch_script_name
from trainium_cdk.facts.names import (
    CACHE_DIR_NAME,
    METRICS_DIR_VARIABLE,
    METRICS_PUSH_URL_VARIABLE,
    NODE_METRICS_DIR,
    PUSHGATEWAY_URL,
    SHARED_MOUNT,
)
from trainium_cdk.runtime.launcher import PRECOMPILE_STEPS_VARIABLE
from trainium_cdk.runtime.training_env import LARGE_MODEL_ENVIRONMENT

CONTAINER_ONLY = {"CCOM_SOCKET_IFNAME"}
# The Pushgateway of observability.prometheus (on in this app): EKS jobs push, the others write the node's folder.
EKS_ONLY = {"TRN_JOB_NAME", METRICS_PUSH_URL_VARIABLE}
NOT_ON_EKS = {METRICS_DIR_VARIABLE}
PER_CACHE_SET = "TRN_CACHE_DIR"
SUBMIT_TIME = {"TRN_PRECOMPILE", "PATH"}
# Where a node stands in the job: each Volcano task's (the chart's); Batch and Slurm set their own node index.
SCHEDULER = "TRN_NODE_RANK_OFFSET"


@pytest.fixture(scope="module")
def environments(tmp_path_factory) -> dict[str, dict[str, str]]:
    """The multi-node job of the first compute group on each backend: its environment by variable."""
    result = synthesized("trn1.32xlarge")
    config = result.config
    group = config.compute_groups[0]
    dist = tmp_path_factory.mktemp("dist")
    write_dist(config, dist)
    documents = list(yaml.safe_load_all((dist / "eks" / "workloads" / "job-mlp-distributed.k8s.yaml").read_text()))
    (job,) = [d for d in documents if d and d.get("kind") == "Job"]
    containers = [c for task in job["spec"]["tasks"] for c in task["template"]["spec"]["containers"]]
    eks_envs = [{e["name"]: e["value"] for e in c["env"] if e["name"] != SCHEDULER} for c in containers]
    assert len(eks_envs) == 2 and all(env == eks_envs[0] for env in eks_envs)
    definitions = [
        d for d in group_resources(result.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
        if "NodeProperties" in d["Properties"]
    ]
    (definition,) = definitions
    (node_range,) = definition["Properties"]["NodeProperties"]["NodeRangeProperties"]
    batch = {e["Name"]: e["Value"] for e in node_range["Container"]["Environment"]}
    script = (dist / "parallelcluster" / batch_script_name(group)).read_text()
    return {"eks": eks_envs[0], "batch": batch, "slurm": script_environment(script)}


def script_environment(script: str) -> dict[str, str]:
    """What a batch script exports (``export NAME=value``) and defaults (``default NAME value``)."""
    found = {}
    for line in script.splitlines():
        match = re.fullmatch(r"export ([A-Z_][A-Z0-9_]*)=(.*)", line) or re.fullmatch(r"default ([A-Z_][A-Z0-9_]*) (.*)", line)
        if match:
            (value,) = shlex.split(match[2])
            found[match[1]] = value
    return found


def _shared(env: dict[str, str], *, drop: set[str]) -> dict[str, Any]:
    return {k: v for k, v in env.items() if k not in drop | {PER_CACHE_SET} | SUBMIT_TIME}


def test_every_backend_s_job_gets_the_same_environment(environments):
    eks, batch, slurm = environments["eks"], environments["batch"], environments["slurm"]
    assert (_shared(eks, drop=CONTAINER_ONLY | EKS_ONLY) == _shared(batch, drop=CONTAINER_ONLY | NOT_ON_EKS)
            == _shared(slurm, drop=NOT_ON_EKS))
    assert eks.keys() - batch.keys() == EKS_ONLY and batch.keys() - slurm.keys() - SUBMIT_TIME == CONTAINER_ONLY
    assert batch[METRICS_DIR_VARIABLE] == slurm[METRICS_DIR_VARIABLE] == NODE_METRICS_DIR
    assert METRICS_DIR_VARIABLE not in eks
    assert eks[METRICS_PUSH_URL_VARIABLE] == PUSHGATEWAY_URL
    for env in environments.values():
        assert env[PER_CACHE_SET].startswith(f"{SHARED_MOUNT}/{CACHE_DIR_NAME}/")


def test_hugging_face_caches_are_on_the_shared_file_system_everywhere(environments):
    """HF_HOME was set on EKS only: Batch and Slurm jobs downloaded models and datasets into each node's home."""
    assert {name: env.get("HF_HOME") for name, env in environments.items()} == dict.fromkeys(
        environments, f"{SHARED_MOUNT}/huggingface"
    )


def test_neurons_large_model_settings_reach_every_backends_jobs(environments):
    """They were on no backend: a Llama-class job ran with glibc's malloc arenas and no compiler mode."""
    expected = {
        "MALLOC_ARENA_MAX": "64", "NEURON_CC_FLAGS": "--model-type transformer", "NEURON_FUSE_SOFTMAX": "1",
        "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS": "3", "NEURON_NUM_RECENT_MODELS_TO_KEEP": "4",
        PRECOMPILE_STEPS_VARIABLE: "10",
    }
    assert {**LARGE_MODEL_ENVIRONMENT["xla"], PRECOMPILE_STEPS_VARIABLE: "10"} == expected  # the default track's
    for name, env in environments.items():
        assert {k: env.get(k) for k in expected} == expected, name


def test_a_slurm_job_keeps_its_own_value_given_to_sbatch(tmp_path):
    """sbatch passes the caller's environment to the batch step: `MALLOC_ARENA_MAX=128 sbatch ...` must reach
    the training processes, as a job's env does on EKS and Batch (the script exported its own over it)."""
    result = synthesized("trn1.32xlarge")
    write_dist(result.config, tmp_path)
    script = (tmp_path / "parallelcluster" / batch_script_name(result.config.compute_groups[0])).read_text()
    # The script's environment part, run as the batch step runs it (bash), with what the caller set.
    part = script[script.index("set -euo pipefail"):script.index("TRN_LAUNCHER=")]
    part = "\n".join(line for line in part.splitlines() if "venv" not in line)  # the host's Neuron venv: not here
    caller = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "MALLOC_ARENA_MAX": "128", "NEURON_CC_FLAGS": "-O1",
              PRECOMPILE_STEPS_VARIABLE: "3", "HF_HOME": "/home/me/.cache"}
    done = subprocess.run(["bash", "-c", part + "\nenv", "sbatch-script", "train.py"], env=caller, capture_output=True,
                          text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    env = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert (env["MALLOC_ARENA_MAX"], env["NEURON_CC_FLAGS"], env[PRECOMPILE_STEPS_VARIABLE]) == ("128", "-O1", "3")
    assert env["NEURON_FUSE_SOFTMAX"] == "1"  # not given: the script's
    assert env["HF_HOME"] == f"{SHARED_MOUNT}/huggingface"  # not a large-model setting: the group's, as before
