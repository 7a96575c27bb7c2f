"""FsxStorage: StorageClass parameters per deployment type, the static volume and its claim, tokens."""

from __future__ import annotations

import typing

import aws_cdk as cdk
import cdk8s
import pytest

from tests.support.chart_helpers import of_kind, one, validate_all
from trainium_cdk.app.config import StorageSettings
from trainium_cdk.charts import FsxStorage, fsx_storage
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import LUSTRE_COMPRESSION_TYPES, LUSTRE_VERSIONS

NETWORK = {
    "subnet_id": "subnet-0123456789abcdef0",
    "security_group_ids": ["sg-0aaaaaaaaaaaaaaaa", "sg-0bbbbbbbbbbbbbbbb"],
}
FILE_SYSTEM = {
    "file_system_id": "fs-0123456789abcdef0",
    "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
    "mount_name": "abcdefgh",
    "capacity_gib": 2400,
}


@pytest.fixture(scope="module")
def persistent():
    chart = FsxStorage(cdk8s.Testing.app(), "fsx", **NETWORK, **FILE_SYSTEM, namespace="training")
    return chart, cdk8s.Testing.synth(chart)


@pytest.fixture(scope="module")
def scratch():
    chart = FsxStorage(
        cdk8s.Testing.app(), "fsx", **NETWORK, deployment_type="SCRATCH_2", compression="NONE", reclaim_policy="Delete"
    )
    return chart, cdk8s.Testing.synth(chart)


@pytest.fixture(scope="module")
def tokens():
    stack = cdk.Stack(cdk.App(), "Storage")
    chart = FsxStorage(
        cdk8s.Testing.app(), "fsx",
        subnet_id=cdk.Fn.import_value("SubnetId"),
        # The chart builds no CDK expression: the caller joins a list token and strings a number token.
        security_group_ids=cdk.Fn.join(",", cdk.Fn.split(",", cdk.Fn.import_value("SecurityGroupIds"))),
        file_system_id=cdk.Fn.import_value("FileSystemId"),
        dns_name=cdk.Fn.import_value("DnsName"),
        mount_name=cdk.Fn.import_value("MountName"),
        capacity_gib=cdk.Token.as_string(cdk.Token.as_number(cdk.Fn.import_value("Capacity"))),
    )
    return stack, cdk8s.Testing.synth(chart)


def test_every_object_is_valid(persistent, scratch, tokens):
    assert validate_all(persistent[1]) == 3
    assert validate_all(scratch[1]) == 1
    assert validate_all(tokens[1]) == 3


def test_persistent_storage_class(persistent):
    sc = one(persistent[1], "StorageClass")
    assert sc["provisioner"] == "fsx.csi.aws.com"
    assert sc["parameters"] == {
        "subnetId": "subnet-0123456789abcdef0",
        "securityGroupIds": "sg-0aaaaaaaaaaaaaaaa,sg-0bbbbbbbbbbbbbbbb",
        "deploymentType": "PERSISTENT_2",
        "perUnitStorageThroughput": "250",
        "fileSystemTypeVersion": "2.15",
        "dataCompressionType": "LZ4",
    }
    assert sc["mountOptions"] == ["flock"]
    assert (sc["reclaimPolicy"], sc["volumeBindingMode"]) == ("Retain", "Immediate")


def test_scratch_storage_class_has_no_throughput(scratch):
    chart, manifests = scratch
    sc = one(manifests, "StorageClass")
    assert "perUnitStorageThroughput" not in sc["parameters"]
    assert (sc["parameters"]["deploymentType"], sc["parameters"]["dataCompressionType"]) == ("SCRATCH_2", "NONE")
    assert sc["reclaimPolicy"] == "Delete"


def test_no_static_volume_without_a_file_system(scratch):
    chart, manifests = scratch
    assert not of_kind(manifests, "PersistentVolume") and not of_kind(manifests, "PersistentVolumeClaim")
    assert chart.claim_name is None and chart.volume is None


def test_static_volume(persistent):
    pv = one(persistent[1], "PersistentVolume")
    spec = pv["spec"]
    assert spec["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": "fs-0123456789abcdef0",
        "volumeAttributes": {"dnsname": FILE_SYSTEM["dns_name"], "mountname": "abcdefgh"},
    }
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["capacity"] == {"storage": "2400Gi"}
    assert spec["storageClassName"] == ""
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert "claimRef" not in spec
    assert "namespace" not in pv["metadata"]


def test_claim_binds_to_the_static_volume(persistent):
    chart, manifests = persistent
    pv, pvc = one(manifests, "PersistentVolume"), one(manifests, "PersistentVolumeClaim")
    assert chart.claim_name == pvc["metadata"]["name"] == "fsx-lustre"
    assert pvc["metadata"]["namespace"] == "training"
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"] == pv["spec"]["capacity"]


def test_tokens_pass_through_and_resolve(tokens):
    stack, manifests = tokens
    sc, pv = one(manifests, "StorageClass"), one(manifests, "PersistentVolume")
    assert stack.resolve(sc["parameters"]["subnetId"]) == {"Fn::ImportValue": "SubnetId"}
    assert stack.resolve(sc["parameters"]["securityGroupIds"]) == {
        "Fn::Join": [",", {"Fn::Split": [",", {"Fn::ImportValue": "SecurityGroupIds"}]}]
    }
    assert stack.resolve(pv["spec"]["csi"]) == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": {"Fn::ImportValue": "FileSystemId"},
        "volumeAttributes": {"dnsname": {"Fn::ImportValue": "DnsName"}, "mountname": {"Fn::ImportValue": "MountName"}},
    }
    assert stack.resolve(pv["spec"]["capacity"]["storage"]) == {
        "Fn::Join": ["", [{"Fn::ImportValue": "Capacity"}, "Gi"]]
    }


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"deployment_type": "PERSISTENT_1"}, "FsxStorage.deployment_type"),
        ({"deployment_type": "SCRATCH_2", "throughput_mb_per_tib": 200}, "FsxStorage.throughput_mb_per_tib"),
        ({"throughput_mb_per_tib": 200}, "FsxStorage.throughput_mb_per_tib"),
        ({"compression": "GZIP"}, "FsxStorage.compression"),
        ({"lustre_version": "2.10"}, "FsxStorage.lustre_version"),
        ({"reclaim_policy": "Recycle"}, "FsxStorage.reclaim_policy"),
        ({"security_group_ids": []}, "FsxStorage.security_group_ids"),
        ({"file_system_id": "fs-0123456789abcdef0"}, "FsxStorage.dns_name"),
        ({"dns_name": "x.fsx.amazonaws.com", "mount_name": "m"}, "FsxStorage.file_system_id"),
        ({**FILE_SYSTEM, "file_system_id": "0123"}, "FsxStorage.file_system_id"),
        ({**FILE_SYSTEM, "capacity_gib": 0}, "FsxStorage.capacity_gib"),
        ({"claim_name": "FSx"}, "FsxStorage.claim_name"),
    ],
)
def test_bad_props_raise_config_error(props, field):
    with pytest.raises(ConfigError) as err:
        FsxStorage(cdk8s.Testing.app(), "fsx", **{**NETWORK, **props})
    assert err.value.field == field


def test_list_and_number_tokens_are_refused_with_what_to_pass():
    """Joining a list token or stringing a number token needs the CDK, which charts do not load."""
    with pytest.raises(ConfigError, match=r"Fn\.join") as err:
        FsxStorage(
            cdk8s.Testing.app(), "fsx", subnet_id="subnet-1",
            security_group_ids=cdk.Fn.split(",", cdk.Fn.import_value("SecurityGroupIds")),
        )
    assert err.value.field == "FsxStorage.security_group_ids"
    number = cdk.Token.as_number(cdk.Fn.import_value("Capacity"))
    for props, field in (
        ({**FILE_SYSTEM, "capacity_gib": number}, "FsxStorage.capacity_gib"),
        ({"throughput_mb_per_tib": number}, "FsxStorage.throughput_mb_per_tib"),
    ):
        with pytest.raises(ConfigError, match=r"Token\.as_string") as err:
            FsxStorage(cdk8s.Testing.app(), "fsx", **{**NETWORK, **props})
        assert err.value.field == field


def test_choices_and_defaults_agree_with_the_config():
    """The chart takes its Lustre facts from the catalog; the config must offer and default to the same."""
    settings, fields = StorageSettings(), StorageSettings.model_fields
    assert fsx_storage.LUSTRE_VERSIONS == LUSTRE_VERSIONS == typing.get_args(fields["lustre_version"].annotation)
    assert fsx_storage.COMPRESSION_TYPES == LUSTRE_COMPRESSION_TYPES == typing.get_args(
        fields["compression"].annotation
    )
    assert fsx_storage.DEPLOYMENT_TYPES == typing.get_args(fields["deployment_type"].annotation)
    assert (
        fsx_storage.DEFAULT_DEPLOYMENT_TYPE, fsx_storage.DEFAULT_THROUGHPUT_MB_PER_TIB, fsx_storage.DEFAULT_LUSTRE_VERSION,
        fsx_storage.DEFAULT_COMPRESSION, fsx_storage.DEFAULT_CAPACITY_GIB,
    ) == (
        settings.deployment_type, settings.throughput_mb_per_tib, settings.lustre_version, settings.compression,
        settings.capacity_gib,
    )
