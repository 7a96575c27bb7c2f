"""Day-2 updates: synthesize the app, then again after each change a user makes once it runs, and
check what `cdk deploy` would do to what is already there:

- no stateful resource is replaced (same logical ids, same values of replacement-causing properties);
- no ParallelCluster setting whose update ParallelCluster refuses changes (its own update policies);
- node groups roll (same node group, a new launch template version) instead of being replaced;
- what each change does to running jobs, by each service's rules (tests/support/lifecycle.py: Batch infrastructure
  updates and their UpdatePolicy, managed node group rolls, Karpenter drift and do-not-disrupt), and that
  the Day-2 table's "Running jobs" column says `stopped` exactly where a job can be stopped.

docs/reference/day-2.md (the Day-2 table) tells users the same, change by change.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import Synthesized, resources, synth
from tests.support.pcluster_schema import update_changes, venv_or_skip
from trainium_cdk.app.config import Config, build_config
from trainium_cdk.facts import versions

BASE: dict[str, Any] = {
    "project": "t",
    "region": "us-west-2",
    "backends": ["eks", "batch", "parallelcluster"],
    # Node groups, which a change can replace; Karpenter's NodePools are applied in place.
    "eks": {"capacity": "managed"},
    "network": {"az_ids": ["usw2-az4", "usw2-az3"]},
    "compute_groups": [{"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2, "max_nodes": 4, "az_ids": "usw2-az4"}],
    "storage": {"data_repository": {"s3_prefix": "datasets/"}},  # a created (retained) bucket too
}
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/training:v2"


def _changed(**edits: Any) -> Callable[[dict[str, Any]], None]:
    def change(raw: dict[str, Any]) -> None:
        for path, value in edits.items():
            *parents, key = path.split("__")
            node = raw
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
            node[key] = value

    return change


@contextmanager
def _neuron_pin() -> Iterator[None]:
    """The next Neuron release of the XLA track in versions.py (a new table row, read by every backend)."""
    old = versions.XLA_TRACK
    new = dataclasses.replace(
        old,
        neuron_release="2.29.2",
        training_image_tag="2.9.0-neuronx-py312-sdk2.29.2-ubuntu24.04",
        apt_packages={k: v.rsplit(".", 1)[0] + ".9" for k, v in old.apt_packages.items()},
        pip_packages={**old.pip_packages, "neuronx-cc": "2.24.9999.0"},
        # A release brings its driver and the AMIs built with it, together: the ECS Neuron AMI and the driver are in
        # the Batch nodes' launch template (the driver in the user data, the AMI as a parameter); on EKS the driver
        # is the EKS AMI release's, so the release moves too (a stand-in date: which release carries a given driver
        # is not in the data read here). Moving the runtime without it runs the new runtime on the old driver.
        driver=old.driver.rsplit(".", 1)[0] + ".9",
        ecs_neuron_ami=old.ecs_neuron_ami.replace("2023.0.2", "2023.0.3", 1),
        eks_ami_release=NEXT_EKS_AMI_RELEASE,
        # And the development instance's DLAMI of that release (the lookup's query names it).
        dlami=versions.AmiQuery(old.dlami.name, "*Neuron SDK 2.29.2*"),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(versions.NEURON_TRACKS, "xla", new)
        yield


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# Stand-ins for releases the project has not pinned yet: the model needs a next one, not its number.
NEXT_EKS_AMI_RELEASE = "v20261015"
NEXT_KARPENTER = "1.15.1"
NEXT_NEURON_DEVICE_PLUGIN_IMAGE = "public.ecr.aws/neuron/neuron-device-plugin:2.99.0.0"
# The EKS AMI release's Kubernetes 1.36 build: v20260930's is not in the data read here (versions.py), so a stand-in.
KUBERNETES_1_36_AMI_PATCH = "1.36.2"


@contextmanager
def _kubernetes_1_36() -> Iterator[None]:
    """The cluster's move from 1.35 to 1.36: versions.KUBERNETES_VERSION, which every per-minor table follows."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(versions, "KUBERNETES_VERSION", "1.36")
        patch.setitem(versions.EKS_AL2023_KUBERNETES_PATCHES, "1.36", KUBERNETES_1_36_AMI_PATCH)  # type: ignore[index]
        yield


@contextmanager
def _eks_ami_release() -> Iterator[None]:
    """A new EKS AMI release for the track (the Trainium nodes' and the system nodes')."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(versions.NEURON_TRACKS, "xla", dataclasses.replace(versions.XLA_TRACK, eks_ami_release=NEXT_EKS_AMI_RELEASE))
        yield


@contextmanager
def _karpenter() -> Iterator[None]:
    """The next Karpenter: its pin, and its two charts vendored anew (`make vendor-chart`), here the same files at
    the new Chart.yaml version."""
    from trainium_cdk.constructs import vendored_charts

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        charts = Path(tmp) / "helm_charts"
        shutil.copytree(vendored_charts.CHARTS_DIR, charts)
        for name in ("karpenter", "karpenter-crd"):
            chart = charts / name / "Chart.yaml"
            chart.write_text(re.sub(r"^(version|appVersion): .*$", rf"\1: {NEXT_KARPENTER}", chart.read_text(), flags=re.M))
        patch.setattr(vendored_charts, "CHARTS_DIR", charts)
        patch.setattr(versions, "KARPENTER_VERSION", NEXT_KARPENTER)
        yield


@contextmanager
def _device_plugin() -> Iterator[None]:
    assert versions.NEURON_DEVICE_PLUGIN_IMAGE != NEXT_NEURON_DEVICE_PLUGIN_IMAGE, "the stand-in must be a change"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(versions, "NEURON_DEVICE_PLUGIN_IMAGE", NEXT_NEURON_DEVICE_PLUGIN_IMAGE)
        yield


def _add_group(raw: dict[str, Any]) -> None:
    raw["compute_groups"].append({"name": "small", "instance_type": "trn1.2xlarge", "nodes": 1, "az_ids": "usw2-az4"})


def _add_backend(raw: dict[str, Any]) -> None:
    raw["backends"] = [*raw["backends"], "instance"]


# Each day-2 change: how it edits the config, and what else changes (a new release of the pins).
CHANGES: dict[str, tuple[Callable[[dict[str, Any]], None], Callable[[], Any]]] = {
    "nodes": (_changed(compute_groups__0__nodes=3), _nothing),
    "max_nodes": (_changed(compute_groups__0__max_nodes=8), _nothing),
    "image": (_changed(workloads__image=IMAGE, batch__image_uri=IMAGE), _nothing),
    "neuron_pin": (lambda raw: None, _neuron_pin),
    "group_added": (_add_group, _nothing),
    "backend_added": (_add_backend, _nothing),
    "instance_type": (_changed(compute_groups__0__instance_type="trn1n.32xlarge"), _nothing),
    "kubernetes_version": (lambda raw: None, _kubernetes_1_36),
    "karpenter": (lambda raw: None, _karpenter),
    "eks_ami_release": (lambda raw: None, _eks_ami_release),
    "device_plugin": (lambda raw: None, _device_plugin),
    "teams_added": (_changed(teams=[{"name": "research", "share": 3}, {"name": "eval", "share": 1}]), _nothing),
    # The reverse of group_added: deployed with the second group, then without it (pairs()).
    "group_removed": (lambda raw: None, _nothing),
    # An upgrade: deployed without the Batch CPU queue (before it existed), then with the default config (pairs()).
    "cpu_queue_added": (lambda raw: None, _nothing),
}
# Changes whose "before" is another change's "after".
REVERSED = {"group_removed": "group_added"}
# Changes whose "before" is a config of its own and whose "after" is the base config.
UPGRADES = {"cpu_queue_added": _changed(batch__cpu_instance_type=None)}

# Stateful (or holding running jobs) resources and the properties whose change replaces them
# (CloudFormation resource reference: "Update requires: Replacement"). A subnet, VPC or security
# group replaced would replace the file system that names it.
REPLACED_BY: dict[str, tuple[str, ...]] = {
    "AWS::FSx::FileSystem": (
        "FileSystemType", "StorageType", "SubnetIds", "SecurityGroupIds", "KmsKeyId", "BackupId",
        "FileSystemTypeVersion", "LustreConfiguration.DeploymentType", "LustreConfiguration.ImportPath",
        "LustreConfiguration.ExportPath", "LustreConfiguration.DriveCacheType",
    ),
    "AWS::FSx::DataRepositoryAssociation": ("FileSystemId", "FileSystemPath", "DataRepositoryPath", "BatchImportMetaDataOnCreate"),
    "AWS::S3::Bucket": ("BucketName", "ObjectLockEnabled"),
    "AWS::ECR::Repository": ("RepositoryName", "EncryptionConfiguration"),
    "AWS::KMS::Key": ("KeySpec", "KeyUsage", "MultiRegion"),
    "AWS::EKS::Cluster": ("Name", "RoleArn", "EncryptionConfig", "KubernetesNetworkConfig", "ResourcesVpcConfig.SubnetIds"),
    "AWS::EC2::VPC": ("CidrBlock", "InstanceTenancy"),
    "AWS::EC2::Subnet": ("AvailabilityZoneId", "CidrBlock", "VpcId"),
    "AWS::EC2::SecurityGroup": ("GroupDescription", "GroupName", "VpcId"),
    "Custom::PclusterCluster": ("ClusterName", "ServiceToken"),
    # Slurm's accounting database (a ParallelCluster cluster with teams): job history and each team's use.
    "AWS::RDS::DBCluster": (
        "DBClusterIdentifier", "DatabaseName", "DBSubnetGroupName", "Engine", "EngineMode", "KmsKeyId", "MasterUsername",
        "SnapshotIdentifier", "SourceDBClusterIdentifier", "StorageEncrypted", "AvailabilityZones",
    ),
    "AWS::RDS::DBSubnetGroup": ("DBSubnetGroupName",),
    "AWS::SecretsManager::Secret": ("Name",),
}
# A managed node group is replaced when one of these changes; the launch template version is not one.
NODEGROUP_REPLACED_BY = (
    "AmiType", "CapacityType", "ClusterName", "DiskSize", "InstanceTypes", "NodeRole", "NodegroupName",
    "RemoteAccess", "Subnets", "LaunchTemplate.Id", "LaunchTemplate.Name",
)


def _config(change: Callable[[dict[str, Any]], None]) -> Config:
    raw = json.loads(json.dumps(BASE))
    change(raw)
    return build_config(raw)


@pytest.fixture(scope="module")
def base() -> Synthesized:
    return synth(_config(lambda raw: None), nag=False)


@pytest.fixture(scope="module")
def after() -> dict[str, Synthesized]:
    results = {}
    for name, (change, context) in CHANGES.items():
        if name in REVERSED or name in UPGRADES:
            continue
        with context():
            results[name] = synth(_config(change), nag=False)
    return results


@pytest.fixture(scope="module")
def pairs(base, after) -> dict[str, tuple[Synthesized, Synthesized]]:
    """Each change as (deployed, deployed after the change)."""
    found = {name: (base, result) for name, result in after.items()}
    found.update({name: (after[of], base) for name, of in REVERSED.items()})
    found.update({name: (synth(_config(change), nag=False), base) for name, change in UPGRADES.items()})
    return found


def _get(properties: dict[str, Any], path: str) -> Any:
    value: Any = properties
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _roles(result: Synthesized) -> list[str]:
    return ["network", *(["storage"] if result.stacks.storage else []), *result.stacks.backends]


def replaced(before: Synthesized, now: Synthesized) -> list[str]:
    """Stateful resources of ``before`` that deploying ``now`` would replace (or delete)."""
    found = []
    for role in _roles(before):
        old, new = before.template_with_nested(role)["Resources"], now.template_with_nested(role)["Resources"]
        for logical_id, resource in old.items():
            props = REPLACED_BY.get(resource["Type"])
            if props is None:
                continue
            if logical_id not in new or new[logical_id]["Type"] != resource["Type"]:
                found.append(f"{role}/{logical_id}: gone (a new logical id replaces it)")
                continue
            for prop in props:
                if _get(resource.get("Properties", {}), prop) != _get(new[logical_id].get("Properties", {}), prop):
                    found.append(f"{role}/{logical_id}: {prop} changes")
    return found


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_no_stateful_resource_is_replaced(pairs, change):
    assert replaced(*pairs[change]) == []


def test_the_replacement_check_sees_a_replacement(base):
    moved = json.loads(json.dumps(base.template_json("storage")))
    (fs,) = resources(moved, "AWS::FSx::FileSystem").values()
    fs["Properties"]["LustreConfiguration"]["DeploymentType"] = "SCRATCH_2"

    class Moved:
        stacks = base.stacks

        @staticmethod
        def template_with_nested(role: str) -> dict[str, Any]:
            return moved if role == "storage" else base.template_with_nested(role)

    assert replaced(base, Moved()) == ["storage/LustreFileSystem: LustreConfiguration.DeploymentType changes"]  # type: ignore[arg-type]


def _nodegroups(result: Synthesized) -> dict[str, dict[str, Any]]:
    template = result.template_json("eks")
    return {
        k: v["Properties"] for k, v in resources(template, "AWS::EKS::Nodegroup").items()
        if "trainium-cdk/compute-group" in v["Properties"].get("Labels", {})
    }


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_node_groups_roll_instead_of_being_replaced(pairs, change):
    old, new = (_nodegroups(r) for r in pairs[change])
    if change == "group_removed":  # the removed group's node group goes; the other stays itself
        assert len(set(old) - set(new)) == 1
        old = {k: v for k, v in old.items() if k in new}
    assert set(old) <= set(new)
    for logical_id, props in old.items():
        for prop in NODEGROUP_REPLACED_BY:
            assert _get(props, prop) == _get(new[logical_id], prop), f"{logical_id}: {prop} replaces the node group"
        # A changed launch template becomes a new version, which the node group rolls out.
        assert new[logical_id]["LaunchTemplate"]["Version"] == {
            "Fn::GetAtt": [props["LaunchTemplate"]["Id"]["Ref"], "LatestVersionNumber"]
        }


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_eks_accepts_every_node_group_update(pairs, change):
    from tests.support.lifecycle import nodegroup_update_refusals

    before, now = pairs[change]
    assert nodegroup_update_refusals(before.template_json("eks"), now.template_json("eks")) == []


# The system node group as every release before its launch template deployed it: this logical id, no
# LaunchTemplate (EKS's own then, which allows two metadata hops).
SYSTEM_NODES_WITHOUT_LAUNCH_TEMPLATE = "EksSystemNodes99733415"


def test_a_cluster_deployed_before_the_system_nodes_launch_template_updates(base):
    """EKS refuses a launch template for a node group created without one: the system node group gets a new
    logical id, which CloudFormation creates before it deletes the old one (their pods move)."""
    from tests.support.lifecycle import nodegroup_update_refusals

    now = base.template_json("eks")
    (system,) = [k for k, v in resources(now, "AWS::EKS::Nodegroup").items()
                 if "trainium-cdk/compute-group" not in v["Properties"].get("Labels", {})]
    deployed = json.loads(json.dumps(now))
    old = deployed["Resources"].pop(system)
    del old["Properties"]["LaunchTemplate"]
    deployed["Resources"][SYSTEM_NODES_WITHOUT_LAUNCH_TEMPLATE] = old
    assert system != SYSTEM_NODES_WITHOUT_LAUNCH_TEMPLATE
    assert nodegroup_update_refusals(deployed, now) == []
    # The rule itself: the same update under the old logical id is refused.
    kept = json.loads(json.dumps(now))
    kept["Resources"][SYSTEM_NODES_WITHOUT_LAUNCH_TEMPLATE] = kept["Resources"].pop(system)
    assert nodegroup_update_refusals(deployed, kept) == [
        f"{SYSTEM_NODES_WITHOUT_LAUNCH_TEMPLATE}: a launch template for a node group created without one"]


def test_an_instance_type_change_is_a_new_launch_template_version(base, after):
    (lt_id,) = {p["LaunchTemplate"]["Id"]["Ref"] for p in _nodegroups(base).values()}
    old = base.template_json("eks")["Resources"][lt_id]["Properties"]["LaunchTemplateData"]
    new = after["instance_type"].template_json("eks")["Resources"][lt_id]["Properties"]["LaunchTemplateData"]
    assert (old["InstanceType"], new["InstanceType"]) == ("trn1.32xlarge", "trn1n.32xlarge")


# -- ParallelCluster's own update policies ----------------------------------------------------------


@pytest.fixture(scope="module")
def pcluster():
    return venv_or_skip("ParallelCluster's update policies")


def _cluster_configuration(result: Synthesized) -> dict[str, Any]:
    (cluster,) = resources(result.template_json("parallelcluster"), "Custom::PclusterCluster").values()
    return cluster["Properties"]["ClusterConfiguration"]


@pytest.fixture(scope="module")
def policies(pcluster, pairs):
    configurations = {name: (_cluster_configuration(b), _cluster_configuration(a)) for name, (b, a) in pairs.items()}
    return update_changes(configurations, cluster_name="t-cluster")


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_no_parallelcluster_setting_unsupported_for_update_changes(policies, change):
    refused = [f"{c.path} ({c.policy})" for c in policies[change] if c.policy == "UNSUPPORTED"]
    assert refused == []


# Changes that ParallelCluster applies only with the compute fleet stopped (`pcluster update-compute-fleet
# --status STOP_REQUESTED`): a new instance type is a new compute resource, and removing the old one
# with running nodes needs QueueUpdateStrategy TERMINATE, which would kill running jobs.
NEEDS_FLEET_STOPPED = {"instance_type": ["Scheduling.SlurmQueues[train].ComputeResources"],
                       "group_removed": ["Scheduling.SlurmQueues"],
                       # Slurm's accounting database (issue 46): ParallelCluster's COMPUTE_FLEET_STOP policy.
                       "teams_added": ["Scheduling.SlurmSettings.Database"]}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_parallelcluster_applies_the_change_while_jobs_run(policies, change):
    blocked = [c.path for c in policies[change] if c.running != "SUCCEEDED"]
    assert blocked == NEEDS_FLEET_STOPPED.get(change, [])
    assert [c.path for c in policies[change] if c.stopped != "SUCCEEDED"] == []


def test_queue_changes_drain_and_only_pins_replace_compute_nodes(base, policies):
    settings = _cluster_configuration(base)["Scheduling"]["SlurmSettings"]
    assert settings["QueueUpdateStrategy"] == "DRAIN"
    # Compute nodes are replaced (after their jobs, with DRAIN) only when what they run changes.
    replaces_nodes = {name for name, changes in policies.items() if any(c.policy == "QUEUE_UPDATE_STRATEGY" for c in changes)}
    assert replaces_nodes == {"neuron_pin"}


def test_each_change_is_seen_by_parallelcluster(policies):
    # The comparison is not vacuous: a change of the cluster is a ParallelCluster change.
    for change in ("nodes", "max_nodes", "neuron_pin", "group_added", "instance_type"):
        assert policies[change], change


def test_readme_tells_each_day2_change():
    from pathlib import Path

    from tests.support.readme import page

    section = page("reference/day-2.md")
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Change")]
    words = {
        "nodes": "`nodes`", "max_nodes": "`max_nodes`", "image": "image", "neuron_pin": "Neuron pin",
        "group_added": "compute group added", "backend_added": "backend added", "instance_type": "instance type",
        "kubernetes_version": "Kubernetes version", "karpenter": "Karpenter upgrade", "eks_ami_release": "EKS AMI release",
        "device_plugin": "Neuron device plugin", "group_removed": "compute group removed",
        "teams_added": "`teams` added", "cpu_queue_added": "Batch CPU queue added",
    }
    assert sorted(words) == sorted(CHANGES)
    for change, word in words.items():
        assert any(row.startswith(f"| {word}") for row in rows), change


# -- what each change does to running jobs (tests/support/lifecycle.py), and what the README says ----------------


def _running_jobs_effects(base: Synthesized, now: Synthesized) -> list[Any]:
    from tests.support.lifecycle import batch_effects, managed_nodegroup_effects

    return [*batch_effects(base.template_with_nested("batch"), now.template_with_nested("batch")),
            *managed_nodegroup_effects(base.template_json("eks"), now.template_json("eks"))]


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_day2_table_says_where_a_change_stops_running_jobs(pairs, policies, change):
    """The README's table (trainium_cdk/app/day2.py) against each service's rules on the templates: Batch
    infrastructure updates and managed node group rolls (tests/support/lifecycle.py), ParallelCluster's own update
    policies (a change it applies only with the compute fleet stopped). Karpenter waits for the job:
    test_karpenter_drift_waits_for_the_job_on_the_default_app."""
    from trainium_cdk.app import day2

    (row,) = [c for c in day2.CHANGES if c.key == change]
    effects = _running_jobs_effects(*pairs[change])
    model = {"eks-managed" if e.backend == "eks" else e.backend for e in effects if e.stops_jobs}
    if any(c.running != "SUCCEEDED" for c in policies[change]):
        model.add("parallelcluster")
    # The development instance's column: test_the_day2_table_says_where_a_change_replaces_the_development_instance;
    # Karpenter's: test_the_day2_table_says_where_karpenter_stops_running_jobs.
    assert set(row.stops) - {"instance", "eks-karpenter"} == model, (change, [e for e in effects if e.stops_jobs])


def test_the_readme_holds_the_generated_day2_table():
    from pathlib import Path

    from tests.support.readme import page
    from trainium_cdk.app import day2

    assert day2.block() in page("reference/day-2.md"), "run: make docs"
    assert sorted(c.key for c in day2.CHANGES) == sorted(CHANGES)


def test_the_lifecycle_model_sees_a_removed_group_stop_its_jobs(pairs):
    """Removing a group deletes its managed node group and its Batch compute environment and job queue (their jobs
    stop); the other group's resources stay as they are."""
    effects = _running_jobs_effects(*pairs["group_removed"])
    assert sorted((e.backend, e.why) for e in effects) == [
        ("batch", "the compute environment is deleted"), ("batch", "the job queue is deleted: Batch terminates its jobs"),
        ("eks", "the node group is deleted")]


def test_adding_teams_replaces_each_queue_and_the_model_sees_its_jobs_go(pairs):
    """Teams make each group's queue, and the CPU queue, a new fair-share queue (a FIFO queue takes no policy later):
    the old queue is deleted, which terminates its jobs (issue 46); the compute environments, their instances and
    nothing stateful change."""
    before, after = pairs["teams_added"]
    effects = _running_jobs_effects(before, after)
    assert [(e.backend, e.why) for e in effects] == [("batch", "the job queue is deleted: Batch terminates its jobs")] * 2
    queues = resources(after.template_with_nested("batch"), "AWS::Batch::JobQueue").values()
    assert sorted(q["Properties"]["JobQueueName"] for q in queues) == ["t-batch-train-teams", "t-batch_cpu-teams"]
    assert all("SchedulingPolicyArn" in q["Properties"] for q in queues)


def test_a_pin_change_lets_batch_jobs_run_five_days_then_stops_them(base, after):
    """The pin is in the launch template: an infrastructure update. Without an UpdatePolicy running jobs had
    30 minutes; with it, the 7200 Batch allows (360 before: an old copy of the limit), still less than a
    week-long attempt."""
    effects = [e for e in _running_jobs_effects(base, after["neuron_pin"]) if e.backend == "batch"]
    assert [e.why for e in effects] == [
        "infrastructure update (LaunchTemplate (a new version)): running jobs go on 7200 minutes, "
        "less than the job timeout (10080)"
    ]
    assert [e.backend for e in _running_jobs_effects(base, after["max_nodes"]) if e.stops_jobs] == []


def test_the_lifecycle_model_sees_batchs_default_update_policy(base, after):
    """On the old templates (no UpdatePolicy) a pin change stopped Batch jobs after Batch's default 30 minutes."""
    from tests.support.lifecycle import batch_effects

    old = json.loads(json.dumps(after["neuron_pin"].template_with_nested("batch")))
    for resource in resources(old, "AWS::Batch::ComputeEnvironment").values():
        resource["Properties"].pop("UpdatePolicy")
    (effect,) = batch_effects(base.template_with_nested("batch"), old)
    assert effect.stops_jobs and "go on 30 minutes" in effect.why


def test_karpenter_drift_waits_for_the_job_on_the_default_app():
    """Karpenter (the default capacity): every job pod is do-not-disrupt, and no pool forces disruption, so a
    drifted node (a pin, the instance type) is replaced after its job."""
    from tests.support.lifecycle import karpenter_effects
    from tests.support.reachability import Reachability
    from trainium_cdk.app.workloads import render_job

    result = synth(build_config({**json.loads(json.dumps(BASE)), "eks": {}}), nag=False)
    objects = [o for _, objs in Reachability.from_dir(result.outdir).manifests() for o in objs]
    pods = []
    for job in ("mlp", "mlp-distributed"):
        for obj in render_job(result.config, name="x", image="i", nodes=None, group="train", job=job):
            specs = [t["template"] for t in obj["spec"]["tasks"]] if "tasks" in obj["spec"] else [obj["spec"]["template"]]
            pods += [spec["metadata"].get("annotations", {}) for spec in specs]
    assert len(pods) == 3  # the single-node Job's pod, the Volcano job's leader and worker
    effects = karpenter_effects(objects, pods)
    assert effects and not any(e.stops_jobs for e in effects), effects
    assert karpenter_effects(objects, [{}])[0].stops_jobs  # a pod without the annotation would be drained


# -- the development instance: a deployment of it alone (network, storage, instance), before and after each change --


@pytest.fixture(scope="module")
def instance_pairs() -> dict[str, tuple[Synthesized, Synthesized]]:
    """Each change on a deployment with the development instance (adding it is the change of backend_added)."""
    def only_instance(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        def edit(raw: dict[str, Any]) -> None:
            change(raw)
            raw["backends"] = ["instance"]
        return edit

    before = synth(_config(only_instance(lambda raw: None)), nag=False)
    pairs = {}
    for name, (change, context) in CHANGES.items():
        if name in ("backend_added", *REVERSED):  # a group's removal: group_added's pair, reversed
            continue
        with context():
            pairs[name] = (before, synth(_config(only_instance(change)), nag=False))
    return pairs


@pytest.mark.parametrize("change", sorted(set(CHANGES) - {"backend_added", *REVERSED}))
def test_the_day2_table_says_where_a_change_replaces_the_development_instance(instance_pairs, change):
    """A pin change makes the DLAMI lookup run again (another SDK release in its query): the instance gets
    another ImageId, which CloudFormation applies by replacing it (tests/support/lifecycle.py). Nothing else does."""
    from tests.support.lifecycle import instance_effects
    from trainium_cdk.app import day2

    before, now = instance_pairs[change]
    effects = instance_effects(before.template_json("instance"), now.template_json("instance"))
    (row,) = [c for c in day2.CHANGES if c.key == change]
    assert ("instance" in row.stops) == any(e.stops_jobs for e in effects), (change, effects)
    assert row.instance.startswith("replaced") == bool(effects), (change, row.instance)
    if change == "neuron_pin":
        (effect,) = effects
        assert effect.why.startswith("replaced (ImageId (from ") and "whose query changes" in effect.why


def test_the_instance_model_sees_a_create_only_change_and_ignores_the_rest(instance_pairs):
    from tests.support.lifecycle import instance_effects

    before, _ = instance_pairs["nodes"]
    template = before.template_json("instance")
    moved = json.loads(json.dumps(template))
    (instance,) = resources(moved, "AWS::EC2::Instance").values()
    instance["Properties"]["SubnetId"] = "subnet-other"
    instance["Properties"].setdefault("Tags", []).append({"Key": "k", "Value": "v"})  # updated in place
    (effect,) = instance_effects(template, moved)
    assert effect.stops_jobs and effect.why == "replaced (SubnetId changes)"
    assert instance_effects(template, template) == []


# -- the native track's move to Neuron 2.34.0, as it happens on a native deployment ------------------------------

NATIVE: dict[str, Any] = {
    "project": "t",
    "region": "us-east-2",
    "backends": ["eks", "batch", "instance"],
    "neuron": {"track": "native"},
    "network": {"az_ids": ["use2-az3", "use2-az2"]},
    "instance_offerings": {"trn2.48xlarge": {"us-east-2": ["use2-az3", "use2-az2"]}},
    "compute_groups": [{"name": "train", "instance_type": "trn2.48xlarge", "nodes": 2, "az_ids": "use2-az3"}],
    "instance": {"instance_type": "trn2.48xlarge"},
}


def _native_2_33_1() -> versions.NeuronTrack:
    """The native track's table before Neuron 2.34.0 (its pins as this project shipped them)."""
    return dataclasses.replace(
        versions.NATIVE_TRACK, neuron_release="2.33.1", released="2026-11-11", driver="2.31.8.0",
        apt_packages={"aws-neuronx-dkms": "2.31.8.0", "aws-neuronx-collectives": "2.35.49.0",
                      "aws-neuronx-runtime-lib": "2.35.33.0", "aws-neuronx-tools": "2.33.38.0"},
        pip_packages={"neuronx-cc": "2.28.7631.0", "torch-neuronx": "2.14.3.0", "nki": "0.7.0"},
        training_image_tag="2.14.0-neuronx-py314-sdk2.33.1-ubuntu26.04",
        dlami=versions.AmiQuery(versions.NATIVE_TRACK.dlami.name, "*Neuron SDK 2.33.1*"),
    )


@pytest.fixture(scope="module")
def native_patch() -> tuple[Synthesized, Synthesized]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(versions.NEURON_TRACKS, "native", _native_2_33_1())
        before = synth(build_config(json.loads(json.dumps(NATIVE))), nag=False)
    return before, synth(build_config(json.loads(json.dumps(NATIVE))), nag=False)


def _example_image_tags(result: Synthesized, backend: str) -> set[str]:
    """The training image tag of a backend's examples: the built images' base (Batch), else the image the jobs
    run in (EKS, which builds none by default)."""
    assets = json.loads((result.outdir / f"{result.stacks.backends[backend].artifact_id}.assets.json").read_text())
    built = {image["source"]["dockerBuildArgs"]["BASE_TAG"] for image in assets.get("dockerImages", {}).values()}
    if built or backend != "eks":
        return built
    return {result.template_json("eks")["Outputs"]["ExampleImageUri"]["Value"].rsplit(":", 1)[1]}


def test_the_native_track_s_patch_release_on_every_backend(native_patch):
    """2.33.1 -> 2.34.0 on eks (Karpenter), batch and the development instance: Batch gets a new launch template
    version (the driver is in its user data), an infrastructure update that stops running jobs after its
    UpdatePolicy's timeout; EKS nodes drift, since their AMI release (v20260930) predates both Neuron releases and
    their user data installs the track's driver (node/eks_neuron_driver.sh): Karpenter replaces each node once its
    do-not-disrupt job ends, and the jobs' image moves to the new tag; the development instance is replaced (a new
    DLAMI). Nothing stateful is replaced."""
    from tests.app.test_neuron_tracks import _manifest_objects
    from tests.support.lifecycle import batch_effects, instance_effects, karpenter_effects

    before, now = native_patch
    assert replaced(before, now) == []
    (batch,) = batch_effects(before.template_with_nested("batch"), now.template_with_nested("batch"))
    assert batch.stops_jobs and "LaunchTemplate (a new version)" in batch.why
    node_classes = [[o["spec"] for o in _manifest_objects(r.template_json("eks")) if o.get("kind") == "EC2NodeClass"]
                    for r in (before, now)]
    assert node_classes[0] and len(node_classes[0]) == len(node_classes[1])
    for old, new in zip(*node_classes, strict=True):  # drift: only the user data's driver pin moved
        assert {key for key in {*old, *new} if old.get(key) != new.get(key)} == {"userData"}
        assert (old["userData"].replace("NEURON_DRIVER=2.31.8.0", f"NEURON_DRIVER={versions.NATIVE_TRACK.driver}")
                == new["userData"])
    objects = _manifest_objects(now.template_json("eks"))
    (effect,) = karpenter_effects(objects, [{"karpenter.sh/do-not-disrupt": "true"}])
    assert not effect.stops_jobs and "after its job" in effect.why
    assert (_example_image_tags(before, "eks"), _example_image_tags(now, "eks")) == (
        {"2.14.0-neuronx-py314-sdk2.33.1-ubuntu26.04"}, {versions.NATIVE_TRACK.training_image_tag})
    (instance,) = instance_effects(before.template_json("instance"), now.template_json("instance"))
    assert instance.stops_jobs and "whose query changes" in instance.why
