"""NeuronDevicePlugin: RBAC, the DaemonSet on Neuron nodes, the scheduler extension, neuron-monitor."""

from __future__ import annotations

import json
from pathlib import Path

import cdk8s
import pytest
import yaml

from tests.support import paths
from tests.support.chart_helpers import (
    K8S_VERSION,
    SUPPORTED_VERSIONS,
    affinity_types,
    container,
    host_paths,
    of_kind,
    one,
    pod_spec,
    tolerations,
    validate_all,
)
from trainium_cdk.charts import NeuronDevicePlugin
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.names import HEALTH_TAINT_KEY

# And the health taint (not upstream's: the project's own): the plugin advertises the devices of a node not yet checked,
# for the health check's probe pod (tests/unit/node/test_node_health_probe.py).
HEALTH_TOLERATION = (HEALTH_TAINT_KEY, "Exists", "NoSchedule")
NEURON_TOLERATIONS = [("CriticalAddonsOnly", "Exists", None), ("aws.amazon.com/neuron", "Exists", "NoSchedule"),
                      HEALTH_TOLERATION]
# What the Neuron Helm chart pinned in versions.py deploys (its values, transcribed with their source).
NEURON_HELM_CHART = json.loads(
    (paths.DATA / "upstream" / "device-plugins.json").read_text())["neuron_helm_chart"]


@pytest.fixture(scope="module")
def default():
    chart = NeuronDevicePlugin(cdk8s.Testing.app(), "neuron")
    return chart, cdk8s.Testing.synth(chart)


@pytest.fixture(scope="module")
def full():
    chart = NeuronDevicePlugin(cdk8s.Testing.app(), "neuron", scheduler_extension=True, monitor=True)
    return chart, cdk8s.Testing.synth(chart)


def test_kubernetes_version_is_supported_by_the_validator():
    assert versions.KUBERNETES_VERSION in SUPPORTED_VERSIONS, (
        f"kubernetes-validate has no schemas for {versions.KUBERNETES_VERSION}; validating against {K8S_VERSION}"
    )


def test_every_object_is_valid(default, full):
    assert validate_all(default[1]) == 4
    assert validate_all(full[1]) == 4 + 5 + 7 + 2


def test_default_chart_is_the_plugin_and_its_rbac(default):
    chart, manifests = default
    assert sorted(m["kind"] for m in manifests) == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"]
    assert chart.scheduler_name is None and chart.monitor_service is None


def test_cluster_role_verbs(default):
    rules = {tuple(r["resources"]): sorted(r["verbs"]) for r in one(default[1], "ClusterRole")["rules"]}
    assert rules == {
        ("nodes",): ["get", "list", "watch"],
        ("events",): ["create", "patch"],
        ("pods",): ["get", "list", "patch", "update", "watch"],
        ("nodes/status",): ["patch", "update"],
    }
    assert all(r["apiGroups"] == [""] for r in one(default[1], "ClusterRole")["rules"])


def test_binding_ties_the_role_to_the_plugin_service_account(default):
    manifests = default[1]
    binding = one(manifests, "ClusterRoleBinding")
    account = one(manifests, "ServiceAccount")
    role = one(manifests, "ClusterRole")["metadata"]["name"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "kube-system"}
    ]
    assert pod_spec(one(manifests, "DaemonSet"))["serviceAccountName"] == account["metadata"]["name"]


def test_daemon_set(default):
    ds = one(default[1], "DaemonSet")
    spec, c = pod_spec(ds), container(ds)
    assert ds["metadata"]["namespace"] == "kube-system"
    assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"]
    assert c["image"] == versions.NEURON_DEVICE_PLUGIN_IMAGE
    assert spec["priorityClassName"] == "system-node-critical"
    assert tolerations(ds) == NEURON_TOLERATIONS
    assert c["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    paths = host_paths(ds)
    assert paths["/var/lib/kubelet/device-plugins"] == "/var/lib/kubelet/device-plugins"
    assert paths["/run"] == "/run"
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert set(c["resources"]["requests"]) == {"cpu", "memory"}


def test_daemon_set_runs_what_the_neuron_helm_chart_runs(full):
    """The image tags are the chart's, and the plugin gets the host paths, read-only mounts, priority and the
    (non-SageMaker) tolerations the chart gives it; the scheduler extension listens where the chart's does."""
    chart = NEURON_HELM_CHART
    ds = one(full[1], "DaemonSet", "neuron-device-plugin")
    assert container(ds)["image"] == chart["device_plugin"]["image"]
    assert host_paths(ds) == chart["device_plugin"]["host_paths"]
    read_only = {m["mountPath"] for m in container(ds)["volumeMounts"] if m.get("readOnly")}
    assert read_only == set(chart["device_plugin"]["read_only"])
    assert pod_spec(ds)["priorityClassName"] == chart["device_plugin"]["priority_class"]
    upstream = [(t["key"], t["operator"], t.get("effect")) for t in chart["device_plugin"]["tolerations"]]
    assert set(tolerations(ds)) == {t for t in upstream if not t[0].startswith("sagemaker.")} | {HEALTH_TOLERATION}
    extension = container(one(full[1], "Deployment", "k8s-neuron-scheduler"))
    assert extension["image"] == chart["scheduler"]["image"]
    assert {e["name"]: e["value"] for e in extension["env"]} == chart["scheduler"]["env"]


def test_affinity_lists_the_catalog_neuron_types(default):
    types = affinity_types(one(default[1], "DaemonSet"))
    assert types == list(DEFAULT_CATALOG.neuron_types())
    # Every type with a Neuron device, inference types included: the plugin is what offers their devices to pods.
    assert set(types) == {s.name for s in DEFAULT_CATALOG if s.neuron_devices > 0}
    assert {DEFAULT_CATALOG.get(t).for_training for t in types} == {True, False}


def test_instance_types_prop():
    chart = NeuronDevicePlugin(cdk8s.Testing.app(), "neuron", instance_types=("trn2.48xlarge",))
    assert affinity_types(one(cdk8s.Testing.synth(chart), "DaemonSet")) == ["trn2.48xlarge"]


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"instance_types": ()}, "NeuronDevicePlugin.instance_types"),
        ({"instance_types": "trn1.32xlarge"}, "NeuronDevicePlugin.instance_types"),
        ({"instance_types": ["trn1.32xlarge", ""]}, "NeuronDevicePlugin.instance_types[1]"),
        ({"scheduler_name": "Neuron_Scheduler"}, "NeuronDevicePlugin.scheduler_name"),
        ({"namespace": ""}, "NeuronDevicePlugin.namespace"),
    ],
)
def test_bad_props_raise_config_error(props, field):
    with pytest.raises(ConfigError) as err:
        NeuronDevicePlugin(cdk8s.Testing.app(), "neuron", **props)
    assert err.value.field == field


def test_scheduler_extension(full):
    chart, manifests = full
    assert chart.scheduler_name == "neuron-scheduler"
    extension = one(manifests, "Deployment", "k8s-neuron-scheduler")
    c = container(extension)
    assert c["image"] == versions.NEURON_SCHEDULER_IMAGE
    assert c["ports"] == [{"name": "http", "containerPort": 12345}]
    assert {"name": "PORT", "value": "12345"} in c["env"]
    service = one(manifests, "Service", "k8s-neuron-scheduler")
    assert service["spec"]["ports"] == [{"name": "http", "port": 12345, "targetPort": 12345}]
    assert service["spec"]["selector"] == extension["spec"]["template"]["metadata"]["labels"]
    role = one(manifests, "ClusterRole", "k8s-neuron-scheduler")
    assert {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]} in role["rules"]


def test_second_scheduler_uses_the_extension(full):
    manifests = full[1]
    config_map = one(manifests, "ConfigMap", "neuron-scheduler-config")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["profiles"] == [{"schedulerName": "neuron-scheduler"}]
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "http://k8s-neuron-scheduler.kube-system.svc.cluster.local:12345"
    assert (extender["filterVerb"], extender["bindVerb"], extender["ignorable"]) == ("filter", "bind", False)
    assert {r["name"] for r in extender["managedResources"]} == {
        "aws.amazon.com/neuron", "aws.amazon.com/neuroncore", "aws.amazon.com/neurondevice",
    }
    scheduler = one(manifests, "Deployment", "neuron-scheduler")
    c = container(scheduler)
    assert c["image"] == versions.KUBE_SCHEDULER_IMAGE
    assert f"v{versions.KUBERNETES_VERSION}." in c["image"]
    assert "--config=/etc/kubernetes/neuron-scheduler/config.yaml" in c["command"]
    assert pod_spec(scheduler)["volumes"] == [{"name": "config", "configMap": {"name": "neuron-scheduler-config"}}]
    bindings = of_kind(manifests, "ClusterRoleBinding")
    roles = {b["roleRef"]["name"] for b in bindings if b["subjects"][0]["name"] == "neuron-scheduler"}
    assert roles == {"system:kube-scheduler", "system:volume-scheduler", "neuron-scheduler"}


def test_monitor(full):
    chart, manifests = full
    ds = one(manifests, "DaemonSet", "neuron-monitor")
    c = container(ds)
    assert c["image"] == versions.NEURON_MONITOR_IMAGE
    assert c["ports"] == [{"name": "metrics", "containerPort": 8000}]
    assert c["args"] == ["--port", "8000"]
    assert tolerations(ds) == NEURON_TOLERATIONS
    assert affinity_types(ds) == list(DEFAULT_CATALOG.neuron_types())
    service = one(manifests, "Service", "neuron-monitor")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8000, "targetPort": 8000}]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == ds["spec"]["template"]["metadata"]["labels"]
    assert chart.monitor_service is not None


def test_every_workload_selects_its_own_pods(full):
    for workload in of_kind(full[1], "DaemonSet") + of_kind(full[1], "Deployment"):
        assert workload["spec"]["selector"]["matchLabels"] == workload["spec"]["template"]["metadata"]["labels"]
