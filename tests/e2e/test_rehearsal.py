"""Launch rehearsal: on every backend, the training job a user deploys runs, as 2 nodes x 2 processes.

Each test takes the artefact a user deploys (a manifest of dist/, a Kubernetes object in the EKS
stack's template, the Batch job definition in its template, the Slurm batch script, a job `trn submit`
renders), sets the variables its scheduler sets on each node, and runs the container command as it
stands, one process group per node. What cannot exist here is substituted as listed in
tests/support/rehearsal.py, and nowhere else. A test passes only when every node exits 0 and the loss falls.
"""

from __future__ import annotations

import copy
import json
import resource
import shutil
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml

from tests.support.helpers import ROOT, group_resources, resources, synth
from tests.support.rehearsal import (
    EXAMPLE_DIR,
    Stage,
    assert_trained,
    container_env,
    neuron_parallel_compile,
    run_batch_job,
    run_kubernetes_job,
    run_slurm_script,
    run_volcano_job,
)
from trainium_cdk.app.config import EXAMPLE_COMMAND, build_config
from trainium_cdk.app.dist import write_dist
from trainium_cdk.app.parallelcluster.sbatch import render_sbatch
from trainium_cdk.facts import defaults
from trainium_cdk.facts.versions import NATIVE_TRACK

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e

NODES = 2
# The deployment rehearsed: the default config with the EKS and Batch backends and two jobs of its own.
RAW = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
RAW["backends"] = ["eks", "batch"]
RAW["workloads"] = {
    "jobs": [
        {"name": "train-one", "nodes": 1, "command": [*EXAMPLE_COMMAND, "--output-dir", "/fsx/runs/train-one"]},
        {"name": "train-two", "nodes": 2, "command": [*EXAMPLE_COMMAND, "--output-dir", "/fsx/runs/train-two"]},
    ]
}


@pytest.fixture(scope="module")
def config():
    return build_config(RAW)


@pytest.fixture(scope="module")
def app(config):
    return synth(config, nag=False)


@pytest.fixture(scope="module")
def dist(config, tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """File name -> the objects of each manifest `make synth` writes to dist/eks/workloads."""
    out = tmp_path_factory.mktemp("dist")
    return {
        p.name: [o for o in yaml.safe_load_all(p.read_text()) if o]
        for p in write_dist(config, out)
        if p.parent.name == "workloads"
    }


@pytest.fixture
def node_limits() -> Iterator[int]:
    """Each node starts as a process of slurmd, containerd or the ECS agent's Docker may: with systemd's default
    soft limit of 1024 open files (under this machine's hard limit). Yields the soft limit the launcher must
    give the training processes: Neuron's 65535, or the hard limit where that is lower (as here, maybe)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))  # the nodes (child processes) inherit it
    try:
        yield min(defaults.OPEN_FILES, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def assert_open_files(results: list, expected: int) -> None:
    """Every training process that printed the example's preflight had ``expected`` as its soft limit."""
    found = [
        json.loads(line[line.index("{"):])["preflight"]["open_files"][0]
        for r in results for line in r.output.splitlines() if '"preflight"' in line
    ]
    assert found and set(found) == {expected}, found


def _template_objects(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes objects the EKS stack applies (tokens such as the image URI left as text)."""
    objects = []
    for custom in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        manifest = custom["Properties"]["Manifest"]
        if isinstance(manifest, dict):
            (parts,) = manifest.values()
            manifest = "".join(p if isinstance(p, str) else "TOKEN" for p in parts[1])
        objects += json.loads(manifest)
    return objects


# -- EKS ---------------------------------------------------------------------------------------------


def test_eks_single_node_job_of_dist_trains(stage, dist):
    (job,) = dist["job-mlp.k8s.yaml"]
    assert_trained(run_kubernetes_job(stage, job))
    assert json.loads((stage.fsx / "runs" / "mlp" / "metrics.json").read_text())["loss_per_epoch"]
    assert (stage.fsx / "neuron-cache" / "mlp").is_dir()  # the launcher made the job's compile cache


def test_eks_volcano_job_of_dist_trains_across_two_nodes(stage, dist, node_limits):
    (job,) = dist["job-mlp-distributed.k8s.yaml"]
    assert sum(t["replicas"] for t in job["spec"]["tasks"]) == NODES
    results = run_volcano_job(stage, job)
    assert_trained(results)
    assert "volcano: node 0 of 2" in results[0].output and "volcano: node 1 of 2" in results[1].output
    assert_open_files(results, node_limits)  # a pod gets containerd's limits: the launcher raises the soft one


def test_eks_jobs_of_the_stack_template_train(stage, app):
    objects = {o["metadata"]["name"]: o for o in _template_objects(app.template_json("eks"))}
    assert_trained(run_kubernetes_job(stage, objects["train-one"]))
    assert_trained(run_volcano_job(stage, objects["train-two"]))


def test_a_job_rendered_by_trn_submit_trains(stage, config):
    from trainium_cdk.app.workloads import render_job

    (job,) = render_job(config, name="rehearsal", image="example.com/train:1", nodes=2, job="mlp")
    assert job["kind"] == "Job" and job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert_trained(run_volcano_job(stage, job))


# -- AWS Batch ---------------------------------------------------------------------------------------


def test_batch_multinode_job_definition_trains(stage, app):
    (definition,) = group_resources(app.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
    assert definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["TargetNodes"] == "0:"
    # The default command runs the script parameter: the example image's script, with nothing copied to /fsx
    # first (the old default, /fsx/code/train.py, was on no file system until the user put it there).
    assert definition["Properties"]["Parameters"] == {"script": "/opt/trainium-cdk/examples/mlp/train.py"}
    assert not (stage.fsx / "code").exists()
    results = run_batch_job(stage, definition, NODES)
    assert_trained(results)
    assert "batch: node 0 of 2" in results[0].output and "batch: node 1 of 2" in results[1].output
    assert (stage.fsx / "neuron-cache" / "train").is_dir()


# -- precompile: Neuron's graph extraction over a few steps, then the run ------------------------------
# neuron_parallel_compile (a stand-in that sets NEURON_EXTRACT_GRAPHS_ONLY=1, as Neuron documents the tool)
# runs the job's command; the MLP example stops at TRN_PRECOMPILE_STEPS and writes no checkpoint, as a
# user's script should. The old launcher traced the whole run and gave it the run's checkpoint directory: the
# real run then "resumed" from the trial's checkpoints (outputs that are not real) and trained nothing.
PRECOMPILE_STEPS = 3


def submitted_to_batch(definition: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The job definition as a job submitted with ``containerOverrides.environment`` runs it: AWS Batch adds
    those variables and overrides the definition's of the same name (SubmitJob, ContainerOverrides)."""
    submitted = copy.deepcopy(definition)
    container = submitted["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    kept = [e for e in container["Environment"] if e["Name"] not in env]
    container["Environment"] = kept + [{"Name": k, "Value": v} for k, v in env.items()]
    return submitted


def called_with(script: str, env: Mapping[str, str]) -> str:
    """A batch script as `K=V sbatch script` runs it: sbatch passes the caller's environment to the batch step
    (--export=ALL), which here is the same as exporting it at the top of the script."""
    shebang, rest = script.split("\n", 1)
    return "\n".join([shebang, *(f"export {k}={v}" for k, v in env.items()), rest])


def assert_extracted_then_trained(results: list, log, checkpoints) -> None:
    """Graph extraction ran on every node over PRECOMPILE_STEPS steps, with no checkpoint directory; then the
    real run trained from the start and left its checkpoints, the only ones there."""
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == NODES, calls
    for call in calls:
        assert call["argv"][0] == "torchrun" and call["argv"][-1].endswith("/examples/mlp/train.py"), call
        assert call["env"]["TRN_CHECKPOINT_DIR"] is None, call  # nothing to resume from, nothing to write over
        assert call["env"]["TRN_PRECOMPILE_STEPS"] == str(PRECOMPILE_STEPS), call
    extracted = [
        json.loads(line[line.index("{"):])["graph_extraction"]
        for r in results for line in r.output.splitlines() if '"graph_extraction"' in line
    ]
    assert sorted(e["rank"] for e in extracted) == list(range(NODES * 2)), extracted  # every rank of the trial
    assert {e["steps"] for e in extracted} == {PRECOMPILE_STEPS}  # stopped at the cap (an epoch is 32 steps)
    history = assert_trained(results)
    assert len(history) == 4  # every epoch trained by the real run, from the start
    assert not any('"resumed_from"' in r.output for r in results)
    assert sorted(p.name for p in checkpoints.glob("epoch-*.pt")) == ["epoch-00002.pt", "epoch-00003.pt"]


def test_batch_job_precompiles_a_few_steps_then_trains(stage, app, node_limits):
    (definition,) = group_resources(app.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
    log = stage.root / "parallel-compile.log"
    neuron_parallel_compile(stage.bin, log)  # the training image carries the Neuron tools on its PATH
    submitted = submitted_to_batch(definition, {"TRN_PRECOMPILE": "1", "TRN_PRECOMPILE_STEPS": str(PRECOMPILE_STEPS)})
    results = run_batch_job(stage, submitted, NODES)
    assert_extracted_then_trained(results, log, stage.fsx / "checkpoints" / "rehearsal")
    assert_open_files(results, node_limits)  # the job definition's nofile ulimit, and the launcher


def test_slurm_job_precompiles_a_few_steps_then_trains(stage, node_limits):
    config = build_config({**RAW, "neuron": {"precompile_steps": PRECOMPILE_STEPS}})  # the config's knob
    script = called_with(render_sbatch(config, config.compute_groups[0]), {"PRECOMPILE": "1"})
    log = stage.root / "parallel-compile.log"
    neuron_parallel_compile(stage.bin, log)  # with torchrun (the venv's torch-neuronx brings both)
    results = run_slurm_script(stage, script, NODES, "/opt/trainium-cdk/examples/mlp/train.py")
    assert_extracted_then_trained(results, log, stage.fsx / "checkpoints" / "42")
    assert_open_files(results, node_limits)  # slurmd's limits: the launcher raises the soft one


# -- Slurm (ParallelCluster) -------------------------------------------------------------------------


def test_slurm_batch_script_trains_across_two_nodes(stage, config):
    script = render_sbatch(config, config.compute_groups[0])
    (stage.fsx / "code").mkdir()
    shutil.copy(EXAMPLE_DIR / "train.py", stage.fsx / "code" / "train.py")
    results = run_slurm_script(stage, script, NODES, "/fsx/code/train.py", "--output-dir", "/fsx/runs/slurm")
    assert_trained(results)
    assert "slurm: node 1 of 2" in results[0].output
    assert (stage.fsx / "runs" / "slurm" / "metrics.json").is_file()
    assert (stage.fsx / "neuron-cache" / "train").is_dir()


# -- the native Neuron track ---------------------------------------------------------------------------
# The native track (TorchNeuron on trn2) runs the same launcher and example as the XLA track: only the
# image, the node AMI and the trn2 shapes (64 NeuronCores, 16 devices, 16 EFA interfaces) differ. It is
# rehearsed on the backends that offer it, EKS and Batch. Slurm has no native shape: the config rejects
# neuron.track native with the parallelcluster backend (TorchNeuron 2.33 wheels are Ubuntu 26.04 only;
# tests/app/test_neuron_tracks.py), so there is no native sbatch script a user could deploy.
NATIVE_RAW = {
    "neuron": {"track": "native"},
    "network": {"az_ids": ["usw2-az4", "usw2-az3"]},
    "instance_offerings": {"trn2.48xlarge": {"us-west-2": ["usw2-az4", "usw2-az3"]}},
    "compute_groups": [{"name": "train", "instance_type": "trn2.48xlarge", "nodes": 2, "az_ids": "usw2-az4"}],
}


def assert_preflight_skipped(results: list) -> None:
    """The launcher's version preflight ran on every node and said why it printed no versions."""
    for r in results:
        assert "trainium-launch: no Neuron driver loaded here: version preflight skipped" in r.output, r.output[-2000:]


def test_native_track_batch_job_definition_trains(stage):
    """Batch only, to keep one more synth small."""
    native = synth(build_config({**NATIVE_RAW, "backends": ["batch"]}), nag=False)
    (definition,) = group_resources(native.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
    assets = json.loads((native.outdir / f"{native.stacks.backends['batch'].artifact_id}.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    assert f"sdk{NATIVE_TRACK.neuron_release}" in image["source"]["dockerBuildArgs"]["BASE_TAG"]  # the example image on the native track's
    results = run_batch_job(stage, definition, NODES)
    assert_trained(results)
    assert '"preflight"' in results[0].output
    assert_preflight_skipped(results)


@pytest.fixture(scope="module")
def native_eks(tmp_path_factory):
    """The native track's EKS config, and its dist/eks/workloads manifests (as the `dist` fixture)."""
    config = build_config({**NATIVE_RAW, "backends": ["eks"]})
    out = tmp_path_factory.mktemp("dist-native")
    manifests = {
        p.name: [o for o in yaml.safe_load_all(p.read_text()) if o]
        for p in write_dist(config, out)
        if p.parent.name == "workloads"
    }
    return config, manifests


def test_native_track_eks_volcano_job_of_dist_trains_across_two_nodes(stage, native_eks):
    _, manifests = native_eks
    (job,) = manifests["job-mlp-distributed.k8s.yaml"]
    (container,) = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    # The trn2 shapes a user deploys (the rehearsal then runs 2 processes per node on the CPU).
    assert container_env(container)["NPROC_PER_NODE"] == "64"
    assert container["resources"]["limits"] == {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "16"}
    results = run_volcano_job(stage, job)
    assert_trained(results)
    assert "volcano: node 0 of 2" in results[0].output and "volcano: node 1 of 2" in results[1].output
    assert_preflight_skipped(results)

