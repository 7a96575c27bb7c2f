"""Every pod template the project emits lands on a node group of the synthesized EKS stack, and that
node group reaches what the pod mounts.

Pod templates: the cdk8s charts as `make synth` writes them to dist/ (the same code path the EKS stack
installs), and the jobs `trn submit --backend eks` renders (workloads.render_job) for every
compute group. Node groups: the EKS stack's managed node groups, read by the reachability model.
"""

from __future__ import annotations

import cdk8s
import pytest
import yaml

from tests.support.apps import VARIANTS, synthesized
from tests.support.reachability import LUSTRE_PORTS, Reachability
from tests.support.scheduling import PodTemplate, lands_on, pod_templates, requests, why_not
from trainium_cdk.app.config.workload_settings import TrainingJobSettings
from trainium_cdk.app.dist import write_dist
from trainium_cdk.app.workloads import eks_job_spec, render_job
from trainium_cdk.charts.fsx_storage import DEFAULT_CLAIM_NAME
from trainium_cdk.charts.training import training_job


@pytest.fixture(scope="module", params=sorted(VARIANTS), ids=sorted(VARIANTS))
def app(request, tmp_path_factory):
    result = synthesized(request.param)
    model = Reachability.from_dir(result.outdir)
    out = tmp_path_factory.mktemp("dist")
    objects = []
    for path in write_dist(result.config, out):
        if path.name.endswith(".k8s.yaml"):
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
            objects.append((path.relative_to(out).as_posix(), docs))
    config = result.config
    for group in config.compute_groups:
        jobs = ["mlp"] + (["mlp-distributed"] if config.spec(group).has_efa else [])
        for job in jobs:
            nodes = 2 if job == "mlp-distributed" else 1
            objects.append((f"render_job({group.name}, {job})",
                            render_job(config, name=f"cli-{job}", group=group.name, job=job, nodes=nodes,
                                       image="example.com/train:1")))
    # CPU work (a recipe's data preparation, or a workloads job with cpu_only: true) as `trn submit` renders it.
    cpu = eks_job_spec(config, TrainingJobSettings(name="cli-data", command=("prepare.py",), cpu_only=True),
                       image="example.com/train:1")
    objects.append(("cpu_only job", training_job(cdk8s.App(), "cli-data", job=cpu).to_json()))
    pods = [p for source, docs in objects for p in pod_templates(docs, source)]
    return result, model, objects, pods


def _daemon_sets(pods: list[PodTemplate]) -> list[PodTemplate]:
    return [p for p in pods if p.kind == "DaemonSet"]


def test_the_model_sees_every_kind_of_pod(app):
    _, model, _, pods = app
    names = {p.name for p in pods}
    for expected in ("neuron-device-plugin", "aws-efa-k8s-device-plugin", "data-loader", "data-shell", "tensorboard",
                     "mlp", "cli-mlp"):
        assert expected in names, expected
    assert any(p.name.endswith("/leader") for p in pods) and any(p.name.endswith("/worker") for p in pods)
    assert {n.instance_type for n in model.of_backend("eks")} >= {"m7i.large"}


def test_every_pod_lands_on_a_node_group(app):
    _, model, _, pods = app
    nodes = model.of_backend("eks")
    stranded = {
        str(pod): {str(n): why_not(pod, n, _daemon_sets(pods)) for n in nodes}
        for pod in pods if not lands_on(pod, nodes, _daemon_sets(pods))
    }
    assert stranded == {}


def test_training_pods_land_only_on_their_compute_group(app):
    result, model, _, pods = app
    nodes = model.of_backend("eks")
    for pod in pods:
        if "aws.amazon.com/neuron" in requests(pod.spec):
            (node,) = lands_on(pod, nodes, _daemon_sets(pods))
            assert node.labels.get("trainium-cdk/compute-group"), pod


def test_cpu_work_lands_on_the_system_nodes_and_no_trainium_node(app):
    _, model, _, pods = app
    (pod,) = [p for p in pods if p.name == "cli-data"]
    landed = lands_on(pod, model.of_backend("eks"), _daemon_sets(pods))
    assert landed and all("trainium-cdk/compute-group" not in n.labels for n in landed), landed
    assert all(n.instance_type == "m7i.large" for n in landed)
    assert DEFAULT_CLAIM_NAME in pod.claims  # and the next test: those nodes reach the file system


def test_the_node_groups_a_pod_lands_on_reach_what_it_mounts(app):
    _, model, _, pods = app
    (fs_groups,) = model.file_systems.values()
    unreachable = []
    for pod in pods:
        if DEFAULT_CLAIM_NAME not in pod.claims:
            continue
        for node in lands_on(pod, model.of_backend("eks"), _daemon_sets(pods)):
            for port in LUSTRE_PORTS:
                if not (model.reaches(node.primary, fs_groups, "tcp", port)
                        and model.reaches(fs_groups, node.primary, "tcp", port)):
                    unreachable.append(f"{pod} on {node}: tcp/{port}")
    assert unreachable == []


def test_every_container_we_emit_has_requests_and_a_security_context(app):
    _, _, _, pods = app
    missing = []
    for pod in pods:
        for c in [*pod.containers, *(pod.spec.get("initContainers") or [])]:
            wanted = requests({"containers": [c]})
            if not {"cpu", "memory"} <= set(wanted):
                missing.append(f"{pod} {c['name']}: requests {sorted(wanted)}")
            context = c.get("securityContext") or {}
            if "allowPrivilegeEscalation" not in context and not context.get("privileged"):
                missing.append(f"{pod} {c['name']}: no securityContext")
    assert missing == []


def test_training_pods_are_burstable_or_better_and_fit_baseline(app):
    _, _, _, pods = app
    training = [p for p in pods if "aws.amazon.com/neuron" in requests(p.spec)]
    assert training
    for pod in training:
        (c,) = pod.containers
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]), pod
        assert pod.spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        # Pod Security baseline: no privileged containers, host namespaces or host paths.
        assert not c["securityContext"].get("privileged")
        assert not any("hostPath" in v for v in pod.spec.get("volumes") or [])
        assert not pod.spec.get("hostNetwork") and not pod.spec.get("hostPID") and not pod.spec.get("hostIPC")


def test_workloads_live_in_the_training_namespace(app):
    _, _, objects, _ = app
    workloads = [o for _, docs in objects for o in docs
                 if o["kind"] in ("Job", "Pod", "Deployment", "PersistentVolumeClaim", "ServiceAccount", "Service")
                 and o["metadata"].get("namespace") != "kube-system"]
    assert workloads
    assert {o["metadata"].get("namespace") for o in workloads} == {"training"}
