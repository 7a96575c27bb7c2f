"""BatchCpuQueue alone (issue 44 item 8): the recipes' data jobs on a general-purpose node, not a Trainium one. In
a bare stack under cdk-nag, on an importing app's VPC and file system."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Duration
from aws_cdk.assertions import Match, Template

from tests.support import node_files
from tests.support.helpers import config_with
from tests.unit.constructs.test_constructs_alone import synth_alone
from trainium_cdk import BatchCpuQueue
from trainium_cdk.constructs.batch_node import BATCH_AGENT_SCRIPT
from trainium_cdk.errors import ConfigError
from trainium_cdk.runtime.batch_job import definition_container
from trainium_cdk.runtime.lustre_client import SCRIPT as LUSTRE_SCRIPT

IMAGE = "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04"


def _queue(**props: Any) -> tuple[BatchCpuQueue, Template]:
    queue, template = synth_alone(lambda stack, imported: BatchCpuQueue(
        stack, "DataPrep", vpc=imported.vpc, subnets=[imported.subnet], image_uri=IMAGE,
        storage=imported.file_system(stack), name_prefix="ml-batch", **props))
    return queue, Template.from_json(template)


def test_general_purpose_nodes_from_zero_with_an_encrypted_root_volume_and_no_accelerator():
    queue, template = _queue()
    template.has_resource_properties("AWS::Batch::ComputeEnvironment", {"ComputeResources": Match.object_like({
        "InstanceTypes": ["m7i.2xlarge"], "MinvCpus": 0, "MaxvCpus": 4 * 8, "Type": "EC2",
        "Ec2Configuration": [{"ImageType": "ECS_AL2023"}],
    })})
    template.has_resource_properties("AWS::EC2::LaunchTemplate", {"LaunchTemplateData": Match.object_like({
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
        "InstanceInitiatedShutdownBehavior": "terminate",
        "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {"Encrypted": True, "VolumeSize": 100,
                                                                    "VolumeType": "gp3"}}],
    })})
    # Nothing comes in (Lustre's callbacks are the file system's rules, added where the app opens it).
    (group,) = template.find_resources("AWS::EC2::SecurityGroup").values()
    assert "SecurityGroupIngress" not in group["Properties"]
    assert queue.job_queue_name == "ml-batch_cpu" and queue.job_definition_name == "ml-batch_cpu"


def test_one_node_job_with_fsx_and_no_device_whose_container_is_what_trn_submit_overrides():
    """A one-node multi-node parallel job (awsvpc: kept from the instance metadata), /fsx from the host, no Neuron
    or EFA device; its command and empty environment are definition_container's for the CPU queue, the one `trn submit` and
    `trn rehearse` override with the recipe's."""
    _, template = _queue()
    (definition,) = template.find_resources("AWS::Batch::JobDefinition").values()
    properties = definition["Properties"]
    assert properties["Type"] == "multinode" and properties["NodeProperties"]["NumNodes"] == 1
    (node,) = properties["NodeProperties"]["NodeRangeProperties"]
    container = node["Container"]
    config = config_with()
    expected = definition_container(config, config.compute_groups[0], cpu=True)
    assert tuple(container["Command"]) == expected.command and container["Environment"] == [] == list(expected.environment)
    assert container["InstanceType"] == "m7i.2xlarge" and "LinuxParameters" not in container
    assert container["MountPoints"] == [{"ContainerPath": "/fsx", "SourceVolume": "fsx"}]
    assert container["Volumes"] == [{"Host": {"SourcePath": "/fsx"}, "Name": "fsx"}]
    assert {r["Type"]: r["Value"] for r in container["ResourceRequirements"]} == {"VCPU": "8", "MEMORY": str(int(32 * 1024 * 0.9))}
    assert properties["Timeout"] == {"AttemptDurationSeconds": int(Duration.days(1).to_seconds())}


def test_its_nodes_run_the_batch_agent_part_and_the_lustre_client_and_nothing_of_neuron():
    """The node setup it ships: the same ECS-agent part as every Batch node, then the Lustre client; no Neuron
    driver, EFA installer or health check."""
    queue, _ = _queue()
    program = queue.node_setup.setup.program
    assert program == node_files.node.source(BATCH_AGENT_SCRIPT) + node_files.node.source(LUSTRE_SCRIPT)
    assert "aws-neuronx" not in program and "efa_installer" not in program and "health_check" not in program
    values = queue.node_setup.setup.values
    assert values == {"LUSTRE_FAMILY": "amazon-linux", "LUSTRE_MOUNT_POINT": "/fsx",
                      "LUSTRE_SOURCE": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com@tcp:/abcdefgh"}


@pytest.mark.parametrize(("props", "field"), [
    ({"instance_type": "trn2.48xlarge"}, "instance_type"), ({"max_nodes": 0}, "max_nodes")])
def test_bad_props_name_the_field(props, field):
    with pytest.raises(ConfigError) as raised:
        _queue(**props)
    assert str(raised.value).startswith(f"Alone/DataPrep.{field} = ")

