"""EfaDevicePlugin: EFA instance types only, host network, the Neuron taint, a per-region image."""

from __future__ import annotations

import aws_cdk as cdk
import cdk8s
import pytest

from tests.support.chart_helpers import affinity_types, container, host_paths, one, pod_spec, tolerations, validate_all
from trainium_cdk.charts import EfaDevicePlugin
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG


@pytest.fixture(scope="module")
def manifests():
    return cdk8s.Testing.synth(EfaDevicePlugin(cdk8s.Testing.app(), "efa", region="us-east-1"))


@pytest.fixture(scope="module")
def daemon_set(manifests):
    return one(manifests, "DaemonSet")


def test_every_object_is_valid(manifests):
    assert validate_all(manifests) == 1


def test_affinity_lists_exactly_the_catalog_efa_types(daemon_set):
    types = affinity_types(daemon_set)
    assert types == list(DEFAULT_CATALOG.efa_types())
    # Nodes without EFA would crash-loop the plugin; every node with EFA needs it to offer its interfaces.
    assert {t for t in types if not DEFAULT_CATALOG.get(t).has_efa} == set()
    assert {s.name for s in DEFAULT_CATALOG if s.has_efa} == set(types) and types


def test_host_network_and_device_plugin_socket(daemon_set):
    assert daemon_set["metadata"]["namespace"] == "kube-system"
    assert pod_spec(daemon_set)["hostNetwork"] is True
    assert host_paths(daemon_set)["/var/lib/kubelet/device-plugins"] == "/var/lib/kubelet/device-plugins"
    assert host_paths(daemon_set)["/dev/infiniband/"] == "/dev/infiniband/"


def test_tolerates_efa_and_neuron_taints(daemon_set):
    assert tolerations(daemon_set) == [
        ("CriticalAddonsOnly", "Exists", None),
        ("aws.amazon.com/efa", "Exists", "NoSchedule"),
        ("aws.amazon.com/neuron", "Exists", "NoSchedule"),
    ]


def test_privileged_critical_pod(daemon_set):
    assert pod_spec(daemon_set)["priorityClassName"] == "system-node-critical"
    assert container(daemon_set)["securityContext"]["privileged"] is True


def test_image_comes_from_the_region_registry(daemon_set):
    image = container(daemon_set)["image"]
    assert image == versions.efa_device_plugin_image("us-east-1")
    assert image == (
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin:" + versions.EFA_DEVICE_PLUGIN_TAG
    )


def test_region_token_resolves_in_a_stack():
    stack = cdk.Stack(cdk.App(), "Cluster")
    chart = EfaDevicePlugin(cdk8s.Testing.app(), "efa", region=stack.region)
    (ds,) = cdk8s.Testing.synth(chart)
    validate_all([ds])
    image = stack.resolve(container(ds)["image"])
    assert image == {
        "Fn::Join": ["", [
            "602401143452.dkr.ecr.", {"Ref": "AWS::Region"},
            f".amazonaws.com/eks/aws-efa-k8s-device-plugin:{versions.EFA_DEVICE_PLUGIN_TAG}",
        ]]
    }


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"region": "us-west-2", "instance_types": []}, "EfaDevicePlugin.instance_types"),
        ({"region": "Oregon"}, "EfaDevicePlugin.region"),
        ({"region": "us-west-2", "namespace": "Kube_System"}, "EfaDevicePlugin.namespace"),
    ],
)
def test_bad_props_raise_config_error(props, field):
    with pytest.raises(ConfigError) as err:
        EfaDevicePlugin(cdk8s.Testing.app(), "efa", **props)
    assert err.value.field == field
