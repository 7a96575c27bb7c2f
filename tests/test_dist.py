"""dist/: the cluster charts as plain YAML, from the same code the EKS stack installs."""

from __future__ import annotations

import pytest
import yaml

from tests.chart_helpers import validate_all
from tests.helpers import config_with
from trainium_cdk.dist import PLACEHOLDERS, write_dist


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return out, write_dist(config_with(), out)


def _objects(paths):
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_one_file_per_cluster_chart(written):
    out, paths = written
    assert [p.relative_to(out).as_posix() for p in paths] == [
        "eks/workloads/volcano-queue.k8s.yaml",
        "eks/workloads/job-mlp.k8s.yaml",
        "eks/workloads/job-mlp-distributed.k8s.yaml",
        "eks/workloads/job-bert-large-phase1.k8s.yaml",
        "eks/workloads/data-loader.k8s.yaml",
        "eks/workloads/data-shell.k8s.yaml",
        "eks/workloads/tensorboard.k8s.yaml",
        "eks/training-namespace.k8s.yaml",
        "eks/neuron-device-plugin.k8s.yaml",
        "eks/efa-device-plugin.k8s.yaml",
        "eks/fsx-storage.k8s.yaml",
    ]


VOLCANO_KINDS = {("batch.volcano.sh/v1alpha1", "Job"), ("scheduling.volcano.sh/v1beta1", "Queue")}


def test_every_built_in_object_validates_against_the_cluster_schemas(written):
    objects = _objects(written[1])
    built_in = [o for o in objects if (o["apiVersion"], o["kind"]) not in VOLCANO_KINDS]
    assert validate_all(built_in) >= 14
    # Volcano objects (CRDs) are checked field by field in tests/test_chart_training.py.
    assert len(objects) - len(built_in) == 3


def test_bert_large_phase1_example(written):
    (bert,) = [o for o in _objects(written[1]) if o["metadata"]["name"] == "bert-large-phase1"]
    assert bert["spec"]["minAvailable"] == 2
    leader = bert["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert "--nproc_per_node=32" in leader["command"][2] and "dp_bert_large_hf_pretrain_hdf5.py" in leader["command"][2]
    env = {e["name"]: e["value"] for e in leader["env"]}
    assert env["XLA_DOWNCAST_BF16"] == "1" and env["FI_PROVIDER"] == "efa"
    assert env["NEURON_CC_FLAGS"] == "--cache_dir=/data/neuron-cache/bert-large"


def test_ids_known_after_deploy_are_envsubst_placeholders(written):
    text = "".join(p.read_text() for p in written[1])
    for name in ("FSX_FILE_SYSTEM_ID", "FSX_DNS_NAME", "FSX_MOUNT_NAME", "FSX_SECURITY_GROUP_ID", "COMPUTE_SUBNET_ID",
                 "TRAINING_IMAGE", "DATA_S3_URI"):
        assert "${" + name + "}" in text
        assert name in PLACEHOLDERS
    assert "Token[" not in text


def test_deterministic(written, tmp_path):
    again = write_dist(config_with(), tmp_path)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in written[1]]


def test_no_eks_no_manifests(tmp_path):
    assert write_dist(config_with(backends=["batch"]), tmp_path) == []
