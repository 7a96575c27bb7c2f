"""The EKS health gate's on-node collective (trainium_cdk/node/kube_probe.py, charts/node_health.py): the probe pod the
checker starts on its own node, what it may do (RBAC, the admission policy), the device plugin that must advertise
the devices on a node not yet checked, and the checker against a stand-in API whose kubelet runs the probe against a
stand-in nccom-test: a probe that passes (tests/unit/node/test_node_health.py), fails, hangs or cannot start."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from tests.support.admission_cel import Request, evaluate
from tests.support.chart_helpers import validate_all
from tests.support.reachability import Reachability
from tests.support.scheduling import lands_on, pod_templates
from tests.unit.node.test_node_health import (  # noqa: F401 - eks_app is a fixture
    DATA,
    INSTANCE,
    NODE,
    PODS,
    StandInApi,
    _condition_patch,
    _expected,
    _first_type,
    _health_objects,
    _node_object,
    eks_app,
    host_tree,
    nccom_test,
    probe_calls,
    probe_pod,
    run_checker,
)
from trainium_cdk.charts.node_health import NAME, NODE_NAME_EXTRA, PROBE_DEADLINE_S
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.names import HEALTH_TAINT_KEY, NEURON_TAINT_KEY

USER = f"system:serviceaccount:kube-system:{NAME}"


# -- what the chart deploys ----------------------------------------------------------------------------------------

def test_the_probe_pod_holds_all_the_nodes_devices_in_the_tracks_image_and_nothing_more(eks_app):
    """Per instance type of the compute groups: every Neuron device of the type (so no training pod can take one
    meanwhile), the track's Neuron training image (the one the nodes pre-pull), the collective over the type's
    NeuronCores, bounded; no token, no host path, no privilege. It validates as the checker creates it."""
    result, model = eks_app
    config = result.config
    for group in config.compute_groups:
        spec = config.spec(group)
        pod = probe_pod(model, group.instance_type)
        assert validate_all([pod]) == 1
        assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == group.instance_type.replace(".", "-")
        (container,) = pod["spec"]["containers"]
        assert container["resources"] == {"requests": {NEURON_TAINT_KEY: str(spec.neuron_devices)},
                                          "limits": {NEURON_TAINT_KEY: str(spec.neuron_devices)}}
        assert container["image"] == versions.neuron_public_training_image(config.neuron_track.name)
        assert container["command"] == ["python3", "/opt/trainium-cdk/kube_probe.py",
                                        "--cores", str(min(spec.neuron_core_counts)), "--timeout", "300"]
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]}}
        assert pod["spec"]["nodeName"] == NODE and pod["spec"]["restartPolicy"] == "Never"
        assert pod["spec"]["activeDeadlineSeconds"] == PROBE_DEADLINE_S == 1200
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert pod["spec"]["volumes"] == [{"name": "program", "configMap": {"name": NAME}}]
        assert {t["key"] for t in pod["spec"]["tolerations"]} == {HEALTH_TAINT_KEY, NEURON_TAINT_KEY}


def test_the_checker_may_touch_pods_only_in_its_namespace(eks_app):
    _, model = eks_app
    objects = _health_objects(model)
    assert validate_all(objects) == len(objects)
    (role,) = [o for o in objects if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    (binding,) = [o for o in objects if o["kind"] == "RoleBinding"]
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": "kube-system"}]


def test_the_neuron_device_plugin_runs_on_a_node_not_yet_checked(eks_app):
    """The probe pod needs the node's devices advertised before the health taint comes off: the device plugin's pod
    lands on every compute group's node while it is still unchecked (training pods do not: test_node_health.py)."""
    _, model = eks_app
    groups = [n for n in model.of_backend("eks") if n.labels.get("trainium-cdk/compute-group")]
    manifests = [o for _, objects in model.manifests() for o in objects]
    (plugin,) = [p for p in pod_templates([o for o in manifests if o["kind"] == "DaemonSet"
                                           and o["metadata"]["name"] == "neuron-device-plugin"])]
    assert groups and all(lands_on(plugin, [n], checked=False) == [n] for n in groups)


# -- the admission policy --------------------------------------------------------------------------------------------

def test_the_admission_policy_admits_every_groups_probe_as_the_checker_creates_it(eks_app):
    """The policy's rows (who may do what) are tests/unit/charts/test_admission_cel.py's, evaluated by a CEL engine;
    here: every instance type's probe, as the checker creates it on its node, is one the policy admits."""
    result, model = eks_app
    objects = _health_objects(model)
    (policy,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert policy["spec"]["failurePolicy"] == "Fail"  # an expression that errs refuses, too
    for group in result.config.compute_groups:
        pod = probe_pod(model, group.instance_type)
        request = Request("CREATE", "pods", USER, namespace="kube-system", object=pod,
                          extra={NODE_NAME_EXTRA: [NODE]})
        verdict = evaluate(policy, request, binding)
        assert verdict.applies and verdict.allowed, (group.name, verdict)
        other = Request("CREATE", "pods", USER, namespace="kube-system", object=pod, extra={NODE_NAME_EXTRA: ["other"]})
        assert not evaluate(policy, other, binding).allowed


# -- the checker: probes that fail ------------------------------------------------------------------------------------

def _good_node(tmp_path, model: Reachability, group: str) -> Any:
    devices, cores, efa = _expected(model, group)
    return host_tree(tmp_path / "host", devices=devices, cores_per_device=cores // devices, efa=efa, lustre=False)


def _marked_and_replaced(api: StandInApi, before: list[tuple[str, str, str, Any]], message: str) -> None:
    """After the calls ``before``: the condition, then the Karpenter node deleted; the health taint untouched."""
    path = f"/api/v1/nodes/{NODE}"
    assert api.requests[:len(before)] == before
    assert [(m, p, t) for m, p, t, _ in api.requests[len(before):]] == [
        ("PATCH", f"{path}/status", "application/strategic-merge-patch+json"), ("GET", path, "application/json"),
        ("DELETE", path, "application/json")]
    assert [b for m, _, _, b in api.requests[len(before):] if m != "PATCH"] == [None, None]
    assert _condition_patch(api) == {"status": {"conditions": [{
        "type": "TrainiumHealthy", "status": "False", "reason": "HealthCheckFailed", "message": message}]}}


def test_a_node_whose_probe_collective_fails_keeps_its_taint_and_is_replaced(tmp_path, eks_app):
    _, model = eks_app
    group = _first_type(model)
    devices, cores, _ = _expected(model, group)
    nccom_test(tmp_path / "bin", DATA / "nccom_test_failure.txt", tmp_path / "nccom.log", exit_code=1)
    api = StandInApi(tmp_path, _node_object(karpenter=True, neuron_devices=devices), bin_dir=tmp_path / "bin")
    result = run_checker(tmp_path, model, group, _good_node(tmp_path, model, group), api)
    assert result.returncode == 1
    line = f"collective: nccom-test all-reduce over {cores} NeuronCores failed (exit 1): 1 errors found - test failed"
    assert result.stderr.splitlines() == [f"trainium-cdk health: FAIL {line}"]
    _marked_and_replaced(api, [("GET", f"/api/v1/nodes/{NODE}", "application/json", None), *probe_calls(model, group)],
                         line)
    assert result.stdout.splitlines()[-1] == f"trainium-cdk health: node {NODE} deleted: Karpenter replaces it"


def test_a_probe_that_never_finishes_fails_the_node_at_the_checkers_bound_and_is_deleted(tmp_path, eks_app):
    """A probe pod that stays Running (a collective the probe's own timeout did not end, a kubelet that never
    reports): the checker stops waiting at its bound (the pod's deadline and a minute; here shortened), deletes the
    pod, and fails the node."""
    _, model = eks_app
    group = _first_type(model)
    devices, _, _ = _expected(model, group)
    api = StandInApi(tmp_path, _node_object(karpenter=True, neuron_devices=devices), kubelet="hang")
    api_env = api.env
    api.env = lambda: {**api_env(), "TRN_HEALTH_PROBE_WAIT": "0.5"}  # type: ignore[method-assign]
    started = time.monotonic()
    result = run_checker(tmp_path, model, group, _good_node(tmp_path, model, group), api)
    assert time.monotonic() - started < 30
    assert result.returncode == 1
    line = "collective: the probe pod did not finish in time (phase Running: no reason given)"
    assert result.stderr.splitlines() == [f"trainium-cdk health: FAIL {line}"]
    calls = probe_calls(model, group)
    polls = [r for r in api.requests if r == calls[2]]  # the reads of the pod while it ran
    assert len(polls) >= 2 and api.requests[:len(calls) + len(polls)] == [
        ("GET", f"/api/v1/nodes/{NODE}", "application/json", None), *probe_calls(model, group, polls=len(polls))]
    assert api.pods == {}  # deleted
    _marked_and_replaced(api, api.requests[:len(calls) + len(polls)], line)


def test_a_node_whose_devices_are_never_advertised_fails_without_a_probe(tmp_path, eks_app):
    """The device plugin never advertised the devices (its pod did not start, or found none): a pod with spec.nodeName
    would be rejected by the kubelet, so none is created; after the wait (here shortened) the node fails with a line
    of its own."""
    _, model = eks_app
    group = _first_type(model)
    devices, _, _ = _expected(model, group)
    api = StandInApi(tmp_path, _node_object(karpenter=True, neuron_devices=0))
    api_env = api.env
    api.env = lambda: {**api_env(), "TRN_HEALTH_ADVERTISE_TIMEOUT": "0.3"}  # type: ignore[method-assign]
    result = run_checker(tmp_path, model, group, _good_node(tmp_path, model, group), api)
    assert result.returncode == 1
    line = (f"collective: the probe pod cannot start: the node does not advertise {NEURON_TAINT_KEY}: {devices} (it has "
            "0) within 0.3 s (the Neuron device plugin has not registered the devices)")
    assert result.stderr.splitlines() == [f"trainium-cdk health: FAIL {line}"]
    node = ("GET", f"/api/v1/nodes/{NODE}", "application/json", None)
    reads = next(i for i, r in enumerate(api.requests) if r != node)
    assert reads >= 3 and not any(p.startswith(PODS) for _, p, _, _ in api.requests)
    _marked_and_replaced(api, api.requests[:reads], line)


def test_a_probe_image_that_cannot_run_replaces_no_node(tmp_path, eks_app):
    """The probe's image lacks nccom-test (an image other than the Neuron training image): every replacement would
    fail the same way, so the node is marked and left tainted, and says why."""
    _, model = eks_app
    group = _first_type(model)
    devices, _, _ = _expected(model, group)
    (tmp_path / "bin").mkdir()
    api = StandInApi(tmp_path, _node_object(karpenter=True, neuron_devices=devices), bin_dir=tmp_path / "bin")
    result = run_checker(tmp_path, model, group, _good_node(tmp_path, model, group), api)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "trainium-cdk health: FAIL probe: no nccom-test in the probe pod's image (the Neuron training image installs "
        "aws-neuronx-tools)"]
    # The probe deleted; the node marked, and kept.
    assert api.requests[:-1] == [("GET", f"/api/v1/nodes/{NODE}", "application/json", None), *probe_calls(model, group)]
    assert _condition_patch(api)["status"]["conditions"][0]["message"] == (
        "probe: no nccom-test in the probe pod's image (the Neuron training image installs aws-neuronx-tools)")
    assert re.fullmatch(rf"trainium-cdk health: node {NODE} left tainted: the probe pod could not run here, .*",
                        result.stdout.splitlines()[-1])


def test_the_probe_reads_what_the_trn2_catalog_says():
    """trn2.48xlarge: 16 devices, the collective over its 64 logical NeuronCores (nccom-test's ranks at LNC=2)."""
    from cdk8s import App

    from trainium_cdk.charts.node_health import NodeHealthCheck, NodeHealthProps

    spec = DEFAULT_CATALOG.get("trn2.48xlarge")
    chart = NodeHealthCheck(App(), "x", probe_image="example.com/neuron:1", groups=[NodeHealthProps(
        instance_type=spec.name, devices=spec.neuron_devices, cores=spec.neuron_core_counts,
        efa_interfaces=spec.efa_interfaces)])
    pod = chart.probes["trn2.48xlarge"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {NEURON_TAINT_KEY: "16"}
    assert pod["spec"]["containers"][0]["command"][3] == "64"
    assert json.loads(chart.to_json()[0]["data"]["probe-trn2-48xlarge.json"]) == pod
    without = NodeHealthCheck(App(), "y", groups=[NodeHealthProps(instance_type="trn2.48xlarge", devices=16, cores=(64,),
                                                                  efa_interfaces=16)])
    assert without.probes == {} and set(without.to_json()[0]["data"]) == {"health_check.py"}


def test_a_probe_left_by_a_stopped_checker_is_replaced_by_a_new_one(tmp_path, eks_app):
    """A checker replaced mid-probe (a DaemonSet update) left its probe pod: the new checker's create meets it (409),
    deletes it and creates its own, which then runs as usual."""
    _, model = eks_app
    group = _first_type(model)
    devices, _, _ = _expected(model, group)
    nccom_test(tmp_path / "bin", DATA / "nccom_test_allr_one_node.txt", tmp_path / "nccom.log")
    api = StandInApi(tmp_path, _node_object(karpenter=True, neuron_devices=devices), bin_dir=tmp_path / "bin")
    pod = probe_pod(model, group)
    api.pods[pod["metadata"]["name"]] = {**pod, "status": {"phase": "Running"}}
    result = run_checker(tmp_path, model, group, _good_node(tmp_path, model, group), api)
    assert result.returncode == 0, result.stderr
    advertised, create, *rest = probe_calls(model, group)
    assert api.requests[:-2] == [
        ("GET", f"/api/v1/nodes/{NODE}", "application/json", None), advertised, create,
        ("DELETE", f"{PODS}/{pod['metadata']['name']}", "application/json", None), create, *rest]
    assert [m for m, *_ in api.requests[-2:]] == ["GET", "PATCH"]  # the taint off
