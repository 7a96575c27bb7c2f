"""One job environment: an EKS job, the Batch job definition and the Slurm batch script of one compute group
give the training program the same variables, read back from what a user deploys (the EKS job manifest in
dist/, the synthesized Batch job definition, the batch script the head node gets).

They differ only where the backend does (training_env.job_environment): CCOM_SOCKET_IFNAME in containers
(a host's runtime finds its interface), TRN_JOB_NAME on EKS (Batch and Slurm give a job an id of their
own), the compile cache's set (an EKS job names its own, Batch and Slurm use the group's) and
TRN_PRECOMPILE, which Slurm takes at submit time (``PRECOMPILE=1 sbatch``).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml

from tests.apps import synthesized
from tests.helpers import resources
from trainium_cdk.dist import write_dist
from trainium_cdk.names import CACHE_DIR_NAME, SHARED_MOUNT
from trainium_cdk.parallelcluster.cluster_config import batch_script_name

CONTAINER_ONLY = {"CCOM_SOCKET_IFNAME"}
EKS_ONLY = {"TRN_JOB_NAME"}
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
        d for d in resources(result.template_json("batch"), "AWS::Batch::JobDefinition").values()
        if "NodeProperties" in d["Properties"]
    ]
    (definition,) = definitions
    (node_range,) = definition["Properties"]["NodeProperties"]["NodeRangeProperties"]
    batch = {e["Name"]: e["Value"] for e in node_range["Container"]["Environment"]}
    script = (dist / "parallelcluster" / batch_script_name(group)).read_text()
    slurm = {}
    for line in script.splitlines():
        match = re.fullmatch(r"export ([A-Z_][A-Z0-9_]*)=(.*)", line)
        if match:
            (value,) = shlex.split(match[2])
            slurm[match[1]] = value
    return {"eks": eks_envs[0], "batch": batch, "slurm": slurm}


def _shared(env: dict[str, str], *, drop: set[str]) -> dict[str, Any]:
    return {k: v for k, v in env.items() if k not in drop | {PER_CACHE_SET} | SUBMIT_TIME}


def test_every_backend_s_job_gets_the_same_environment(environments):
    eks, batch, slurm = environments["eks"], environments["batch"], environments["slurm"]
    assert _shared(eks, drop=CONTAINER_ONLY | EKS_ONLY) == _shared(batch, drop=CONTAINER_ONLY) == _shared(slurm, drop=set())
    assert eks.keys() - batch.keys() == EKS_ONLY and batch.keys() - slurm.keys() - SUBMIT_TIME == CONTAINER_ONLY
    for env in environments.values():
        assert env[PER_CACHE_SET].startswith(f"{SHARED_MOUNT}/{CACHE_DIR_NAME}/")


def test_hugging_face_caches_are_on_the_shared_file_system_everywhere(environments):
    """HF_HOME was set on EKS only: Batch and Slurm jobs downloaded models and datasets into each node's home."""
    assert {name: env.get("HF_HOME") for name, env in environments.items()} == dict.fromkeys(
        environments, f"{SHARED_MOUNT}/huggingface"
    )
