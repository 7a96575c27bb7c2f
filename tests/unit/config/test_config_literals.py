"""Every value a config `Literal` allows goes through synth of every backend, and what synth cannot
build is rejected by the config, before any construct exists."""

from __future__ import annotations

import json
import typing
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from tests.support import apps
from tests.support.helpers import cfn_lint_errors, config_with, for_type, nag_violations, quality_synth, resources
from trainium_cdk.app.config import Config, ConfigError

ALL_BACKENDS = ["eks", "batch", "parallelcluster", "instance"]
RESERVATION = "cr-0123456789abcdef0"
INF2 = {
    "group": {"name": "inf", "instance_type": "inf2.48xlarge", "az_ids": "usw2-az4"},
    "instance_offerings": {"inf2.48xlarge": {"us-west-2": ["usw2-az4"]}},
}

# Together these configs take every value of every Literal (checked below); each is synthesized once
# with every backend, cdk-nag on, and linted (with tests/support/apps.py's apps, the quality gates'
# variants: tests/meta/test_quality.py).
VARIANTS: dict[str, dict[str, Any]] = {
    # Every Literal at its default (asserted below): the shared app with every backend, linted by test_quality too.
    "defaults": apps.VARIANTS["trn1.32xlarge"],
    "others": {
        "backends": ALL_BACKENDS,
        "group": {"capacity": {"type": "reservation", "reservation_id": RESERVATION}},
        "network": {"az_ids": ["usw2-az4", "usw2-az3"], "nat_gateways": "per-az", "interface_endpoints": True},
        "storage": {
            "deployment_type": "SCRATCH_2", "throughput_mb_per_tib": None, "capacity_gib": 2400,
            "compression": "NONE", "removal_policy": "destroy",
        },
        "eks": {"endpoint_access": "public-and-private", "public_access_cidrs": ["203.0.113.0/24"]},
        "parallelcluster": {"head_node_subnet": "public", "deletion_policy": "Retain"},
    },
    # A block and a reservation with its placement group on EKS, Batch and ParallelCluster: test_capacity's app.
    "capacity block": apps.CAPACITY,
    # The native Neuron track runs on trn2 only, and not with ParallelCluster (us-east-2: see for_type).
    "native track": {"backends": ["eks", "batch"], "neuron": {"track": "native"}, **for_type("trn2.48xlarge")},
}


def literal_fields(model: type[BaseModel], prefix: str = "") -> dict[str, tuple[Any, ...]]:
    """Path of every Literal field of the config model (``[]`` for items of a sequence) -> its values."""
    found: dict[str, tuple[Any, ...]] = {}

    def visit(annotation: Any, path: str) -> None:
        origin = typing.get_origin(annotation)
        if origin is Literal:
            found[path] = typing.get_args(annotation)
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.update(literal_fields(annotation, path + "."))
        elif origin in (tuple, list):
            for arg in typing.get_args(annotation):
                if arg is not Ellipsis:
                    visit(arg, path + "[]")
        elif origin is not None:  # X | None, dict[...]
            for arg in typing.get_args(annotation):
                visit(arg, path)

    for name, field in model.model_fields.items():
        visit(field.annotation, prefix + name)
    return found


def values_at(data: Any, path: str) -> list[Any]:
    parts = path.replace("[]", ".[]").split(".")
    current = [data]
    for part in parts:
        following = []
        for item in current:
            if part == "[]":
                following.extend(item or [])
            elif isinstance(item, dict) and part in item:
                following.append(item[part])
        current = following
    return current


@pytest.fixture(scope="module", params=sorted(VARIANTS), ids=sorted(VARIANTS))
def result(request):
    return quality_synth(config_with(**json.loads(json.dumps(VARIANTS[request.param]))))


def test_the_variants_take_every_literal_value():
    from trainium_cdk.app import backends

    # `backends` is checked against the backend registry, not a Literal: every registered name counts.
    fields = {**literal_fields(Config), "backends[]": backends.names()}
    assert "storage.removal_policy" in fields and "compute_groups[].capacity.type" in fields and "backends[]" in fields
    dumped = [config_with(**json.loads(json.dumps(v))).model_dump(mode="json") for v in VARIANTS.values()]
    missing = {
        path: sorted(set(allowed) - {v for d in dumped for v in values_at(d, path)})
        for path, allowed in fields.items()
    }
    assert {k: v for k, v in missing.items() if v} == {}


def test_the_defaults_variant_takes_every_literals_default():
    plain = config_with(backends=ALL_BACKENDS).model_dump(mode="json")
    defaults = config_with(**VARIANTS["defaults"]).model_dump(mode="json")
    assert defaults["backends"] == ALL_BACKENDS
    fields = literal_fields(Config)
    assert {p: values_at(defaults, p) for p in fields} == {p: values_at(plain, p) for p in fields}


def test_every_variant_synthesizes_clean(result):
    assert nag_violations(result) == []
    for path in result.template_paths():
        assert cfn_lint_errors(path, result.config.region) == []


def test_the_values_reach_the_templates(result):
    config = result.config
    if "storage" in [s.node.id.rsplit("-", 1)[-1] for s in result.stacks.stacks]:
        (fs,) = resources(result.template_json("storage"), "AWS::FSx::FileSystem").values()
        assert fs["DeletionPolicy"] == {"retain": "Retain", "destroy": "Delete"}[config.storage.removal_policy]
        assert fs["Properties"]["LustreConfiguration"]["DeploymentType"] == config.storage.deployment_type
        assert fs["Properties"]["LustreConfiguration"]["DataCompressionType"] == config.storage.compression
    nats = resources(result.template_json("network"), "AWS::EC2::NatGateway")
    assert len(nats) == {"one": 1, "per-az": len(config.vpc_az_ids)}[config.network.nat_gateways]
    if "parallelcluster" in config.backends:
        (cluster,) = resources(result.template_json("parallelcluster"), "Custom::PclusterCluster").values()
        assert cluster["Properties"]["DeletionPolicy"] == config.parallelcluster.deletion_policy
        capacity = cluster["Properties"]["ClusterConfiguration"]["Scheduling"]["SlurmQueues"][0]["CapacityType"]
        assert capacity == {"on-demand": "ONDEMAND", "reservation": "ONDEMAND", "capacity-block": "CAPACITY_BLOCK"}[
            config.compute_groups[0].capacity.type
        ]
    if "eks" in config.backends:
        (eks,) = resources(result.template_json("eks"), "AWS::EKS::Cluster").values()
        vpc = eks["Properties"]["ResourcesVpcConfig"]
        assert vpc["EndpointPublicAccess"] == (config.eks.endpoint_access == "public-and-private")


# -- what synth could not build is a config error -------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        # CloudFormation has no Snapshot deletion policy for FSx (synth used to raise KeyError).
        ({"storage": {"removal_policy": "snapshot"}}, "storage.removal_policy", "allowed: retain, destroy"),
        # Batch runs training jobs: an inference type used to pass the config and fail in the construct.
        (
            {"backends": ["eks", "batch"], **INF2},
            "compute_groups[0].instance_type",
            "training \\(Trainium\\) type with the batch backend",
        ),
        ({"batch": {"command": []}}, "batch.command", "the training script and its arguments"),
        # Checked by the instance stack during synth before.
        ({"backends": ["instance"], "instance": {"az_id": "usw2-az1"}}, "instance.az_id", "an AZ ID of the VPC"),
        # Checked while rendering the cluster configuration before.
        ({"backends": ["parallelcluster"], "group": {"name": "default"}}, "compute_groups[0].name", "forbids default"),
    ],
    ids=["snapshot", "inf2-batch", "empty-batch-command", "instance-az", "slurm-default-queue"],
)
def test_rejected_by_the_config(changes, field, message):
    with pytest.raises(ConfigError, match=message) as caught:
        config_with(**changes)
    assert caught.value.field == field


def test_inf2_stays_valid_for_eks():
    config = config_with(**INF2)
    assert config.compute_groups[0].instance_type == "inf2.48xlarge"
