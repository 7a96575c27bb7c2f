"""ParallelCluster backend: the cluster configuration (checked by ParallelCluster's own schema), the
custom resource stack, the Neuron setup script, the batch scripts and the pcluster CLI files."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Annotations, Match, Template

from tests.support.helpers import (
    US_EAST_2,
    cfn_lint_errors,
    config_with,
    imported,
    nag_violations,
    quality_synth,
    resources,
    strings,
    template_text,
)
from tests.support.pcluster_schema import PclusterUnavailable, update_changes, validate_many, venv_or_skip
from trainium_cdk.app.config import ConfigError
from trainium_cdk.app.dist.parallelcluster import fetched_digests
from trainium_cdk.app.parallelcluster.cluster_config import placeholder_names, read_access
from trainium_cdk.app.parallelcluster.sbatch import render_sbatch
from trainium_cdk.app.stacks.storage_stack import FILE_SYSTEM_LOGICAL_ID
from trainium_cdk.constructs.parallelcluster import SlurmCluster
from trainium_cdk.facts.capacity import GroupNodes
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, SUPPORTED_TRAINING_TYPES
from trainium_cdk.facts.versions import PARALLELCLUSTER_VERSION, XLA_TRACK
from trainium_cdk.parallelcluster import ClusterIds, S3Object, cluster_configuration, render_cluster_yaml, write_dist
from trainium_cdk.parallelcluster.configuration import ClusterSettings, HeadNode, NewFileSystem, SlurmQueue
from trainium_cdk.parallelcluster.parts import HEAD_NODE_SCRIPT, SETUP_SCRIPT
from trainium_cdk.runtime.launcher import LAUNCHER

# Batch scripts: a training script per type, and the fabric check (tests/e2e/test_fabric.py) per type with EFA.
EFA_TYPES = [t for t in SUPPORTED_TRAINING_TYPES if DEFAULT_CATALOG.get(t).has_efa]
BATCH_SCRIPTS = len(SUPPORTED_TRAINING_TYPES) + len(EFA_TYPES)

NEURON_SDK_VERSION = XLA_TRACK.neuron_release
NEURON_APT_PACKAGES = XLA_TRACK.apt_packages
NEURON_PIP_PACKAGES = XLA_TRACK.pip_packages

AZ = {"trn1.2xlarge": "use2-az2"}
RESERVATION = "cr-0aaaaaaaaaaaaaaaa"
CAPACITY_BLOCK = "cr-0bbbbbbbbbbbbbbbb"


def _name(instance_type: str) -> str:
    return instance_type.replace(".", "-")


def _group(instance_type: str, **extra) -> dict:
    return {
        "name": _name(instance_type),
        "instance_type": instance_type,
        "nodes": 1 if instance_type == "trn1.2xlarge" else 2,
        "max_nodes": 4,
        "az_ids": AZ.get(instance_type, "use2-az3"),
        "root_volume_gib": 300,
        **extra,
    }


EVERY_TYPE = config_with(
    **US_EAST_2, backends=["parallelcluster"], compute_groups=[_group(t) for t in SUPPORTED_TRAINING_TYPES]
)
# Reservations, no storage stack (ParallelCluster creates the file system), a public head node with a key.
RESERVED = config_with(
    **US_EAST_2,
    backends=["parallelcluster"],
    compute_groups=[
        _group("trn1.32xlarge", capacity={"type": "reservation", "reservation_id": RESERVATION}),
        _group("trn2.48xlarge", capacity={"type": "capacity-block", "reservation_id": CAPACITY_BLOCK}),
    ],
    storage={"enabled": False, "deployment_type": "SCRATCH_2", "throughput_mb_per_tib": None, "capacity_gib": 2400},
    parallelcluster={"head_node_subnet": "public", "ssh_key_name": "ml-team", "ssh_allowed_cidr": "203.0.113.0/24"},
    tags={"cost-center": "ml"},
)


def concrete_ids(config, *, file_system: bool = True) -> ClusterIds:
    """Ids as they look after deploy, for ParallelCluster's schema (it checks their format)."""
    bucket = "cdk-hnb659fds-assets-123456789012-us-east-2"
    return ClusterIds(
        head_node_subnet_id="subnet-0123456789abcdef0",
        compute_subnet_ids={g.name: f"subnet-0123456789abcd{i:03d}" for i, g in enumerate(config.compute_groups)},
        efa_security_group_id="sg-0123456789abcdef0",
        file_system_id="fs-0123456789abcdef0" if file_system else None,
        setup_script=S3Object(bucket, "t-cluster/" + "0" * 64 + ".sh"),
        head_node_script=S3Object(bucket, "t-cluster/" + "2" * 64 + ".sh"),
        batch_scripts={"train-x.sbatch": S3Object(bucket, "t-cluster/" + "1" * 64 + ".sbatch", "4" * 64)},
        # The queues' OnNodeStart with storage (tests/app/test_lustre_tuning.py), through the schema too.
        lustre_tuning=S3Object(bucket, "t-cluster/" + "3" * 64 + ".sh"),
    )


@pytest.fixture(scope="module")
def every_type():
    return quality_synth(EVERY_TYPE)


@pytest.fixture(scope="module")
def reserved():
    return quality_synth(RESERVED)


def _cluster(result) -> dict:
    (cluster,) = resources(result.template_json("parallelcluster"), "Custom::PclusterCluster").values()
    return cluster["Properties"]


def _queue(result, group_name: str) -> dict:
    (queue,) = [q for q in _cluster(result)["ClusterConfiguration"]["Scheduling"]["SlurmQueues"] if q["Name"] == group_name]
    return queue


def _logical_ref(stack, construct) -> str:
    return stack.resolve(stack.get_logical_id(construct.node.default_child))


# The asset bucket of the cluster's scripts, as the configuration names it.
ASSET_BUCKET = {"Fn::Sub": "cdk-hnb659fds-assets-${AWS::AccountId}-us-east-2"}


def _script_key(url: dict) -> str:
    """The object key of an s3:// URL in the asset bucket (an Fn::Join), checked to be of that form."""
    assert url["Fn::Join"][0] == "", url
    (scheme, bucket, key) = url["Fn::Join"][1]
    assert (scheme, bucket) == ("s3://", ASSET_BUCKET) and key.startswith("/"), url
    return key.removeprefix("/")


# -- ParallelCluster's own schema ------------------------------------------------------------------


@pytest.fixture(scope="module")
def pcluster():
    """The ParallelCluster environment; skipped only when it cannot be created, and never in CI."""
    return venv_or_skip("ParallelCluster's schema")


def _broken(config: dict, change) -> dict:
    config = copy.deepcopy(config)
    change(config)
    return config


def _as_cloudformation_delivers_it(value):
    """CloudFormation hands a custom resource every scalar property as a string ("true", "4")."""
    if isinstance(value, dict):
        return {k: _as_cloudformation_delivers_it(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_cloudformation_delivers_it(v) for v in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _valid_cases() -> dict[str, dict]:
    cases = {
        "every-type": cluster_configuration(EVERY_TYPE, concrete_ids(EVERY_TYPE)),
        "every-type-as-strings": _as_cloudformation_delivers_it(
            cluster_configuration(EVERY_TYPE, concrete_ids(EVERY_TYPE))
        ),
        "reserved-new-file-system": cluster_configuration(RESERVED, concrete_ids(RESERVED, file_system=False)),
    }
    for instance_type in SUPPORTED_TRAINING_TYPES:
        config = config_with(**US_EAST_2, backends=["parallelcluster"], compute_groups=[_group(instance_type)])
        cases[_name(instance_type)] = cluster_configuration(config, concrete_ids(config))
    text = render_cluster_yaml(EVERY_TYPE, fetched_digests(EVERY_TYPE))
    values = {
        "HEAD_NODE_SUBNET_ID": "subnet-0123456789abcdef0",
        "EFA_SECURITY_GROUP_ID": "sg-0123456789abcdef0",
        "FSX_FILE_SYSTEM_ID": "fs-0123456789abcdef0",
        "SCRIPTS_BUCKET": "my-bucket",
        "NEURON_METRICS_POLICY_ARN": "arn:aws:iam::123456789012:policy/t-neuron-metrics",
        "SESSION_MANAGER_POLICY_ARN": "arn:aws:iam::123456789012:policy/t-session-manager",
        **{f"COMPUTE_SUBNET_ID_{g.name.upper().replace('-', '_')}": f"subnet-0123456789abcd{i:03d}"
           for i, g in enumerate(EVERY_TYPE.compute_groups)},
    }
    for name, value in values.items():
        text = text.replace("${" + name + "}", value)
    cases["cli-yaml-after-envsubst"] = yaml.safe_load(text)
    return cases


GOOD = cluster_configuration(EVERY_TYPE, concrete_ids(EVERY_TYPE))
INVALID = {
    "max-count-negative": (
        _broken(GOOD, lambda c: c["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0].update(MaxCount=-1)),
        "Scheduling.SlurmQueues.0.ComputeResources.0.MaxCount: Must be greater than or equal to 1.",
    ),
    "unknown-key": (
        _broken(GOOD, lambda c: c["HeadNode"].update(InstanceTyp="m7i.xlarge")),
        "HeadNode.InstanceTyp: Unknown field.",
    ),
    "efa-queue-without-explicit-placement-group": (
        _broken(GOOD, lambda c: c["Scheduling"]["SlurmQueues"][1]["Networking"].pop("PlacementGroup")),
        "Scheduling.SlurmQueues.1.Networking.PlacementGroup: The placement group for EFA-enabled compute resources",
    ),
    "capacity-block-min-below-max": (
        _broken(
            cluster_configuration(RESERVED, concrete_ids(RESERVED)),
            lambda c: c["Scheduling"]["SlurmQueues"][1]["ComputeResources"][0].update(MinCount=0),
        ),
        "Max count must be set to the same value of min count when using Capacity Block reservation.",
    ),
    "bad-subnet-id": (
        _broken(GOOD, lambda c: c["HeadNode"]["Networking"].update(SubnetId="${HEAD_NODE_SUBNET_ID}")),
        "HeadNode.Networking.SubnetId: String does not match expected pattern.",
    ),
}


@pytest.fixture(scope="module")
def schema_results(pcluster):
    """Every case through ParallelCluster's schema and offline validators, in one subprocess."""
    cases = {**{f"t-{k}": v for k, v in _valid_cases().items()}, **{f"t-{k}": c for k, (c, _) in INVALID.items()}}
    return validate_many(cases)


def test_parallelcluster_validator_pins_the_same_version(pcluster):
    version = subprocess.run(
        [str(pcluster), "-c", "import importlib.metadata as m; print(m.version('aws-parallelcluster'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert version == PARALLELCLUSTER_VERSION


EXPECTED_WARNINGS = {
    "reserved-new-file-system": ["Placement group is disabled for queue 'trn1-32xlarge'. This is expected when using a "
                                 "capacity reservation"],
}


@pytest.mark.parametrize("case", ["every-type", "every-type-as-strings", "reserved-new-file-system", "cli-yaml-after-envsubst",
                                  *map(_name, SUPPORTED_TRAINING_TYPES)])
def test_generated_configuration_passes_parallelcluster_schema(schema_results, case):
    result = schema_results[f"t-{case}"]
    assert result.errors == []
    # The one warning allowed: the placement group we leave out on purpose for a reservation.
    expected = EXPECTED_WARNINGS.get(case, [])
    assert len(result.warnings) == len(expected)
    assert all(e in w for w, e in zip(result.warnings, expected, strict=True)), result.warnings


@pytest.mark.parametrize("case", sorted(INVALID))
def test_wrong_setting_is_caught_with_a_message(schema_results, case):
    errors = schema_results[f"t-{case}"].errors
    expected = INVALID[case][1]
    assert any(expected in e for e in errors), errors


# -- the configuration in the stack ----------------------------------------------------------------


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_one_queue_per_group_with_efa_per_catalog(every_type, instance_type):
    spec = DEFAULT_CATALOG.get(instance_type)
    queue = _queue(every_type, _name(instance_type))
    (resource,) = queue["ComputeResources"]
    assert resource["InstanceType"] == instance_type
    assert resource["Efa"] == {"Enabled": spec.has_efa}
    assert resource["MinCount"] == 0 and resource["MaxCount"] == 4
    assert "CapacityReservationTarget" not in resource
    assert queue["CapacityType"] == "ONDEMAND"
    assert queue["Networking"]["PlacementGroup"] == {"Enabled": True}
    assert queue["ComputeSettings"]["LocalStorage"]["RootVolume"] == {"Size": 300, "Encrypted": True, "VolumeType": "gp3"}


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_queue_uses_the_group_compute_subnet_and_efa_security_group(every_type, instance_type):
    queue = _queue(every_type, _name(instance_type))
    network = every_type.stacks.network
    subnet = network.network.compute_subnet(_name(instance_type))
    networking = {k: [imported(every_type, v) for v in values] for k, values in queue["Networking"].items()
                  if k in ("SubnetIds", "AdditionalSecurityGroups")}
    efa = _logical_ref(network, network.network.efa_security_group)
    assert networking == {"SubnetIds": [{"Ref": _logical_ref(network, subnet)}],
                          "AdditionalSecurityGroups": [{"Fn::GetAtt": [efa, "GroupId"]}]}


def test_reservation_and_capacity_block_skip_the_placement_group(reserved):
    queue = _queue(reserved, "trn1-32xlarge")
    (resource,) = queue["ComputeResources"]
    assert queue["Networking"]["PlacementGroup"] == {"Enabled": False}
    assert resource["CapacityReservationTarget"] == {"CapacityReservationId": RESERVATION}
    assert queue["CapacityType"] == "ONDEMAND"
    assert (resource["MinCount"], resource["MaxCount"]) == (0, 4)

    queue = _queue(reserved, "trn2-48xlarge")
    (resource,) = queue["ComputeResources"]
    assert queue["Networking"]["PlacementGroup"] == {"Enabled": False}
    assert resource["CapacityReservationTarget"] == {"CapacityReservationId": CAPACITY_BLOCK}
    assert queue["CapacityType"] == "CAPACITY_BLOCK"
    # ParallelCluster runs capacity blocks as static nodes: MinCount = MaxCount.
    assert (resource["MinCount"], resource["MaxCount"]) == (4, 4)


def test_storage_stack_file_system_mounted_at_fsx(every_type):
    (storage,) = _cluster(every_type)["ClusterConfiguration"]["SharedStorage"]
    assert storage["StorageType"] == "FsxLustre" and storage["MountDir"] == "/fsx"
    assert set(storage["FsxLustreSettings"]) == {"FileSystemId"}
    # The storage stack's file system (its pinned logical ID), imported across stacks.
    assert FILE_SYSTEM_LOGICAL_ID in resources(every_type.template_json("storage"), "AWS::FSx::FileSystem")
    assert imported(every_type, storage["FsxLustreSettings"]["FileSystemId"]) == {"Ref": FILE_SYSTEM_LOGICAL_ID}


def test_without_storage_stack_parallelcluster_creates_the_file_system(reserved):
    assert reserved.stacks.storage is None
    (storage,) = _cluster(reserved)["ClusterConfiguration"]["SharedStorage"]
    assert storage["MountDir"] == "/fsx"
    assert storage["FsxLustreSettings"] == {
        "StorageCapacity": 2400, "DeploymentType": "SCRATCH_2", "DataCompressionType": "LZ4", "DeletionPolicy": "Retain",
    }


def test_head_node_private_by_default_next_to_the_file_system(every_type):
    config = _cluster(every_type)["ClusterConfiguration"]
    head = config["HeadNode"]
    network = every_type.stacks.network
    subnet = network.network.compute_subnet(EVERY_TYPE.storage_group.name)
    assert imported(every_type, head["Networking"]["SubnetId"]) == {"Ref": _logical_ref(network, subnet)}
    assert head["InstanceType"] == "m7i.xlarge"
    assert head["Ssh"] == {"AllowedIps": "10.0.0.0/16"}  # the VPC CIDR: never the internet
    # Session Manager's minimal policy, the stack's own: not AmazonSSMManagedInstanceCore, whose
    # ssm:GetParameter* on * let any Slurm job read every parameter of the account.
    template = every_type.template_json("parallelcluster")
    ssm = {k: r for k, r in resources(template, "AWS::IAM::ManagedPolicy").items() if "SessionManager" in k}
    ((ssm_id, ssm_policy),) = ssm.items()
    assert head["Iam"]["AdditionalIamPolicies"] == [{"Policy": {"Ref": ssm_id}}]
    actions = [a for st in ssm_policy["Properties"]["PolicyDocument"]["Statement"]
               for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])]
    assert not [a for a in actions if a.startswith("ssm:Get")] and "ssm:UpdateInstanceInformation" in actions
    assert not [text for text in strings(template) if "AmazonSSMManagedInstanceCore" in text]
    for queue in config["Scheduling"]["SlurmQueues"]:  # compute nodes: reached from the head node, no SSM
        assert {"Policy": {"Ref": ssm_id}} not in queue["Iam"]["AdditionalIamPolicies"]
    assert head["Imds"] == {"Secured": True}
    assert head["LocalStorage"]["RootVolume"]["Encrypted"] is True
    assert config["Image"] == {"Os": "ubuntu2404"} and config["Region"] == "us-east-2"
    assert config["Scheduling"]["Scheduler"] == "slurm"
    assert len(config["Scheduling"]["SlurmQueues"]) == len(SUPPORTED_TRAINING_TYPES)


def test_public_head_node_with_key_and_cidr(reserved):
    head = _cluster(reserved)["ClusterConfiguration"]["HeadNode"]
    network = reserved.stacks.network
    (public,) = [s for s in network.network.vpc.public_subnets if s.availability_zone == "use2-az3"]
    assert imported(reserved, head["Networking"]["SubnetId"]) == {"Ref": _logical_ref(network, public)}
    assert head["Ssh"] == {"AllowedIps": "203.0.113.0/24", "KeyName": "ml-team"}
    tags = _cluster(reserved)["ClusterConfiguration"]["Tags"]
    assert {"Key": "cost-center", "Value": "ml"} in tags and {"Key": "project", "Value": "t"} in tags


def test_setup_script_is_an_asset_nodes_may_read_and_only_the_clusters_assets(every_type):
    config = _cluster(every_type)["ClusterConfiguration"]
    head = config["HeadNode"]
    queues = config["Scheduling"]["SlurmQueues"]
    script_url = queues[0]["CustomActions"]["OnNodeConfigured"]["Script"]
    assert head["CustomActions"]["OnNodeUpdated"]["Script"] == script_url
    head_url = head["CustomActions"]["OnNodeConfigured"]["Script"]
    for url in (script_url, head_url):
        assert re.fullmatch(r"t-cluster/[0-9a-f]{64}\.sh", _script_key(url)), url
    # One entry, the cluster's key prefix, in the head node and in every queue, however many scripts.
    (access,) = head["Iam"]["S3Access"]
    assert access["BucketName"] == ASSET_BUCKET
    assert (access["KeyName"], access["EnableWriteAccess"]) == ("t-cluster/*", False)
    for queue in queues:
        # The same scripts; OnNodeStart's arguments are the queue's instance type's Lustre tuning
        # (tests/app/test_lustre_tuning.py).
        assert queue["CustomActions"]["OnNodeConfigured"] == queues[0]["CustomActions"]["OnNodeConfigured"]
        assert queue["CustomActions"]["OnNodeStart"]["Script"] == queues[0]["CustomActions"]["OnNodeStart"]["Script"]
        assert queue["Iam"]["S3Access"] == [access]
    # Under the prefix: the batch scripts, the MLP example's train.py, the health prolog (tests/unit/node/test_health.py),
    # neuron_metrics.py (tests/app/test_node_metrics.py), the two setup scripts, the Lustre tuning
    # (tests/app/test_lustre_tuning.py), and the stack's own template.
    stack = every_type.stacks.backends["parallelcluster"]
    manifest = json.loads((every_type.outdir / f"{stack.artifact_id}.assets.json").read_text())
    keys = [d["objectKey"] for f in manifest["files"].values() for d in f["destinations"].values()]
    assert all(k.startswith("t-cluster/") for k in keys)
    kinds = sorted(k.rsplit(".", 1)[1] for k in keys)
    assert kinds == ["json"] + ["py"] * 2 + ["sbatch"] * BATCH_SCRIPTS + ["sh"] * 4
    # The staged assets are the scripts from the source tree.
    for url, source in ((script_url, SETUP_SCRIPT), (head_url, HEAD_NODE_SCRIPT)):
        staged = every_type.outdir / f"asset.{_script_key(url).removeprefix('t-cluster/')}"
        assert staged.read_bytes() == source.read_bytes()


# ParallelCluster cannot update a head node's OnNodeConfigured, and the script's S3 key is the cluster's key
# prefix (stacks/parallelcluster_stack.py) and the asset's content hash: an edit of head_node_setup.sh or of
# the prefix breaks `cdk deploy` of every running cluster. Keep both as they are.
HEAD_NODE_SCRIPT_SHA256 = "4eaa7e01bb74d88396e6c6753a9e6a6e3d331bb96dd1a2a3d3be53bf416e8d9f"
HEAD_NODE_SCRIPT_KEY = "t-cluster/17f9dc221d646776c7647e9bee98d79fb4743620d7d4ddf22ba414b491a6f9da.sh"


def test_head_node_action_never_changes(every_type):
    import hashlib

    actions = _cluster(every_type)["ClusterConfiguration"]["HeadNode"]["CustomActions"]
    assert set(actions) == {"OnNodeConfigured", "OnNodeUpdated"}
    assert set(actions["OnNodeConfigured"]) == {"Script"}  # it runs OnNodeUpdated, which carries the arguments
    assert _script_key(actions["OnNodeConfigured"]["Script"]) == HEAD_NODE_SCRIPT_KEY
    assert hashlib.sha256(HEAD_NODE_SCRIPT.read_bytes()).hexdigest() == HEAD_NODE_SCRIPT_SHA256
    subprocess.run(["bash", "-n", str(HEAD_NODE_SCRIPT)], check=True)
    assert "/opt/parallelcluster/shared/cluster-config.yaml" in HEAD_NODE_SCRIPT.read_text()


def test_moving_the_scripts_under_the_key_prefix_needs_a_new_cluster(pcluster):
    """Issue 23 moved the scripts from the asset bucket's root to the cluster's key prefix: ParallelCluster
    refuses that update for the head node's OnNodeConfigured (CHANGELOG: delete and deploy the stack again);
    the nodes' S3Access and the rest it applies."""
    ids = concrete_ids(EVERY_TYPE)
    at_root = {name: S3Object(o.bucket, o.key.removeprefix("t-cluster/"), o.sha256) for name, o in ids.batch_scripts.items()}
    before = dataclasses.replace(
        ids, setup_script=S3Object(ids.setup_script.bucket, ids.setup_script.key.removeprefix("t-cluster/")),
        head_node_script=S3Object(ids.head_node_script.bucket, ids.head_node_script.key.removeprefix("t-cluster/")),
        batch_scripts=at_root,
    )
    pair = (cluster_configuration(EVERY_TYPE, before), cluster_configuration(EVERY_TYPE, ids))
    changes = update_changes({"moved": pair}, cluster_name="t-cluster")["moved"]
    refused = [c.path for c in changes if c.policy == "UNSUPPORTED"]
    assert refused == ["HeadNode.CustomActions.OnNodeConfigured.Script"]
    assert {c.policy for c in changes if ".Iam.S3Access" in c.path} == {"SUPPORTED"}


def test_a_running_cluster_takes_the_lustre_tuning_as_an_update(pcluster):
    """The queues' OnNodeStart (the FSx client's tuning) added to a cluster deployed without it: ParallelCluster
    applies it, no change refused."""
    ids = concrete_ids(EVERY_TYPE)
    before = dataclasses.replace(ids, lustre_tuning=None)
    pair = (cluster_configuration(EVERY_TYPE, before), cluster_configuration(EVERY_TYPE, ids))
    started = [["OnNodeStart" in q["CustomActions"] for q in c["Scheduling"]["SlurmQueues"]] for c in pair]
    assert not any(started[0]) and started[1] and all(started[1])
    changes = update_changes({"tuned": pair}, cluster_name="t-cluster")["tuned"]
    assert any("OnNodeStart" in c.path for c in changes)
    assert [c.path for c in changes if c.policy == "UNSUPPORTED"] == []


def test_a_running_cluster_takes_the_shared_venv_and_the_cache_group_as_an_update(pcluster):
    """Issue 32 moved the venv out of /home/ubuntu and gave the head node the compile cache's group: new setup
    arguments for the head node's OnNodeUpdated and the queues' OnNodeConfigured (drained), none refused."""
    from trainium_cdk.parallelcluster.configuration import VENV

    ids = concrete_ids(EVERY_TYPE)
    after = cluster_configuration(EVERY_TYPE, ids)
    before = json.loads(json.dumps(after).replace(VENV, "/home/ubuntu/neuron-venv"))
    head_args = before["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]
    at = head_args.index("--cache-group")
    del head_args[at:at + 2]
    changes = update_changes({"moved": (before, after)}, cluster_name="t-cluster")["moved"]
    assert any("OnNodeUpdated" in c.path for c in changes) and any("OnNodeConfigured" in c.path for c in changes)
    assert [c.path for c in changes if c.policy == "UNSUPPORTED"] == []


def test_queues_update_by_draining(every_type):
    scheduling = _cluster(every_type)["ClusterConfiguration"]["Scheduling"]
    assert scheduling["SlurmSettings"] == {"QueueUpdateStrategy": "DRAIN"}


@pytest.mark.parametrize("where", ["head node", "queue"])
def test_setup_script_arguments_carry_the_pinned_versions(every_type, where):
    config = _cluster(every_type)["ClusterConfiguration"]
    if where == "queue":
        args = config["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Args"]
    else:
        args = config["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]
    pairs = list(zip(args[::2], args[1::2], strict=True))
    assert ("--sdk", NEURON_SDK_VERSION) in pairs
    assert [v for k, v in pairs if k == "--apt"] == [f"{n}={v}" for n, v in NEURON_APT_PACKAGES.items()]
    assert [v for k, v in pairs if k == "--pip"] == list(XLA_TRACK.neuron_pip_pins)
    batch = [v for k, v in pairs if k == "--sbatch"]
    # Only the head node copies batch scripts (and the MLP example): a changed script must not replace
    # compute nodes.
    assert len(batch) == (BATCH_SCRIPTS + 1 if where == "head node" else 0)
    assert all(set(v) == {"Fn::Join"} for v in batch)


def test_provider_nested_stack_and_custom_resource(every_type):
    template = every_type.template_json("parallelcluster")
    (provider_id, provider), = resources(template, "AWS::CloudFormation::Stack").items()
    assert template_text(provider["Properties"]["TemplateURL"]) == (
        "https://us-east-2-aws-parallelcluster.s3.us-east-2.<token>"
        f"/parallelcluster/{PARALLELCLUSTER_VERSION}/templates/custom_resource/cluster.yaml")
    # The provider's own role gets one policy: read the cluster's scripts (tests/app/parallelcluster/
    # test_parallelcluster_provider.py evaluates it with ParallelCluster's own statements).
    policies = resources(template, "AWS::IAM::ManagedPolicy")
    (read_id,) = [k for k in policies if "ProviderReadsScripts" in k]
    assert provider["Properties"]["Parameters"] == {"AdditionalIamPolicies": {"Ref": read_id}}
    # The nodes' policies under the path ParallelCluster's roles may attach.
    assert {p["Properties"].get("Path") for k, p in policies.items() if k != read_id} == {"/parallelcluster/"}
    cluster = _cluster(every_type)
    assert cluster["ServiceToken"] == {"Fn::GetAtt": [provider_id, "Outputs.ServiceToken"]}
    assert cluster["ClusterName"] == "t-cluster"
    assert cluster["DeletionPolicy"] == "Delete"
    assert cluster["ClusterName"] not in {s.stack_name for s in every_type.stacks.stacks}
    outputs = template["Outputs"]
    (cluster_id,) = resources(template, "Custom::PclusterCluster")
    head_node = {"Fn::GetAtt": [cluster_id, "headNode.instanceId"]}
    assert outputs["HeadNodeInstanceId"]["Value"] == head_node
    assert outputs["HeadNodeSession"]["Value"] == {
        "Fn::Join": ["", ["aws ssm start-session --region us-east-2 --target ", head_node]]}


@pytest.mark.parametrize("fixture", ["every_type", "reserved"])
def test_cfn_lint_and_cdk_nag_clean(request, fixture):
    result = request.getfixturevalue(fixture)
    assert nag_violations(result) == []
    for path in result.template_paths():
        assert cfn_lint_errors(path, result.config.region) == []


def test_config_errors():
    with pytest.raises(ConfigError, match=r"compute_groups\[0\]\.name = 'default': .*ParallelCluster forbids default"):
        config_with(group={"name": "default"}, backends=["parallelcluster"])
    config_with(group={"name": "default"}, backends=["eks"])  # a name only Slurm reserves
    # The internet in all but name too: 0.0.0.0/1 and 128.0.0.0/1 together are all of it.
    for wide in ("0.0.0.0/0", "0.0.0.0/1", "128.0.0.0/2"):
        with pytest.raises(ConfigError, match=r"ssh_allowed_cidr = .*: a network of /8 or narrower"):
            config_with(parallelcluster={"ssh_allowed_cidr": wide})
    with pytest.raises(ConfigError, match="head_node_instance_type"):
        config_with(parallelcluster={"head_node_instance_type": "big"})


# -- the setup script and the batch scripts --------------------------------------------------------


def test_setup_script_is_valid_bash_and_takes_every_version_from_arguments():
    subprocess.run(["bash", "-n", str(SETUP_SCRIPT)], check=True)
    text = SETUP_SCRIPT.read_text()
    for version in (NEURON_SDK_VERSION, *NEURON_APT_PACKAGES.values(), *NEURON_PIP_PACKAGES.values()):
        assert version not in text
    assert "cfn_node_type" in text and "/etc/hosts" in text


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_batch_script_runs_torchrun_on_every_neuroncore_of_every_node(instance_type, tmp_path):
    spec = DEFAULT_CATALOG.get(instance_type)
    config = EVERY_TYPE
    group = next(g for g in config.compute_groups if g.instance_type == instance_type)
    text = render_sbatch(config, group)
    # The node count is Slurm's (sbatch -N overrides the default); the launcher reads it at run time.
    assert f"--nnodes={group.nodes}" not in text and '--nnodes="$NNODES"' in text
    assert f"#SBATCH --nodes={group.nodes}\n" in text
    assert f"#SBATCH --partition={group.name}\n" in text
    assert f"export NPROC_PER_NODE={spec.neuron_cores}\n" in text
    assert ("export FI_PROVIDER=efa" in text) == spec.has_efa
    assert ("FI_EFA_USE_DEVICE_RDMA=1" in text) == spec.has_efa
    assert f"export TRN_CACHE_DIR=/fsx/neuron-cache/{group.name}\n" in text  # one layout on every backend
    assert LAUNCHER in text
    assert 'srun --kill-on-bad-exit=1 --label /bin/sh -c "$TRN_LAUNCHER" trainium-launch "$@" || code=$?' in text
    path = tmp_path / "train.sbatch"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_write_dist_writes_the_cli_files(tmp_path):
    paths = write_dist(EVERY_TYPE, tmp_path)
    names = [p.relative_to(tmp_path).as_posix() for p in paths]
    assert names[:3] == [
        "parallelcluster/t-cluster.yaml", "parallelcluster/neuron_setup.sh", "parallelcluster/head_node_setup.sh"
    ]
    assert sorted(names[3:]) == sorted(
        [*(f"parallelcluster/train-{_name(t)}.sbatch" for t in SUPPORTED_TRAINING_TYPES),
         *(f"parallelcluster/fabric-{_name(t)}.sbatch" for t in EFA_TYPES),
         "parallelcluster/50_trainium_neuron_devices.sh", "parallelcluster/neuron_metrics.py",
         "parallelcluster/neuron-metrics-policy.json", "parallelcluster/session-manager-policy.json",
         "parallelcluster/mlp_train.py", "parallelcluster/lustre_tuning.sh",
         # The compute image for `pcluster build-image` (tests/app/parallelcluster/test_parallelcluster_image.py).
         "parallelcluster/t-image.yaml", "parallelcluster/neuron-image-component.sh"]
    )
    text = paths[0].read_text()
    for name in placeholder_names(EVERY_TYPE):
        assert "${" + name + "}" in text
    assert "Token[" not in text
    assert "pcluster create-cluster" in text
    assert paths[1].read_bytes() == SETUP_SCRIPT.read_bytes() and os.access(paths[1], os.X_OK)
    assert paths[2].read_bytes() == HEAD_NODE_SCRIPT.read_bytes() and os.access(paths[2], os.X_OK)
    again = write_dist(EVERY_TYPE, tmp_path / "again")
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]
    # The app's dist/ writer calls it only for a config that deploys ParallelCluster (backends.py).
    from trainium_cdk.app.dist import write_dist as write_app_dist

    write_app_dist(config_with(), tmp_path / "none")
    assert not Path(tmp_path / "none" / "parallelcluster").exists()


def test_a_failed_environment_build_says_what_failed():
    import sys

    from tests.support.pcluster_schema import _run

    with pytest.raises(PclusterUnavailable, match=r"pip install x failed \(exit 3\):\nno index"):
        _run([sys.executable, "-c", "import sys; print('no index', file=sys.stderr); sys.exit(3)"], "pip install x")


# -- the construct alone ---------------------------------------------------------------------------


PRETRAIN = ClusterSettings(
    region="us-east-2",
    queues=(SlurmQueue(nodes=GroupNodes("pretrain", DEFAULT_CATALOG.get("trn1.32xlarge"), max_nodes=4)),),
    head_node=HeadNode(instance_type="m7i.xlarge", root_volume_gib=200, ssh_allowed_cidr="10.0.0.0/16"),
    new_file_system=NewFileSystem(capacity_gib=1200, deployment_type="PERSISTENT_2", throughput_mb_per_tib=250),
    tags=(("project", "research"),),
)


def test_slurm_cluster_built_alone_from_props_in_a_bare_stack():
    """Typed settings, no config: the construct renders the configuration with the ids it supplies."""
    stack = cdk.Stack(cdk.App(), "Bare", env=cdk.Environment(region="us-east-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1)
    group = ec2.SecurityGroup(stack, "Efa", vpc=vpc)
    slurm = SlurmCluster(
        stack,
        "Slurm",
        cluster_name="research",
        settings=PRETRAIN,
        head_node_subnet=vpc.public_subnets[0],
        compute_subnets={"pretrain": vpc.private_subnets[0]},
        security_group=group,
        batch_scripts={"train-pretrain.sbatch": "#!/bin/bash\n"},
        removal_policy=RemovalPolicy.RETAIN,
    )
    (cluster,) = resources(Template.from_stack(stack).to_json(), "Custom::PclusterCluster").values()
    props = cluster["Properties"]
    assert props["ClusterName"] == "research" and props["DeletionPolicy"] == "Retain"
    configuration = props["ClusterConfiguration"]
    (queue,) = configuration["Scheduling"]["SlurmQueues"]
    assert queue["Name"] == "pretrain"
    assert queue["Networking"]["SubnetIds"] == [stack.resolve(vpc.private_subnets[0].subnet_id)]
    assert queue["Networking"]["AdditionalSecurityGroups"] == [stack.resolve(group.security_group_id)]
    assert configuration["HeadNode"]["Networking"]["SubnetId"] == stack.resolve(vpc.public_subnets[0].subnet_id)
    assert re.fullmatch(r"[0-9a-f]{64}\.sh", _script_key(queue["CustomActions"]["OnNodeConfigured"]["Script"]))
    args = configuration["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]
    (sbatch,) = [args[i + 1] for i, a in enumerate(args) if a == "--sbatch"]
    (named, bucket, key) = sbatch["Fn::Join"][1]  # name=sha256@s3://bucket/key
    assert re.fullmatch(r"train-pretrain\.sbatch=[0-9a-f]{64}@s3://", named) and bucket == ASSET_BUCKET
    assert re.fullmatch(r"/[0-9a-f]{64}\.sbatch", key)
    assert configuration["Tags"] == [{"Key": "project", "Value": "research"}]
    assert slurm.prolog is None and slurm.ids.file_system_id is None


@pytest.mark.parametrize("prefix", [None, "research/"])
def test_slurm_cluster_reads_its_scripts_by_key_prefix_or_warns(prefix):
    synthesizer = cdk.DefaultStackSynthesizer(bucket_prefix=prefix) if prefix else None
    stack = cdk.Stack(cdk.App(), "Bare", env=cdk.Environment(region="us-east-2"), synthesizer=synthesizer)
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1)
    ids = SlurmCluster(
        stack, "Slurm", cluster_name="research", settings=PRETRAIN, head_node_subnet=vpc.public_subnets[0],
        compute_subnets={"pretrain": vpc.private_subnets[0]}, security_group=ec2.SecurityGroup(stack, "Sg", vpc=vpc),
        batch_scripts={"train-pretrain.sbatch": "#!/bin/bash\n"},
    ).ids
    scripts = [ids.setup_script, ids.head_node_script, *ids.batch_scripts.values()]
    assert len({o.bucket for o in scripts}) == 1  # one token for the one asset bucket
    access = read_access(scripts)
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("bucket's root"))
    if prefix:
        assert [a["KeyName"] for a in access] == ["research/*"] and warnings == []
    else:
        assert [a["KeyName"] for a in access] == [o.key for o in scripts] and len(warnings) == 1


def test_slurm_cluster_removal_policy_is_destroy_or_retain():
    stack = cdk.Stack(cdk.App(), "Bare")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1)
    with pytest.raises(ConfigError, match="removal_policy"):
        SlurmCluster(
            stack, "Slurm", cluster_name="c", settings=PRETRAIN, head_node_subnet=vpc.public_subnets[0],
            compute_subnets={}, security_group=ec2.SecurityGroup(stack, "Sg", vpc=vpc),
            removal_policy=RemovalPolicy.SNAPSHOT,
        )
