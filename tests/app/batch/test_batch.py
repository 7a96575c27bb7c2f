"""AWS Batch backend: compute environments, queues and multi-node parallel job definitions over all EFA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from tests.support import node_files
from tests.support.helpers import (
    US_EAST_2,
    cfn_lint_errors,
    config_with,
    imported,
    nag_violations,
    quality_synth,
    resources,
    template_text,
)
from trainium_cdk import node
from trainium_cdk.app.stacks import compose
from trainium_cdk.constructs.batch import (
    CONTAINER_MEMORY_FRACTION,
    TrainiumBatch,
    ecr_repository_arn,
)
from trainium_cdk.constructs.batch_node import BATCH_NODE_FILES
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.capacity import GroupNodes
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, SUPPORTED_TRAINING_TYPES, InstanceSpec
from trainium_cdk.facts.names import METRICS_DIR_VARIABLE, NODE_METRICS_DIR
from trainium_cdk.runtime.launcher import launch_command

# One app holds a group of every type, in us-east-2 where cfn-lint knows Trn1 and Trn2.
AZ = {"trn1.2xlarge": "use2-az2"}
MAX_NODES = 4
CUSTOM_IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/ml/train:1.0"
CUSTOM_COMMAND = ["/opt/train.py", "--epochs", "3"]


def _group(instance_type: str) -> dict:
    return {
        "name": instance_type.replace(".", "-"),
        "instance_type": instance_type,
        "nodes": 1 if instance_type == "trn1.2xlarge" else 2,
        "max_nodes": MAX_NODES,
        "az_ids": AZ.get(instance_type, "use2-az3"),
        "root_volume_gib": 300,
    }


@pytest.fixture(scope="module")
def every_type():
    """A Batch compute group of every supported type, with the storage stack."""
    return quality_synth(
        config_with(**US_EAST_2, backends=["batch"], compute_groups=[_group(t) for t in SUPPORTED_TRAINING_TYPES])
    )


@pytest.fixture(scope="module")
def reserved():
    """A capacity reservation and a capacity block, no storage, and every Batch setting changed."""
    return quality_synth(
        config_with(
            **US_EAST_2,
            backends=["batch"],
            compute_groups=[
                {**_group("trn1.32xlarge"), "name": "reserved", "nodes": 4,
                 "capacity": {"type": "reservation", "reservation_id": "cr-0aaaaaaaaaaaaaaaa"}},
                {**_group("trn2.48xlarge"), "name": "block",
                 "capacity": {"type": "capacity-block", "reservation_id": "cr-0bbbbbbbbbbbbbbbb"}},
            ],
            storage={"enabled": False},
            batch={
                "image_uri": CUSTOM_IMAGE, "command": CUSTOM_COMMAND, "job_timeout_minutes": 120,
                "retry_attempts": 3, "log_retention_days": 7, "runnable_timeout_minutes": 30,
            },
        )
    )


CPU = "(the CPU queue)"  # Group's name of the CPU queue: no compute group's name has a space

class Group:
    """The synthesized resources of one compute group's TrainiumBatch (or, named CPU, the CPU queue's)."""

    def __init__(self, result, name: str) -> None:
        self.stack = result.stacks.backends["batch"]
        self.construct: TrainiumBatch = self.stack.cpu if name == CPU else self.stack.groups[name]
        # Each group is a nested stack of the Batch stack (stacks/batch_stack.py): its own template.
        self.holder = cdk.Stack.of(self.construct)
        self.template = json.loads((result.outdir / self.holder.template_file).read_text())
        self.parent = result.template_json("batch")
        self.spec = getattr(self.construct, "spec", None)
        self.outdir = result.outdir

    def logical_id(self, construct) -> str:
        stack = cdk.Stack.of(_resource(construct))
        return stack.resolve(stack.get_logical_id(_resource(construct)))

    @property
    def entry_id(self) -> str:
        """The logical id of the group's nested stack in the Batch stack."""
        return self.stack.resolve(self.stack.get_logical_id(self.holder.nested_stack_resource))

    def from_parent(self, value: Any) -> Any:
        """What the Batch stack passes for a parameter of the group's template (a shared role's ARN), else ``value``."""
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in self.template.get("Parameters", {}):
            return self.parent["Resources"][self.entry_id]["Properties"]["Parameters"][value["Ref"]]
        return value

    def to_parent(self, value: Any) -> dict[str, Any]:
        """How the Batch stack reads ``value`` of the group's template: an output of its nested stack."""
        (name,) = [n for n, o in self.template.get("Outputs", {}).items() if o["Value"] == value]
        return {"Fn::GetAtt": [self.entry_id, f"Outputs.{name}"]}

    def properties(self, construct) -> dict[str, Any]:
        """A resource's properties, from the group's template or, for the shared roles, the Batch stack's."""
        template = self.template if cdk.Stack.of(_resource(construct)) is self.holder else self.parent
        return template["Resources"][self.logical_id(construct)]["Properties"]

    @property
    def compute(self) -> dict[str, Any]:
        return self.properties(self.construct.compute_environment)["ComputeResources"]

    @property
    def launch_template(self) -> dict[str, Any]:
        return self.properties(self.construct.launch_template.resource)["LaunchTemplateData"]

    @property
    def job_definition(self) -> dict[str, Any]:
        return self.properties(self.construct.job_definition)

    @property
    def container(self) -> dict[str, Any]:
        definition = self.job_definition
        if definition["Type"] == "multinode":
            (node_range,) = definition["NodeProperties"]["NodeRangeProperties"]
            return node_range["Container"]
        return definition["ContainerProperties"]

    @property
    def environment(self) -> dict[str, str]:
        return {e["Name"]: e["Value"] for e in self.container["Environment"]}

    @property
    def user_data(self) -> str:
        return template_text(self.launch_template["UserData"]["Fn::Base64"])

    @property
    def setup(self) -> tuple[dict[str, str], str]:
        """The values in the user data and the node setup program it fetches (tests/support/node_files.py)."""
        return node_files.fetched_setup(node_files.shell_part(self.user_data), self.outdir)


def _resource(construct) -> cdk.CfnResource:
    return construct if isinstance(construct, cdk.CfnResource) else construct.node.default_child


def _name(instance_type: str) -> str:
    return _group(instance_type)["name"]


def _network_id(result, construct) -> str:
    """The logical id of a resource of the network stack."""
    network = result.stacks.network
    return network.resolve(network.get_logical_id(_resource(construct)))


def _efa_group(result) -> dict[str, Any]:
    """How the network stack's EFA security group is named in a group's properties (once imported)."""
    return {"Fn::GetAtt": [_network_id(result, result.stacks.network.network.efa_security_group), "GroupId"]}


# -- compute environment ---------------------------------------------------------------------------


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_compute_environment_is_the_group_type_scaled_from_zero(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    compute = group.compute
    assert compute["Type"] == "EC2"  # multi-node parallel jobs do not run on Spot
    assert compute["InstanceTypes"] == [instance_type]
    assert compute["MinvCpus"] == 0
    assert compute["MaxvCpus"] == MAX_NODES * group.spec.vcpus
    assert compute["AllocationStrategy"] == "BEST_FIT_PROGRESSIVE"
    assert compute["Ec2Configuration"] == [{"ImageType": "ECS_AL2023"}]


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_compute_environment_uses_the_launch_template_at_its_latest_version(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    template_id = group.logical_id(group.construct.launch_template.resource)
    assert group.compute["LaunchTemplate"] == {
        "LaunchTemplateId": {"Ref": template_id},
        "Version": {"Fn::GetAtt": [template_id, "LatestVersionNumber"]},
    }
    profile = group.compute["InstanceRole"]["Fn::GetAtt"][0]  # the group's own (its template's)
    roles = group.template["Resources"][profile]["Properties"]["Roles"]
    assert roles == [{"Ref": group.logical_id(group.construct.instance_role)}]


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_compute_environment_in_the_one_compute_subnet(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    (subnet,) = group.compute["Subnets"]
    expected = _network_id(every_type, every_type.stacks.network.network.compute_subnet(_name(instance_type)))
    assert imported(every_type, subnet) == {"Ref": expected}


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_on_demand_uses_the_cluster_placement_group(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    placement = every_type.stacks.network.network.placement_group(_name(instance_type))
    expected = {"Fn::GetAtt": [_network_id(every_type, placement), "GroupName"]}
    assert imported(every_type, group.compute["PlacementGroup"]) == expected
    assert imported(every_type, group.launch_template["Placement"]["GroupName"]) == expected
    assert "CapacityReservationSpecification" not in group.launch_template


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_security_groups_live_on_the_efa_interfaces_only(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    if group.spec.has_efa:
        # EC2 rejects instance-level groups next to the template's network interfaces.
        assert "SecurityGroupIds" not in group.compute
        assert "SecurityGroupIds" not in group.launch_template
    else:
        assert [imported(every_type, g) for g in group.compute["SecurityGroupIds"]] == [_efa_group(every_type)]


# -- launch template -------------------------------------------------------------------------------


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_launch_template_wires_every_efa_interface_of_the_catalog(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    data = group.launch_template
    interfaces = data.get("NetworkInterfaces", [])
    assert data["InstanceType"] == instance_type
    assert len(interfaces) == group.spec.efa_interfaces
    assert sorted(i["NetworkCardIndex"] for i in interfaces) == list(range(group.spec.efa_interfaces))
    assert all(i["InterfaceType"] == "efa" for i in interfaces)
    assert all([imported(every_type, g) for g in i["Groups"]] == [_efa_group(every_type)] for i in interfaces)
    assert not any("AssociatePublicIpAddress" in i for i in interfaces)  # private subnets only
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["BlockDeviceMappings"][0]["Ebs"] == {
        "DeleteOnTermination": True, "Encrypted": True, "VolumeSize": 300, "VolumeType": "gp3"
    }


NEURON_ECS_AMI_PARAMETER = versions.XLA_TRACK.ecs_neuron_ami_parameter


def test_nodes_run_aws_s_immutable_per_ami_name_ecs_neuron_parameter(every_type):
    assert NEURON_ECS_AMI_PARAMETER == (
        "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/"
        "al2023-ami-ecs-neuron-hvm-2023.0.20260922-kernel-6.1-x86_64/image_id"
    )
    for instance_type in SUPPORTED_TRAINING_TYPES:
        group = Group(every_type, _name(instance_type))  # each group's template reads the parameter
        parameters = {k: v for k, v in group.template["Parameters"].items()
                      if v.get("Default") == NEURON_ECS_AMI_PARAMETER}
        (parameter_id,) = parameters
        assert parameters[parameter_id]["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
        assert group.launch_template["ImageId"] == {"Ref": parameter_id}


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_user_data_is_mime_multipart_and_installs_what_is_missing(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    text = group.user_data
    assert text.startswith("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=")
    assert 'Content-Type: text/x-shellscript; charset="us-ascii"' in text
    assert text.rstrip().endswith("--==TRAINIUM_CDK==--")
    driver = versions.XLA_TRACK.driver
    # The track's driver unless the AMI carries exactly that version; the tools when missing; EFA with EFA
    # (trainium_cdk/node/batch_node.sh, its values in the header; tests/unit/node/test_node_programs.py runs it).
    values, program = group.setup
    assert node.source("batch_node.sh") + node.source("lustre_client.sh") in program
    assert values["NEURON_DRIVER"] == driver and values["NEURON_YUM_REPO"] == "https://yum.repos.neuron.amazonaws.com"
    assert ("EFA_INSTALLER_URL" in values) == ("EFA_INSTALLER_SHA256" in values) == group.spec.has_efa
    assert "@tcp:/" in values["LUSTRE_SOURCE"] and values["LUSTRE_MOUNT_POINT"] == "/fsx"


def test_a_node_that_shuts_itself_down_is_terminated(every_type):
    """node/batch_node.sh shuts down a host whose setup failed: EC2 then terminates it (the launch template's
    InstanceInitiatedShutdownBehavior), so it leaves the compute environment instead of lingering stopped."""
    for instance_type in SUPPORTED_TRAINING_TYPES:
        assert Group(every_type, _name(instance_type)).launch_template["InstanceInitiatedShutdownBehavior"] == "terminate"


def test_user_data_mounts_the_storage_stack_file_system(every_type):
    source = node_files.header_value(Group(every_type, "trn1-32xlarge").launch_template["UserData"], "LUSTRE_SOURCE")
    (file_system,) = resources(every_type.template_json("storage"), "AWS::FSx::FileSystem")
    # The file system's DNS name is <id>.fsx.<region>.amazonaws.com; its mount name an attribute.
    assert [imported(every_type, p) for p in source] == [
        "'", {"Ref": file_system}, ".fsx.us-east-2.", {"Ref": "AWS::URLSuffix"}, "@tcp:/",
        {"Fn::GetAtt": [file_system, "LustreMountName"]}, "'"]


# -- job definition --------------------------------------------------------------------------------


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_job_definition_shape(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    definition = group.job_definition
    assert definition["JobDefinitionName"] == f"t-batch-{_name(instance_type)}"
    assert definition["PlatformCapabilities"] == ["EC2"]
    # Every type: multi-node parallel, so that the job runs in awsvpc mode, away from the instance metadata
    # (tests/app/test_instance_metadata.py); a type without EFA runs one-node jobs.
    nodes = definition["NodeProperties"]
    assert definition["Type"] == "multinode" and "ContainerProperties" not in definition
    assert nodes["NumNodes"] == group.construct.nodes and nodes["MainNode"] == 0
    (node_range,) = nodes["NodeRangeProperties"]
    assert node_range["TargetNodes"] == "0:"  # open: a submit-time numNodes reaches every node
    assert node_range["Container"]["InstanceType"] == instance_type


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_container_devices_equal_the_catalog(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    devices = group.container["LinuxParameters"]["Devices"]
    expected = [*group.spec.neuron_device_paths, *group.spec.efa_device_paths]
    assert [d["HostPath"] for d in devices] == expected
    assert [d["ContainerPath"] for d in devices] == expected
    # Left out: the container gets read, write and mknod (the API spells them READ, WRITE, MKNOD).
    assert all("Permissions" not in d for d in devices)
    assert sum(d["HostPath"].startswith("/dev/infiniband/uverbs") for d in devices) == group.spec.efa_interfaces


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_container_unlimited_memlock_neurons_open_files_not_privileged_whole_node(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    container = group.container
    # nofile was Docker's default: Neuron's training scripts run `ulimit -n 65535` first.
    assert container["Ulimits"] == [
        {"HardLimit": -1, "Name": "memlock", "SoftLimit": -1},
        {"HardLimit": 65535, "Name": "nofile", "SoftLimit": 65535},
    ]
    assert container.get("Privileged") in (None, False)
    requirements = {r["Type"]: r["Value"] for r in container["ResourceRequirements"]}
    assert requirements["VCPU"] == str(group.spec.vcpus)
    assert requirements["MEMORY"] == str(int(group.spec.memory_gib * 1024 * CONTAINER_MEMORY_FRACTION))
    assert container["LinuxParameters"]["SharedMemorySize"] > 64


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_container_environment(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    env = group.environment
    assert env["NEURON_RT_RESET_CORES"] == "1"
    assert env["XLA_TRANSFER_SEED_ASYNC"] == "1"
    assert env["TRN_CACHE_DIR"] == f"/fsx/neuron-cache/{_name(instance_type)}"
    assert env["NPROC_PER_NODE"] == str(group.spec.neuron_cores) and env["MASTER_PORT"] == "29500"
    efa = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1", "CCOM_SOCKET_IFNAME": "eth0"}
    if group.spec.has_efa:
        assert efa.items() <= env.items()
    else:
        assert not set(efa) & set(env)


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_the_launcher_runs_the_script_parameter(every_type, instance_type):
    group = Group(every_type, _name(instance_type))
    # The launcher reads AWS_BATCH_JOB_NODE_INDEX / NUM_NODES / MAIN_NODE_PRIVATE_IPV4_ADDRESS at run time
    # (tests/unit/jobs/test_launcher.py, tests/e2e/test_rehearsal.py).
    assert group.container["Command"] == launch_command(["Ref::script"])
    # The example image's script: the first job needs nothing copied to /fsx (it ran /fsx/code/train.py,
    # which nothing put there).
    assert group.job_definition["Parameters"] == {"script": "/opt/trainium-cdk/examples/mlp/train.py"}


def test_image_retries_timeout_and_logs_defaults(every_type):
    group = Group(every_type, "trn1-32xlarge")
    # The MLP example image, built at deploy on the track's Neuron training container.
    assets = json.loads((every_type.outdir / f"{group.stack.artifact_id}.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    (destination,) = image["destinations"].values()
    assert destination["repositoryName"] == "cdk-hnb659fds-container-assets-${AWS::AccountId}-us-east-2"
    assert group.container["Image"] == {"Fn::Sub": "${AWS::AccountId}.dkr.ecr.us-east-2.${AWS::URLSuffix}/"
                                                   f"{destination['repositoryName']}:{destination['imageTag']}"}
    assert image["source"]["dockerBuildArgs"] == {"BASE_TAG": versions.XLA_TRACK.training_image_tag}
    assert (every_type.outdir / image["source"]["directory"] / "train.py").is_file()
    assert group.job_definition["RetryStrategy"]["Attempts"] == 2  # which exits retry: tests/e2e/test_resume.py
    # A week per attempt: pre-training runs for days (the old 24 hours stopped every longer run).
    assert group.job_definition["Timeout"] == {"AttemptDurationSeconds": 7 * 24 * 3600}
    # An infrastructure update (a pin, the AMI) lets running jobs go on as long as Batch allows, 5 days (the
    # default was 30 minutes; then 360, an old copy of Batch's limit), and never terminates them at once.
    assert group.properties(group.construct.compute_environment)["UpdatePolicy"] == {
        "JobExecutionTimeoutMinutes": 7200, "TerminateJobsOnUpdate": False}
    logging = group.container["LogConfiguration"]
    assert logging["LogDriver"] == "awslogs"
    assert logging["Options"]["awslogs-group"] == {"Ref": group.logical_id(group.construct.log_group)}
    assert group.properties(group.construct.log_group)["RetentionInDays"] == 30


def test_fsx_and_the_hosts_metrics_folder_are_mounted_into_the_container(every_type):
    group = Group(every_type, "trn1-32xlarge")
    container = group.container
    assert container["Volumes"] == [
        {"Host": {"SourcePath": "/fsx"}, "Name": "fsx"},
        # The launcher writes the job's compile-cache counters where the host's Prometheus collector reads.
        {"Host": {"SourcePath": NODE_METRICS_DIR}, "Name": "node-metrics"},
    ]
    assert container["MountPoints"] == [  # read-write
        {"ContainerPath": "/fsx", "SourceVolume": "fsx"},
        {"ContainerPath": NODE_METRICS_DIR, "SourceVolume": "node-metrics"},
    ]
    assert group.environment[METRICS_DIR_VARIABLE] == NODE_METRICS_DIR


# -- queues, roles, outputs ------------------------------------------------------------------------


def test_one_job_queue_per_group_on_its_compute_environment(every_type):
    assert resources(every_type.template_json("batch"), "AWS::Batch::JobQueue") == {}  # each in its group's stack
    for instance_type in SUPPORTED_TRAINING_TYPES:
        assert len(resources(Group(every_type, _name(instance_type)).template, "AWS::Batch::JobQueue")) == 1
    for instance_type in SUPPORTED_TRAINING_TYPES:
        group = Group(every_type, _name(instance_type))
        queue = group.properties(group.construct.job_queue)
        assert queue["JobQueueName"] == f"t-batch-{_name(instance_type)}"
        assert queue["ComputeEnvironmentOrder"] == [
            {
                "ComputeEnvironment": {
                    "Fn::GetAtt": [group.logical_id(group.construct.compute_environment), "ComputeEnvironmentArn"]
                },
                "Order": 1,
            }
        ]
        # A job its group cannot run yet (no capacity, too few instances) is cancelled after 4 hours with the
        # reason, not left blocking the queue behind it forever (there was no action).
        stuck = queue["JobStateTimeLimitActions"]
        assert {a["Reason"] for a in stuck} == {
            "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
            "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT"}
        assert {(a["Action"], a["State"], a["MaxTimeSeconds"]) for a in stuck} == {("CANCEL", "RUNNABLE", 4 * 3600)}


def test_stuck_jobs_wait_as_configured_and_for_a_capacity_block(reserved):
    queue = Group(reserved, "reserved").properties(Group(reserved, "reserved").construct.job_queue)
    assert {a["MaxTimeSeconds"] for a in queue["JobStateTimeLimitActions"]} == {30 * 60}
    # Jobs queued before a capacity block opens wait for it: Batch would call that insufficient capacity.
    block = Group(reserved, "block")
    assert "JobStateTimeLimitActions" not in block.properties(block.construct.job_queue)


def _statements(group: Group, role) -> list[dict]:
    """The statements of a role's policies: the group's instance role in its template, the shared roles in the parent."""
    role_id = group.logical_id(role)
    template = group.template if cdk.Stack.of(_resource(role)) is group.holder else group.parent
    return [
        s
        for p in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_instance_role_is_the_ecs_agent_and_one_image_repository(every_type):
    group = Group(every_type, "trn1-32xlarge")
    statements = _statements(group, group.construct.instance_role)
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"ecs:RegisterContainerInstance", "ecs:Poll", "ecs:SubmitTaskStateChange"} <= actions
    assert not any(a.endswith("*") for a in actions)
    # The ECS agent's actions on its own compute environment's cluster and container instances (named from the
    # environment's Ref; tests/app/batch/test_batch_ecs_scope.py evaluates them); on * only what has no resource.
    environment = group.logical_id(group.construct.compute_environment)
    for statement in statements:
        acts = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        if any(a.startswith("ecs:") for a in acts):
            if statement["Resource"] == "*":
                # CDK merges statements on *: the ECR token (the image pull) joins these.
                assert set(acts) <= {"ecs:DiscoverPollEndpoint", "ec2:DescribeTags", "ecr:GetAuthorizationToken"}, statement
            else:
                # Batch names the cluster AWSBatch-<environment name>-<uuid>; the Ref is the environment's ARN.
                name = {"Fn::Select": [1, {"Fn::Split": ["/", {"Ref": environment}]}]}
                arn = ["arn:", {"Ref": "AWS::Partition"}, ":ecs:us-east-2:", {"Ref": "AWS::AccountId"}]
                assert statement["Resource"] in (
                    {"Fn::Join": ["", [*arn, ":cluster/AWSBatch-", name, "-*"]]},
                    {"Fn::Join": ["", [*arn, ":container-instance/AWSBatch-", name, "-*/*"]]},
                ), statement
    assert not {"ecs:CreateCluster", "logs:PutLogEvents"} & actions
    (pull,) = [s for s in statements if "ecr:BatchGetImage" in s["Action"]]
    example_repository = {"Fn::Join": ["", [  # the example image's repository
        "arn:", {"Ref": "AWS::Partition"}, ":ecr:us-east-2:", {"Ref": "AWS::AccountId"}, ":repository/",
        {"Fn::Sub": "cdk-hnb659fds-container-assets-${AWS::AccountId}-us-east-2"}]]}
    assert example_repository in pull["Resource"]
    role = group.properties(group.construct.instance_role)
    assert "ManagedPolicyArns" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}}]


def test_job_role_has_no_permissions_and_execution_role_writes_its_logs(every_type):
    group = Group(every_type, "trn1-32xlarge")
    assert group.from_parent(group.container["JobRoleArn"]) == {
        "Fn::GetAtt": [group.logical_id(group.construct.job_role), "Arn"]}
    assert _statements(group, group.construct.job_role) == []
    logs = [s for s in _statements(group, group.construct.execution_role) if "logs:PutLogEvents" in s["Action"]]
    # One execution role for every group and the CPU queue: it writes to their own log groups, named one by one.
    names = [CPU, *every_type.stacks.backends["batch"].groups]
    (statement,) = logs
    assert statement["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"] and statement["Effect"] == "Allow"
    expected = [(each := Group(every_type, name)).to_parent({"Fn::GetAtt": [each.logical_id(each.construct.log_group), "Arn"]})
                for name in names]
    assert sorted(statement["Resource"], key=json.dumps) == sorted(expected, key=json.dumps)


def test_groups_share_the_job_roles_and_each_has_its_own_instance_role(every_type):
    """One execution and one job role for every group; the nodes' instance role and profile are each group's own, in
    its nested stack, so that its ECS agent reaches its own compute environment's cluster only (it was one role and
    profile for every group, on every AWSBatch-* cluster of the account)."""
    template = every_type.template_json("batch")
    groups = list(every_type.stacks.backends["batch"].groups.values())
    assert len(resources(template, "AWS::IAM::Role")) == 2
    assert not resources(template, "AWS::IAM::InstanceProfile")
    for training in groups:
        group = Group(every_type, training.group_name)
        (role,) = resources(group.template, "AWS::IAM::Role")
        (profile,) = resources(group.template, "AWS::IAM::InstanceProfile")
        assert role == group.logical_id(training.instance_role)
        assert group.template["Resources"][profile]["Properties"]["Roles"] == [{"Ref": role}]
        assert group.compute["InstanceRole"] == {"Fn::GetAtt": [profile, "Arn"]}
        for shared in ("execution_role", "job_role"):
            assert getattr(training, shared) is getattr(groups[0], shared)


def _batch_groups(result) -> dict[str, dict[str, str]]:
    """The one JSON output of every group, its tokens as "<token>"."""
    return json.loads(template_text(result.template_json("batch")["Outputs"]["BatchGroups"]["Value"]))


def test_one_output_names_queues_definitions_and_the_submit_command(every_type):
    outputs = every_type.template_json("batch")["Outputs"]
    assert sorted(outputs) == ["BatchCpu", "BatchGroups", "DashboardName", "TrainingImageRepositoryUri"]  # not six per group
    groups = _batch_groups(every_type)
    assert sorted(groups) == sorted(g.name for g in every_type.config.compute_groups)
    values = groups["trn1-32xlarge"]
    assert values["JobQueueName"] == "t-batch-trn1-32xlarge"
    assert values["JobDefinitionName"] == "t-batch-trn1-32xlarge"
    assert values["SubmitJob"] == (
        "aws batch submit-job --region us-east-2 --job-name trn1-32xlarge-training --job-queue t-batch-trn1-32xlarge "
        "--job-definition t-batch-trn1-32xlarge --parameters script=/opt/trainium-cdk/examples/mlp/train.py"
    )
    for name in ("JobQueueArn", "JobDefinitionArn", "LogGroupName"):
        assert values[name] == "<token>"


# -- reservations, capacity blocks, custom settings ------------------------------------------------


def test_no_placement_group_with_a_reservation(reserved):
    group = Group(reserved, "reserved")
    assert "PlacementGroup" not in group.compute
    assert "Placement" not in group.launch_template
    assert group.launch_template["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaaaaaaaaaaaaaaa"}
    }
    assert len(group.launch_template["NetworkInterfaces"]) == 8
    assert group.compute["MaxvCpus"] == MAX_NODES * 128
    nodes = group.job_definition["NodeProperties"]
    assert nodes["NumNodes"] == 4 and nodes["NodeRangeProperties"][0]["TargetNodes"] == "0:"


def test_capacity_block_warns_that_batch_ignores_market_options(reserved):
    group = Group(reserved, "block")
    assert "PlacementGroup" not in group.compute
    messages = [m.entry.data for m in reserved.assembly.get_stack_by_name("t-batch").messages]
    assert any("Capacity Block" in str(m) and "block" in str(m) for m in messages)
    assert not any("ecrImageRequiresPolicy" in str(m) for m in messages)


def test_custom_image_command_retries_timeout_and_retention(reserved):
    group = Group(reserved, "reserved")
    container = group.container
    assert container["Image"] == CUSTOM_IMAGE
    assert container["Command"] == launch_command(CUSTOM_COMMAND)
    assert "Parameters" not in group.job_definition
    assert group.job_definition["RetryStrategy"]["Attempts"] == 3
    assert group.job_definition["Timeout"] == {"AttemptDurationSeconds": 120 * 60}
    assert group.properties(group.construct.compute_environment)["UpdatePolicy"] == {
        "JobExecutionTimeoutMinutes": 120, "TerminateJobsOnUpdate": False}
    assert group.properties(group.construct.log_group)["RetentionInDays"] == 7
    (pull,) = [s for s in _statements(group, group.construct.instance_role) if "ecr:BatchGetImage" in s["Action"]]
    assert {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ecr:us-east-2:123456789012:repository/ml/train"]]} \
        in pull["Resource"]


def test_without_storage_no_mount_and_a_local_compile_cache(reserved):
    group = Group(reserved, "reserved")
    assert "lustre" not in group.setup[1] and not any(k.startswith("LUSTRE_") for k in group.setup[0])
    assert group.container["Volumes"] == [{"Host": {"SourcePath": NODE_METRICS_DIR}, "Name": "node-metrics"}]
    assert group.environment["TRN_CACHE_DIR"] == "/var/tmp/neuron-compile-cache/reserved"
    assert "--parameters" not in _batch_groups(reserved)["reserved"]["SubmitJob"]


# -- quality gates ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["every_type", "reserved"])
def test_cdk_nag_clean(request, fixture):
    assert nag_violations(request.getfixturevalue(fixture)) == []


def test_cfn_lint_zero_errors(reserved):
    """The group of each type is linted in the shared apps (tests/meta/test_quality.py); this app's settings are
    its own (every Batch setting changed, capacity reservation and block, no storage)."""
    for path in reserved.template_paths():
        assert cfn_lint_errors(path, reserved.config.region) == []


# -- units -----------------------------------------------------------------------------------------


def test_ecr_repository_arn():
    assert ecr_repository_arn(versions.neuron_training_image("us-west-2")) == (
        "arn:aws:ecr:us-west-2:763104351884:repository/pytorch-training-neuronx"
    )
    assert ecr_repository_arn(CUSTOM_IMAGE) == "arn:aws:ecr:us-east-2:123456789012:repository/ml/train"
    assert ecr_repository_arn("public.ecr.aws/neuron/pytorch-training-neuronx:latest") is None
    assert ecr_repository_arn("docker.io/library/python:3.12") is None


def test_empty_command_is_rejected():
    with pytest.raises(ConfigError, match="batch.command"):
        compose(cdk.App(), config_with(backends=["batch"], batch={"command": []}))


def _bare(*, every_subnet: bool = False, spec: InstanceSpec | None = None, max_nodes: int = 2, **overrides):
    """A TrainiumBatch in a bare stack, built on call: the checks run before any resource."""
    stack = cdk.Stack(cdk.App(), "Bare")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    props = {
        "group": GroupNodes("train", spec or DEFAULT_CATALOG.get("trn1.32xlarge"), max_nodes=max_nodes),
        "vpc": vpc,
        "subnets": vpc.private_subnets if every_subnet else vpc.private_subnets[:1],
        "security_groups": [ec2.SecurityGroup(stack, "Sg", vpc=vpc)],
        **overrides,
    }
    return lambda: TrainiumBatch(stack, "Batch", **props)


def test_an_efa_group_needs_exactly_one_subnet():
    with pytest.raises(ConfigError, match="exactly one subnet"):
        _bare(every_subnet=True)()


def test_inference_types_are_rejected():
    with pytest.raises(ConfigError, match="training type"):
        _bare(spec=DEFAULT_CATALOG.get("inf2.48xlarge"))()


def test_the_node_counts_are_checked():
    # The props carry the sizes that the compute group carried (and checked) before.
    with pytest.raises(ConfigError, match=r"nodes = 3: between 1 and max_nodes \(2\)"):
        _bare(nodes=3, max_nodes=2)()
    with pytest.raises(ConfigError, match="command"):
        _bare(command=[])()



def _pulled_repositories(training: TrainiumBatch) -> list[Any]:
    """The repositories of the image pull of the instance role and of the execution role, in a bare stack."""
    stack = cdk.Stack.of(training)
    template = Template.from_stack(stack).to_json()
    pulled = []
    for role in (training.instance_role, training.execution_role):
        (pull,) = [s for p in resources(template, "AWS::IAM::Policy").values()
                   if {"Ref": stack.resolve(stack.get_logical_id(role.node.default_child))} in p["Properties"]["Roles"]
                   for s in p["Properties"]["PolicyDocument"]["Statement"] if "ecr:BatchGetImage" in s["Action"]]
        pulled.append(pull["Resource"])
    return pulled


def test_default_image_pull_is_granted_in_an_environment_agnostic_stack():
    example_repository = {"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":ecr:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"}, ":repository/",
        {"Fn::Sub": "cdk-hnb659fds-container-assets-${AWS::AccountId}-${AWS::Region}"}]]}
    assert _pulled_repositories(_bare()()) == [example_repository, example_repository]


def test_a_configured_image_is_pulled_from_its_own_repository():
    image = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04"
    training = _bare(image_uri=image)()
    repository = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ecr:us-west-2:763104351884:repository/pytorch-training-neuronx"]]}
    assert _pulled_repositories(training) == [repository, repository]  # instance and execution roles
    stack = cdk.Stack.of(training)
    assembly = cdk.Stage.of(stack).synth()
    assets = json.loads((Path(assembly.directory) / f"{stack.artifact_id}.assets.json").read_text())
    assert assets["dockerImages"] == {}  # no example image built
    template = Template.from_stack(stack).to_json()
    (definition,) = resources(template, "AWS::Batch::JobDefinition").values()
    assert definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]["Image"] == image
    # The user's script: on FSx with the storage stack, else in the image's working directory.
    assert definition["Properties"]["Parameters"] == {"script": "train.py"}


def test_built_alone_from_props_in_a_bare_stack():
    training = _bare(
        nodes=4, max_nodes=8, log_retention=logs.RetentionDays.ONE_WEEK, job_timeout=cdk.Duration.hours(2)
    )()
    template = Template.from_stack(cdk.Stack.of(training))
    template.has_resource_properties(
        "AWS::Batch::JobDefinition",
        {"Type": "multinode", "NodeProperties": {"NumNodes": 4, "MainNode": 0}, "Timeout": {"AttemptDurationSeconds": 7200}},
    )
    template.has_resource_properties(
        "AWS::Batch::ComputeEnvironment", {"ComputeResources": {"MaxvCpus": 8 * training.spec.vcpus}}
    )
    (launch_template,) = resources(template.to_json(), "AWS::EC2::LaunchTemplate").values()
    assert len(launch_template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]) == 8  # trn1.32xlarge
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 7})


def test_tasks_cannot_reach_the_instance_metadata(every_type, tmp_path):
    """Multi-node tasks are awsvpc: ECS_AWSVPC_BLOCK_IMDS keeps them from the instance role. The node script
    runs here with each group's values, stand-ins for rpm and modprobe (the AMI has the pinned driver and
    EFA is up) and a copy of ecs.config, twice (a reboot runs no user data; a re-run adds nothing)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    driver = versions.XLA_TRACK.driver
    (bindir / "modprobe").write_text("#!/bin/sh\nexit 0\n")
    # The program holds the ECS agent and lets it go at its end (tests/unit/node/test_batch_node.py): never this machine's.
    (bindir / "systemctl").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "shutdown").write_text("#!/bin/sh\nexit 0\n")
    for stand_in in bindir.iterdir():
        stand_in.chmod(0o755)
    for instance_type in SUPPORTED_TRAINING_TYPES:
        values, _ = Group(every_type, _name(instance_type)).setup
        # The AMI has the track's driver, runtime and collectives (the on-node collective's), so nothing installs.
        (bindir / "rpm").write_text(
            "#!/bin/sh\n" + node_files.rpm_stand_in(driver, values["NEURON_RUNTIME"], values["NEURON_COLLECTIVES"])
        )
        (bindir / "rpm").chmod(0o755)
        values = {k: v for k, v in values.items() if k != "EFA_INSTALLER_URL"}  # this machine has no EFA device
        config = tmp_path / "ecs.config"
        config.write_text("ECS_CLUSTER=batch-cluster\n")
        env = {"PATH": f"{bindir}:/usr/bin:/bin", "ECS_CONFIG": str(config)}
        for _ in range(2):
            result = node_files.run(BATCH_NODE_FILES, values, env)
            assert result.returncode == 0, result.stderr
        assert config.read_text() == "ECS_CLUSTER=batch-cluster\nECS_AWSVPC_BLOCK_IMDS=true\n"


def test_the_update_timeout_is_the_job_timeout_up_to_batchs_limit_or_what_the_config_says():
    """Batch lets running jobs go on up to 7200 minutes after an infrastructure update (API reference,
    UpdatePolicy); the construct once capped them at 360, stopping every multi-day job 6 hours into an update."""
    from aws_cdk import Duration

    from trainium_cdk.constructs.batch import infrastructure_update_timeout

    assert infrastructure_update_timeout(Duration.days(7)).to_minutes() == 7200
    assert infrastructure_update_timeout(Duration.hours(2)).to_minutes() == 120
    settings = config_with(batch={"update_timeout_minutes": 2880}).batch
    assert infrastructure_update_timeout(Duration.minutes(settings.job_timeout_minutes),
                                         Duration.minutes(settings.update_timeout_minutes)).to_minutes() == 2880
    with pytest.raises(ConfigError, match="update_timeout.*1 to 7200 minutes"):
        infrastructure_update_timeout(Duration.days(7), Duration.days(6))
