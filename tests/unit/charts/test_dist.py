"""dist/: the cluster charts as plain YAML, from the same code the EKS stack installs."""

from __future__ import annotations

import pytest
import yaml

from tests.support.chart_helpers import validate_all
from tests.support.helpers import config_with
from trainium_cdk.app.dist import PLACEHOLDERS, write_dist


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """With the example images built (eks.example_images), which the BERT-large example needs."""
    out = tmp_path_factory.mktemp("dist")
    return out, write_dist(config_with(eks={"example_images": True}), out)


@pytest.fixture(scope="module")
def unbuilt(tmp_path_factory):
    """The default: no example image; the MLP example's code in a ConfigMap."""
    out = tmp_path_factory.mktemp("dist-default")
    return out, write_dist(config_with(), out)


def test_by_default_the_mlp_example_s_code_is_a_configmap_its_jobs_mount(unbuilt):
    out, paths = unbuilt
    names = [p.relative_to(out).as_posix() for p in paths]
    assert names[:3] == ["eks/workloads/mlp-example.k8s.yaml", "eks/workloads/volcano-queue.k8s.yaml",
                         "eks/workloads/job-mlp.k8s.yaml"]
    assert not [n for n in names if "bert" in n]
    objects = _objects(paths)
    assert validate_all([o for o in objects if (o["apiVersion"], o["kind"]) not in VOLCANO_KINDS]) >= 12
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "mlp-example"]
    assert list(config_map["data"]) == ["train.py"]
    (job,) = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "mlp"]
    pod = job["spec"]["template"]["spec"]
    assert {"name": "code", "configMap": {"name": "mlp-example"}} in pod["volumes"]


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
        "eks/workloads/stage-bert-data.k8s.yaml",
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
    # Volcano objects (CRDs) are checked field by field in tests/unit/charts/test_chart_training.py.
    assert len(objects) - len(built_in) == 3


def test_bert_large_phase1_example(written):
    (bert,) = [o for o in _objects(written[1]) if o["metadata"]["name"] == "bert-large-phase1"]
    assert bert["spec"]["minAvailable"] == 2
    leader = bert["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert leader["command"][4] == "/opt/trainium-cdk/examples/bert/dp_bert_large_hf_pretrain_hdf5.py"
    assert "--enable_pt_autocast" in leader["command"]
    env = {e["name"]: e["value"] for e in leader["env"]}
    assert env["NPROC_PER_NODE"] == "32" and env["FI_PROVIDER"] == "efa"
    # Autocast: the Neuron docs say not to set XLA_USE_BF16 / XLA_DOWNCAST_BF16 with it.
    assert "XLA_DOWNCAST_BF16" not in env and "XLA_USE_BF16" not in env
    assert env["TRN_CACHE_DIR"] == "/fsx/neuron-cache/bert-large"
    assert env["HF_HOME"] == "/fsx/huggingface"


def test_bert_runs_in_its_own_image_named_by_its_placeholder(written):
    """The BERT job's image is the stack's BERT image (the one holding its script): ${BERT_IMAGE}, filled
    from output BertImageUri, and the file's header says so; the other jobs keep ${TRAINING_IMAGE}."""
    out, paths = written
    (path,) = [p for p in paths if p.name == "job-bert-large-phase1.k8s.yaml"]
    (bert,) = [o for o in yaml.safe_load_all(path.read_text()) if o]
    images = {t["template"]["spec"]["containers"][0]["image"] for t in bert["spec"]["tasks"]}
    assert images == {"${BERT_IMAGE}"}
    text = path.read_text()
    assert "# Deploy-time placeholders: ${BERT_IMAGE}." in text
    assert "#   envsubst '$BERT_IMAGE' < dist/eks/workloads/job-bert-large-phase1.k8s.yaml | kubectl apply -f -" in text
    assert "#   BERT_IMAGE: output BertImageUri of t-eks" in text
    assert "# Or, with nothing to fill: trn submit --backend eks --job bert-large-phase1" in text
    assert PLACEHOLDERS["BERT_IMAGE"] == ("eks", "BertImageUri")
    mlp = [o for p in paths if p.name == "job-mlp.k8s.yaml" for o in yaml.safe_load_all(p.read_text()) if o]
    assert mlp[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "${TRAINING_IMAGE}"


def test_stage_bert_data_fills_the_directory_the_bert_job_reads(written):
    """One `kubectl apply -f` stages the tutorial's corpus: the Job downloads Neuron's public archive
    (anonymously) onto the claim the BERT job mounts, at the mount path it mounts it, and unpacks it into
    the directory the job's --data_dir names."""
    out, paths = written
    (path,) = [p for p in paths if p.name == "stage-bert-data.k8s.yaml"]
    assert "${" not in path.read_text()  # nothing to fill: `kubectl apply -f` as it is
    (stage,) = [o for o in yaml.safe_load_all(path.read_text()) if o]
    (bert,) = [o for o in _objects(paths) if o["metadata"]["name"] == "bert-large-phase1"]
    assert (stage["kind"], stage["metadata"]["namespace"]) == ("Job", bert["metadata"]["namespace"])
    stage_pod = stage["spec"]["template"]["spec"]
    bert_pods = [t["template"]["spec"] for t in bert["spec"]["tasks"]]

    def claim_and_mount(pod, container):
        (claim,) = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        (mount,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == claim["name"]]
        return claim["persistentVolumeClaim"]["claimName"], mount

    read = {claim_and_mount(p, p["containers"][0]) for p in bert_pods}
    (download,) = stage_pod["initContainers"]
    (unpack,) = stage_pod["containers"]
    assert {claim_and_mount(stage_pod, c) for c in (download, unpack)} == read == {("fsx-lustre", "/fsx")}

    archive_uri, archive = download["args"][-2:]
    assert download["args"][:4] == ["s3", "cp", "--no-progress", "--no-sign-request"]
    assert archive_uri == (
        "s3://neuron-s3/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/"
        "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128.tar"
    )
    assert unpack["command"][-2:] == [archive, "/fsx/datasets"]
    # The archive holds one directory named as itself (Neuron's tutorial trains on <dir it untars in>/<name>).
    unpacked = "/fsx/datasets/" + archive_uri.rsplit("/", 1)[1].removesuffix(".tar")
    command = bert["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--data_dir") + 1] == unpacked


def test_no_bert_example_on_the_native_track(tmp_path):
    """The BERT script is PyTorch/XLA; the native track's image has no torch-xla."""
    native = config_with(region="us-east-2", network={"az_ids": ["use2-az3", "use2-az2"]}, neuron={"track": "native"},
                         group={"instance_type": "trn2.48xlarge", "az_ids": "use2-az3"})
    names = {p.name for p in write_dist(native, tmp_path)}
    assert "job-mlp-distributed.k8s.yaml" in names and "job-bert-large-phase1.k8s.yaml" not in names
    assert "stage-bert-data.k8s.yaml" not in names


def test_ids_known_after_deploy_are_envsubst_placeholders(written):
    text = "".join(p.read_text() for p in written[1])
    for name in ("FSX_FILE_SYSTEM_ID", "FSX_DNS_NAME", "FSX_MOUNT_NAME", "FSX_SECURITY_GROUP_ID", "COMPUTE_SUBNET_ID",
                 "TRAINING_IMAGE", "BERT_IMAGE", "DATA_S3_URI"):
        assert "${" + name + "}" in text
        assert name in PLACEHOLDERS
    assert "Token[" not in text


def test_deterministic(written, tmp_path):
    again = write_dist(config_with(eks={"example_images": True}), tmp_path)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in written[1]]


def test_no_eks_no_manifests(tmp_path):
    assert write_dist(config_with(backends=["batch"]), tmp_path) == []


def test_storage_off_mounts_nothing_from_fsx(tmp_path):
    """With storage off no pod may wait for the FSx claim (it would stay Pending forever)."""
    paths = write_dist(config_with(storage={"enabled": False}), tmp_path)
    text = "".join(p.read_text() for p in paths)
    assert "persistentVolumeClaim" not in text and "fsx-lustre" not in text
    names = {p.name for p in paths}
    assert not {"data-loader.k8s.yaml", "stage-bert-data.k8s.yaml", "data-shell.k8s.yaml", "tensorboard.k8s.yaml",
                "fsx-storage.k8s.yaml"} & names
    jobs = [o for p in paths for o in yaml.safe_load_all(p.read_text()) if o and "job-" in p.name]
    assert jobs and all("/var/tmp/neuron-compile-cache/" in str(o) for o in jobs)
