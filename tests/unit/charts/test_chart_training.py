"""Training workload charts: requests from the catalog, EFA env, gang size, cache sets, Volcano fields."""

from __future__ import annotations

import cdk8s
import pytest

from tests.support.chart_helpers import as_run, validate_all
from trainium_cdk.charts.training import (
    ArchiveLoaderJob,
    DataLoaderJob,
    DistributedTrainingJob,
    ShellPod,
    SingleNodeTrainingJob,
    TensorBoard,
    VolcanoQueue,
    training_job,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import (
    DEFAULT_CATALOG,
    EFA_RESOURCE,
    EFA_TRAINING_TYPES,
    NEURON_RESOURCE,
    SUPPORTED_TRAINING_TYPES,
)
from trainium_cdk.runtime.jobs import JobSpec
from trainium_cdk.runtime.launcher import LAUNCHER, launch_command

COMMAND = ("python3", "train.py", "--epochs", "2")


def job(instance_type: str, nodes: int = 1, **kwargs) -> JobSpec:
    return JobSpec(
        name=kwargs.pop("name", "run"), instance=DEFAULT_CATALOG.get(instance_type), command=COMMAND,
        image="example.com/train:1", nodes=nodes, max_nodes=kwargs.pop("max_nodes", 4), group="train", **kwargs,
    )


def synth(chart_class, **props) -> list[dict]:
    app = cdk8s.Testing.app()
    return cdk8s.Testing.synth(chart_class(app, "test", **props))


def _container(pod_spec: dict) -> dict:
    (container,) = pod_spec["containers"]
    return container


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_single_node_job_requests_every_neuron_device(instance_type):
    spec = DEFAULT_CATALOG.get(instance_type)
    (manifest,) = synth(SingleNodeTrainingJob, job=job(instance_type))
    validate_all([manifest])
    pod = manifest["spec"]["template"]["spec"]
    container = _container(pod)
    assert container["resources"]["limits"] == {NEURON_RESOURCE: str(spec.neuron_devices)}
    assert as_run(container) == launch_command(COMMAND)
    assert _env(container)["NPROC_PER_NODE"] == str(spec.neuron_cores)
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": instance_type, "trainium-cdk/compute-group": "train"}
    assert {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"name": "data", "mountPath": "/fsx"} in container["volumeMounts"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "fsx-lustre"}} in pod["volumes"]
    assert not any(name.startswith("FI_") for name in _env(container))  # no EFA on one node
    assert manifest["metadata"]["labels"]["trainium-cdk/rank"] == "0"


@pytest.mark.parametrize("instance_type", EFA_TRAINING_TYPES)
def test_distributed_job_requests_all_devices_and_efa(instance_type):
    spec = DEFAULT_CATALOG.get(instance_type)
    (manifest,) = synth(DistributedTrainingJob, job=job(instance_type, nodes=4))
    for task in manifest["spec"]["tasks"]:
        container = _container(task["template"]["spec"])
        assert container["resources"]["limits"] == {
            NEURON_RESOURCE: str(spec.neuron_devices), EFA_RESOURCE: str(spec.efa_interfaces)
        }
        env = _env(container)
        assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["FI_EFA_FORK_SAFE"] == "1"
        assert env["CCOM_SOCKET_IFNAME"] == "eth0"
        # Node count, rank and address come from Volcano at run time, never fixed here.
        assert not {"WORLD_SIZE", "NNODES", "MASTER_ADDR", "NODE_RANK"} & set(env)
        assert env["NPROC_PER_NODE"] == str(spec.neuron_cores)
        assert as_run(container) == launch_command(COMMAND)


def test_volcano_job_field_by_field():
    (manifest,) = synth(DistributedTrainingJob, job=job("trn1.32xlarge", nodes=3, retries=5), queue="research")
    assert manifest["apiVersion"] == "batch.volcano.sh/v1alpha1" and manifest["kind"] == "Job"
    spec = manifest["spec"]
    assert spec["schedulerName"] == "volcano"
    assert spec["queue"] == "research"
    assert spec["minAvailable"] == 3  # the gang is the whole job
    assert sum(t["replicas"] for t in spec["tasks"]) == 3
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [("leader", 1), ("worker", 2)]
    assert spec["maxRetry"] == 5
    assert {"event": "PodFailed", "action": "RestartJob"} in spec["policies"]
    assert set(spec["plugins"]) == {"svc", "env"}
    leader, worker = spec["tasks"]
    assert leader["template"]["metadata"]["labels"]["trainium-cdk/rank"] == "0"
    assert worker["template"]["metadata"]["labels"]["trainium-cdk/rank"] == "worker"
    assert _env(_container(leader["template"]["spec"]))["TRN_NODE_RANK_OFFSET"] == "0"
    assert _env(_container(worker["template"]["spec"]))["TRN_NODE_RANK_OFFSET"] == "1"
    assert as_run(_container(leader["template"]["spec"]))[2] == LAUNCHER
    for task in spec["tasks"]:
        assert task["template"]["spec"]["restartPolicy"] == "Never"  # failures go to the job policy
        # The pod template is core Kubernetes: validate it as a Pod.
        validate_all([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": task["template"]["spec"]}])


@pytest.mark.parametrize("nodes", [2, 5, 8])
def test_gang_size_equals_node_count(nodes):
    (manifest,) = synth(DistributedTrainingJob, job=job("trn1n.32xlarge", nodes=nodes, max_nodes=8))
    assert manifest["spec"]["minAvailable"] == nodes
    assert sum(t["replicas"] for t in manifest["spec"]["tasks"]) == nodes


def test_cache_sets_get_separate_directories():
    a = _env(_container(synth(SingleNodeTrainingJob, job=job("trn1.32xlarge", cache_set="bert"))[0]["spec"]["template"]["spec"]))
    b = _env(_container(synth(SingleNodeTrainingJob, job=job("trn1.32xlarge", cache_set="gpt"))[0]["spec"]["template"]["spec"]))
    assert a["TRN_CACHE_DIR"] == "/fsx/neuron-cache/bert"
    assert b["TRN_CACHE_DIR"] == "/fsx/neuron-cache/gpt"


def test_precompile_is_asked_of_the_launcher():
    (manifest,) = synth(SingleNodeTrainingJob, job=job("trn1.32xlarge", precompile=True))
    assert _env(_container(manifest["spec"]["template"]["spec"]))["TRN_PRECOMPILE"] == "1"
    (manifest,) = synth(SingleNodeTrainingJob, job=job("trn1.32xlarge"))
    assert "TRN_PRECOMPILE" not in _env(_container(manifest["spec"]["template"]["spec"]))


def test_processes_per_node_override():
    (manifest,) = synth(SingleNodeTrainingJob, job=job("trn2.48xlarge", processes_per_node=16))
    assert _env(_container(manifest["spec"]["template"]["spec"]))["NPROC_PER_NODE"] == "16"


def test_without_shared_storage_nothing_is_mounted_and_the_cache_stays_on_the_node():
    for chart, nodes in ((SingleNodeTrainingJob, 1), (DistributedTrainingJob, 2)):
        (manifest,) = synth(chart, job=job("trn1.32xlarge", nodes=nodes, shared_storage=False))
        pods = [manifest["spec"]["template"]["spec"]] if nodes == 1 else [t["template"]["spec"] for t in manifest["spec"]["tasks"]]
        for pod in pods:
            assert [v["name"] for v in pod["volumes"]] == ["dshm"]
            assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
            env = _env(_container(pod))
            assert env["TRN_CACHE_DIR"] == "/var/tmp/neuron-compile-cache/default"
            assert "HF_HOME" not in env


def test_autocast_with_a_bf16_variable_is_rejected():
    with pytest.raises(ConfigError, match="env.XLA_DOWNCAST_BF16 = '1': unset"):
        JobSpec(
            name="bert", instance=DEFAULT_CATALOG.get("trn1.32xlarge"), command=("bert.py", "--enable_pt_autocast"),
            image="x", env={"XLA_DOWNCAST_BF16": "1"},
        )


def test_training_job_picks_the_kind():
    app = cdk8s.Testing.app()
    assert isinstance(training_job(app, "a", job=job("trn1.32xlarge", nodes=2)), DistributedTrainingJob)
    assert isinstance(training_job(app, "b", job=job("trn1.2xlarge"), queue="q"), SingleNodeTrainingJob)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 5, "max_nodes": 4}, "nodes = 5: between 1 and max_nodes of group train (4)"),
        ({"cache_set": "team/bert"}, "cache_set = 'team/bert': one directory name"),
        ({"cache_set": ".."}, "cache_set = '..'"),
        ({"processes_per_node": 33}, "processes_per_node = 33: between 1 and the 32 NeuronCores of trn1.32xlarge"),
        ({"name": "Bad_Name"}, "name = 'Bad_Name'"),
        ({"retries": -1}, "retries = -1"),
        ({"nodes": 2, "cpu_only": True}, "nodes = 2: 1 for a CPU-only job"),
    ],
)
def test_bad_job_input(kwargs, message):
    with pytest.raises(ConfigError) as caught:
        job("trn1.32xlarge", **kwargs)
    assert message in str(caught.value)


def test_cpu_work_asks_for_no_device_and_tolerates_no_trainium_node():
    (obj,) = synth(SingleNodeTrainingJob, job=job("trn2.48xlarge", cpu_only=True, processes_per_node=1))
    pod = obj["spec"]["template"]["spec"]
    validate_all([obj])
    assert _container(pod)["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert _env(_container(pod))["NPROC_PER_NODE"] == "1"


def test_multi_node_needs_efa():
    with pytest.raises(ConfigError, match="trn1.2xlarge has no EFA"):
        job("trn1.2xlarge", nodes=2)


def test_queue():
    (queue,) = synth(VolcanoQueue, name="training", weight=2)
    assert (queue["apiVersion"], queue["kind"]) == ("scheduling.volcano.sh/v1beta1", "Queue")
    assert queue["spec"] == {"weight": 2, "reclaimable": False}
    assert "namespace" not in queue["metadata"]  # queues are cluster-scoped


def test_data_loader_syncs_s3_into_the_volume():
    manifests = synth(DataLoaderJob, s3_uri="s3://bucket/wiki/", path="datasets/wiki")
    validate_all(manifests)
    job_manifest = next(m for m in manifests if m["kind"] == "Job")
    pod = job_manifest["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "data-loader"
    assert _container(pod)["args"] == ["s3", "sync", "--only-show-errors", "s3://bucket/wiki/", "/fsx/datasets/wiki"]
    with pytest.raises(ConfigError, match="s3_uri"):
        synth(DataLoaderJob, s3_uri="bucket/wiki")
    with pytest.raises(ConfigError, match="path"):
        synth(DataLoaderJob, s3_uri="s3://b/x", path="/etc")


def test_archive_loader_downloads_then_unpacks_on_the_volume():
    manifests = synth(ArchiveLoaderJob, s3_uri="s3://public-bucket/corpora/wiki.tar", path="datasets", name="stage-wiki")
    validate_all(manifests)
    (job_manifest,) = manifests  # no ServiceAccount: an anonymous request needs none
    assert job_manifest["metadata"]["name"] == "stage-wiki"
    pod = job_manifest["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    (download,) = pod["initContainers"]
    assert download["image"] == versions.AWS_CLI_IMAGE
    assert download["args"] == ["s3", "cp", "--no-progress", "--no-sign-request", "s3://public-bucket/corpora/wiki.tar",
                                "/fsx/datasets/.wiki.tar"]
    unpack = _container(pod)
    assert unpack["image"] == versions.BUSYBOX_IMAGE
    assert unpack["command"][:2] == ["sh", "-c"] and unpack["command"][4:] == ["/fsx/datasets/.wiki.tar", "/fsx/datasets"]
    for container in (download, unpack):
        assert container["volumeMounts"] == [{"name": "data", "mountPath": "/fsx"}]
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "fsx-lustre"}}]
    # A private bucket: the data loader's service account (Pod Identity) signs the request.
    (signed_job,) = synth(ArchiveLoaderJob, s3_uri="s3://b/wiki.tar", service_account="data-loader")
    signed = signed_job["spec"]["template"]["spec"]
    assert signed["serviceAccountName"] == "data-loader" and "--no-sign-request" not in signed["initContainers"][0]["args"]
    for bad, field in (({"s3_uri": "s3://b/wiki/"}, "s3_uri"), ({"s3_uri": "b/wiki.tar"}, "s3_uri"),
                       ({"path": "/etc"}, "path"), ({"path": "../x"}, "path"), ({"name": "Stage_Wiki"}, "name")):
        with pytest.raises(ConfigError) as err:
            synth(ArchiveLoaderJob, **{"s3_uri": "s3://b/wiki.tar", **bad})
        assert err.value.field == f"ArchiveLoaderJob.{field}"


def test_archive_loader_unpacks_what_it_downloaded(tmp_path):
    """The two containers' commands, run in order with /fsx a folder here and `aws` a stand-in that
    copies from a local "bucket": the archive lands in its directory, unpacked, and is removed."""
    import io
    import subprocess
    import tarfile

    bucket, fsx, bin_dir = tmp_path / "bucket", tmp_path / "fsx", tmp_path / "bin"
    for d in (bucket, fsx, bin_dir):
        d.mkdir()
    with tarfile.open(bucket / "wiki.tar", "w") as tar:
        data = b"tokens"
        member = tarfile.TarInfo("wiki/part_training_0.hdf5")
        member.size, member.uid, member.gid = len(data), 4242, 4242  # an owner only CAP_CHOWN could restore
        tar.addfile(member, io.BytesIO(data))
    aws = bin_dir / "aws"
    aws.write_text('#!/bin/sh\n[ "$1 $2" = "s3 cp" ] || exit 9\nfor a; do src=$dest; dest=$a; done\n'
                   f'mkdir -p "$(dirname "$dest")" && cp "{bucket}/${{src##*/}}" "$dest"\n')
    aws.chmod(0o755)
    (manifest,) = synth(ArchiveLoaderJob, s3_uri="s3://public-bucket/wiki.tar", path="datasets/text")
    pod = manifest["spec"]["template"]["spec"]
    here = lambda words: [w.replace("/fsx", str(fsx)) for w in words]  # noqa: E731
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["aws", *here(pod["initContainers"][0]["args"])], env=env, check=True)
    assert (fsx / "datasets" / "text" / ".wiki.tar").is_file()
    subprocess.run(here(_container(pod)["command"]), env=env, check=True)
    assert (fsx / "datasets" / "text" / "wiki" / "part_training_0.hdf5").read_bytes() == b"tokens"
    assert not (fsx / "datasets" / "text" / ".wiki.tar").exists()


def test_shell_pod_mounts_the_volume():
    (pod,) = synth(ShellPod, image="example.com/train:1")
    validate_all([pod])
    assert {"name": "data", "mountPath": "/fsx"} in _container(pod["spec"])["volumeMounts"]


def test_tensorboard_is_cluster_internal():
    manifests = synth(TensorBoard, log_dir="runs")
    validate_all(manifests)
    service = next(m for m in manifests if m["kind"] == "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 6006, "targetPort": 6006}]
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    container = _container(deployment["spec"]["template"]["spec"])
    assert "--logdir=/fsx/runs" in container["command"]
    assert "env" not in container  # no password or token baked in
    assert not any(m["kind"] == "Ingress" for m in manifests)


def test_a_configured_cpu_only_job_runs_on_one_node_whatever_its_group_has():
    from tests.support.helpers import config_with
    from trainium_cdk.app.config.workload_settings import TrainingJobSettings

    config = config_with(group={"nodes": 2})
    spec = config.job_spec(TrainingJobSettings(name="prep", command=("prepare.py",), cpu_only=True), image="x:1")
    assert (spec.nodes, spec.cpu_only) == (1, True)
