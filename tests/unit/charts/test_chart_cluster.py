"""cluster_charts and write_manifests: every cluster chart, once each, and deterministic YAML files."""

from __future__ import annotations

import aws_cdk as cdk
import cdk8s
import pytest
import yaml

from tests.support.chart_helpers import container, of_kind, validate_all
from trainium_cdk.charts import (
    EFA_CHART_ID,
    FSX_CHART_ID,
    NAMESPACE_CHART_ID,
    NEURON_CHART_ID,
    EfaDevicePlugin,
    FsxStorage,
    FsxStorageProps,
    NeuronDevicePlugin,
    TrainingNamespace,
    cluster_charts,
    write_manifests,
)
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import BUILTIN_INSTANCE_TYPES, Catalog

STORAGE = FsxStorageProps(
    subnet_id="subnet-0123456789abcdef0",
    security_group_ids=("sg-0aaaaaaaaaaaaaaaa",),
    file_system_id="fs-0123456789abcdef0",
    dns_name="fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
    mount_name="abcdefgh",
)
ARGS = {"region": "us-west-2", "storage": STORAGE, "scheduler_extension": True, "monitor": True}


@pytest.fixture(scope="module")
def charts():
    return cluster_charts(cdk8s.Testing.app(), **ARGS)


@pytest.fixture(scope="module")
def manifests(charts):
    return [m for chart in charts for m in cdk8s.Testing.synth(chart)]


def test_every_chart_once_with_stable_ids(charts):
    assert [(type(c), c.node.id) for c in charts] == [
        (TrainingNamespace, NAMESPACE_CHART_ID), (NeuronDevicePlugin, NEURON_CHART_ID),
        (EfaDevicePlugin, EFA_CHART_ID), (FsxStorage, FSX_CHART_ID),
    ]


def test_training_namespace_enforces_baseline_and_audits_restricted(manifests):
    (namespace,) = of_kind(manifests, "Namespace")
    labels = namespace["metadata"]["labels"]
    assert namespace["metadata"]["name"] == "training"
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == f"v{versions.KUBERNETES_VERSION}"
    (claim,) = of_kind(manifests, "PersistentVolumeClaim")
    assert claim["metadata"]["namespace"] == "training"


def test_every_object_is_valid(manifests):
    assert validate_all(manifests) == len(manifests) > 20


def test_exactly_one_neuron_device_plugin_daemon_set(manifests):
    daemon_sets = of_kind(manifests, "DaemonSet")
    assert [container(d)["image"] for d in daemon_sets].count(versions.NEURON_DEVICE_PLUGIN_IMAGE) == 1
    assert [d["metadata"]["name"] for d in daemon_sets] == [
        "neuron-device-plugin", "neuron-monitor", "aws-efa-k8s-device-plugin",
    ]


def test_object_names_are_unique(manifests):
    keys = [(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in manifests]
    assert len(keys) == len(set(keys))


def test_storage_is_optional_and_takes_a_mapping():
    charts = cluster_charts(cdk8s.Testing.app(), region="us-west-2")
    assert [c.node.id for c in charts] == [NAMESPACE_CHART_ID, NEURON_CHART_ID, EFA_CHART_ID]
    (_, _, _, fsx) = cluster_charts(cdk8s.Testing.app(), region="us-west-2", storage=STORAGE.as_kwargs())
    assert fsx.claim_name == "fsx-lustre"


def test_no_efa_plugin_for_a_catalog_without_efa_types():
    catalog = Catalog(s for s in BUILTIN_INSTANCE_TYPES if not s.has_efa)
    charts = cluster_charts(cdk8s.Testing.app(), region="us-west-2", catalog=catalog)
    assert [c.node.id for c in charts] == [NAMESPACE_CHART_ID, NEURON_CHART_ID]


def test_tokens_as_the_eks_stack_passes_them():
    stack = cdk.Stack(cdk.App(), "Eks")
    storage = FsxStorageProps(
        subnet_id=cdk.Fn.import_value("SubnetId"), security_group_ids=[cdk.Fn.import_value("SgId")],
        file_system_id=cdk.Fn.import_value("FsId"), dns_name=cdk.Fn.import_value("Dns"),
        mount_name=cdk.Fn.import_value("Mount"),
    )
    charts = cluster_charts(cdk8s.Testing.app(), region=stack.region, storage=storage)
    manifests = [m for chart in charts for m in cdk8s.Testing.synth(chart)]
    validate_all(manifests)
    assert "AWS::Region" in str(stack.resolve(manifests))


def test_write_manifests_is_deterministic(tmp_path):
    first = write_manifests(tmp_path / "a", **ARGS)
    second = write_manifests(tmp_path / "b", **ARGS)
    assert [p.name for p in first] == [
        f"{i}.k8s.yaml" for i in (NAMESPACE_CHART_ID, NEURON_CHART_ID, EFA_CHART_ID, FSX_CHART_ID)
    ]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    again = write_manifests(tmp_path / "a", **ARGS)
    assert again == first and [p.read_bytes() for p in again] == [p.read_bytes() for p in second]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(p.name for p in first)
    validate_all(m for p in first for m in yaml.safe_load_all(p.read_text()))


def test_write_manifests_removes_charts_no_longer_built(tmp_path):
    write_manifests(tmp_path, **ARGS)
    paths = write_manifests(tmp_path, region="us-west-2")
    assert sorted(tmp_path.iterdir()) == sorted(paths)
    assert not (tmp_path / f"{FSX_CHART_ID}.k8s.yaml").exists()
