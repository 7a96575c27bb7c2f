"""Launch rehearsal: on every backend, the training job a user deploys runs, as 2 nodes x 2 processes.

Each test takes the artefact a user deploys (a manifest of dist/, a Kubernetes object in the EKS
stack's template, the Batch job definition in its template, the Slurm batch script, a job `trn submit`
renders), sets the variables its scheduler sets on each node, and runs the container command as it
stands, one process group per node. What cannot exist here is substituted as listed in
tests/rehearsal.py, and nowhere else. A test passes only when every node exits 0 and the loss falls.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT, resources, synth
from tests.rehearsal import (
    EXAMPLE_DIR,
    Stage,
    assert_trained,
    container_env,
    run_batch_job,
    run_kubernetes_job,
    run_slurm_script,
    run_volcano_job,
)
from trainium_cdk.config import EXAMPLE_COMMAND, build_config
from trainium_cdk.dist import write_dist
from trainium_cdk.parallelcluster.sbatch import render_sbatch

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
def stage(tmp_path) -> Stage:
    return Stage(tmp_path)


def _template_objects(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes objects the EKS stack applies (tokens such as the image URI left as text)."""
    objects = []
    for resource in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        manifest = resource["Properties"]["Manifest"]
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


def test_eks_volcano_job_of_dist_trains_across_two_nodes(stage, dist):
    (job,) = dist["job-mlp-distributed.k8s.yaml"]
    assert sum(t["replicas"] for t in job["spec"]["tasks"]) == NODES
    results = run_volcano_job(stage, job)
    assert_trained(results)
    assert "volcano: node 0 of 2" in results[0].output and "volcano: node 1 of 2" in results[1].output


def test_eks_jobs_of_the_stack_template_train(stage, app):
    objects = {o["metadata"]["name"]: o for o in _template_objects(app.template_json("eks"))}
    assert_trained(run_kubernetes_job(stage, objects["train-one"]))
    assert_trained(run_volcano_job(stage, objects["train-two"]))


def test_a_job_rendered_by_trn_submit_trains(stage, config):
    from trainium_cdk.workloads import render_job

    (job,) = render_job(config, name="rehearsal", image="example.com/train:1", nodes=2, job="mlp")
    assert job["kind"] == "Job" and job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert_trained(run_volcano_job(stage, job))


# -- AWS Batch ---------------------------------------------------------------------------------------


def test_batch_multinode_job_definition_trains(stage, app):
    (definition,) = resources(app.template_json("batch"), "AWS::Batch::JobDefinition").values()
    assert definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["TargetNodes"] == "0:"
    # The default command runs the script parameter: the example image's script, with nothing copied to /fsx
    # first (the old default, /fsx/code/train.py, was on no file system until the user put it there).
    assert definition["Properties"]["Parameters"] == {"script": "/opt/trainium-cdk/examples/mlp/train.py"}
    assert not (stage.fsx / "code").exists()
    results = run_batch_job(stage, definition, NODES)
    assert_trained(results)
    assert "batch: node 0 of 2" in results[0].output and "batch: node 1 of 2" in results[1].output
    assert (stage.fsx / "neuron-cache" / "train").is_dir()


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
# tests/test_neuron_tracks.py), so there is no native sbatch script a user could deploy.
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
    (definition,) = resources(native.template_json("batch"), "AWS::Batch::JobDefinition").values()
    container = definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    assets = json.loads((native.outdir / f"{native.stacks.backends['batch'].artifact_id}.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    assert "sdk2.33.0" in image["source"]["dockerBuildArgs"]["BASE_TAG"]  # the example image on the native track's
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

