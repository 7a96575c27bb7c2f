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
        "eks/neuron-device-plugin.k8s.yaml", "eks/efa-device-plugin.k8s.yaml", "eks/fsx-storage.k8s.yaml",
    ]


def test_every_object_validates_against_the_cluster_schemas(written):
    assert validate_all(_objects(written[1])) >= 8


def test_ids_known_after_deploy_are_envsubst_placeholders(written):
    text = "".join(p.read_text() for p in written[1])
    for name in ("FSX_FILE_SYSTEM_ID", "FSX_DNS_NAME", "FSX_MOUNT_NAME", "FSX_SECURITY_GROUP_ID", "COMPUTE_SUBNET_ID"):
        assert "${" + name + "}" in text
        assert name in PLACEHOLDERS
    assert "Token[" not in text


def test_deterministic(written, tmp_path):
    again = write_dist(config_with(), tmp_path)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in written[1]]


def test_no_eks_no_manifests(tmp_path):
    assert write_dist(config_with(backends=["batch"]), tmp_path) == []
