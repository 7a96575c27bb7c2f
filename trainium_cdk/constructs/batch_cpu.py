"""BatchCpuQueue: AWS Batch for the CPU work beside the Trainium groups (a recipe's data preparation), on
general-purpose instances, so that tokenizing a dataset never holds a Trainium node billed for its accelerators.

One managed EC2 compute environment of one general-purpose type (0 vCPUs when idle), its job queue (FIFO, or fair
share with teams, as the groups'), and a one-node multi-node parallel job definition with /fsx: multi-node
parallel for the reason TrainiumBatch's job definitions are (awsvpc tasks, kept from the instance metadata and so
from the instance role). ``trn submit --job <recipe>-data`` sends a recipe's CPU-only job here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jsii
from aws_cdk import Annotations, Duration, RemovalPolicy, Size
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from trainium_cdk.constructs.batch import CONTAINER_MEMORY_FRACTION, grant_ecr_pull
from trainium_cdk.constructs.batch_node import BatchNodeSetup, cpu_node_setup
from trainium_cdk.constructs.batch_queue import DEFAULT_RUNNABLE_TIMEOUT, job_queue
from trainium_cdk.constructs.batch_roles import BatchInstanceRole, BatchRoles
from trainium_cdk.constructs.efa_launch_template import METADATA_HOP_LIMIT, ROOT_DEVICE_NAME
from trainium_cdk.constructs.log_encryption import encrypt_log_groups
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.errors import ConfigError, names_construct_path, one_of
from trainium_cdk.facts import defaults
from trainium_cdk.facts.catalog import GENERAL_PURPOSE_TYPES
from trainium_cdk.facts.defaults.cdk import LOG_RETENTION
from trainium_cdk.facts.names import BATCH_CPU_SUFFIX, SHARED_MOUNT
from trainium_cdk.facts.teams import queue_name
from trainium_cdk.runtime.batch_job import CPU_DEFINITION_COMMAND

DEFAULT_INSTANCE_TYPE = "m7i.2xlarge"
DEFAULT_MAX_NODES = 4
# A data preparation downloads and tokenizes a dataset: a day is long; a stuck one frees its node.
DEFAULT_JOB_TIMEOUT = Duration.days(1)
# The training image it runs is several GB (pulled and unpacked on the root volume).
ROOT_VOLUME_GIB = 100


@jsii.implements(ec2.IConnectable)
class BatchCpuQueue(Construct):
    """AWS Batch for CPU-only jobs: compute environment, job queue, job definition, logs. ``connections`` are its
    nodes' security group (all outbound; open Lustre to it with the file system's ``allow_default_port_from``).

    :param vpc: the training VPC.
    :param subnets: the nodes' subnets (the file system's AZ avoids cross-AZ traffic).
    :param image_uri: the job definition's image (a submit registers a revision with the job's own).
    :param instance_type: a general-purpose type (``GENERAL_PURPOSE_TYPES``). Default: m7i.2xlarge.
    :param max_nodes: the most nodes the compute environment scales to. Default: 4.
    :param storage: the FSx for Lustre file system, mounted at /fsx on the nodes and in the jobs. Default: none.
    :param roles: the execution and job roles (the stack's :class:`BatchRoles`). Default: roles of its own.
    :param name_prefix: the queue and job definition are ``<prefix>_cpu``. Default: generated names.
    :param shares: fair share between teams, as ``TrainiumBatch``'s. Default: none (a FIFO queue).
    :param job_timeout: a job attempt is stopped after this long. Default: one day.
    :param log_retention: retention of the job log group. Default: one month.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        image_uri: str,
        instance_type: str = DEFAULT_INSTANCE_TYPE,
        max_nodes: int = DEFAULT_MAX_NODES,
        storage: LustreMount | None = None,
        roles: BatchRoles | None = None,
        name_prefix: str | None = None,
        shares: Mapping[str, int] | None = None,
        job_timeout: Duration = DEFAULT_JOB_TIMEOUT,
        log_retention: logs.RetentionDays = LOG_RETENTION,
    ) -> None:
        super().__init__(scope, construct_id)
        if instance_type not in GENERAL_PURPOSE_TYPES:
            raise ConfigError("instance_type", instance_type, one_of(GENERAL_PURPOSE_TYPES))
        if max_nodes < 1:
            raise ConfigError("max_nodes", max_nodes, "at least 1")
        if not subnets:
            raise ConfigError("subnets", 0, "at least one subnet")
        self.instance_type, self.image = instance_type, image_uri
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=True,
            description="Batch CPU queue nodes: image pulls, AWS APIs, dataset downloads; nothing comes in",
        )
        self._connections = ec2.Connections(security_groups=[self.security_group])
        self.node_setup = BatchNodeSetup(self, "NodeSetup", setup=cpu_node_setup(storage))
        self.roles = roles or BatchRoles(self, "Roles", description="the CPU queue")
        self.node_role = BatchInstanceRole(self, "InstanceRole", description="the CPU queue")
        self.instance_role: iam.Role = self.node_role.role  # the stack grants it (and the execution role) its pulls
        self.node_setup.grant_read(self.node_role.role)
        self.compute_environment = self._compute_environment(vpc, subnets, max_nodes, job_timeout)
        name = f"{name_prefix}{BATCH_CPU_SUFFIX}" if name_prefix else None
        queue = queue_name(name, fair_share=bool(shares))
        self.job_queue = job_queue(self, name=queue, compute_environment=self.compute_environment, shares=shares,
                                   runnable_timeout=DEFAULT_RUNNABLE_TIMEOUT)
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY)
        encrypt_log_groups(self)
        container = self._container(storage)
        for role in (self.instance_role, self.roles.execution_role):  # the ECS agent pulls with either
            grant_ecr_pull(role, self.image)
        Annotations.of(container).acknowledge_warning(
            "@aws-cdk/aws-ecs:ecrImageRequiresPolicy",
            "The instance and execution roles are granted pulls from the image's repository.",
        )
        self.job_definition = batch.MultiNodeJobDefinition(
            self, "JobDefinition", job_definition_name=name, main_node=0,
            containers=[batch.MultiNodeContainer(container=container, start_node=0, end_node=0)],
            instance_type=ec2.InstanceType(instance_type), timeout=job_timeout, retry_attempts=1, propagate_tags=True,
        )
        # The L2 name of a job definition is its ARN (with the revision): keep the plain names.
        self.job_queue_name = queue or self.job_queue.job_queue_name
        self.job_definition_name = name or self.job_definition.job_definition_arn

    @property
    def connections(self) -> ec2.Connections:
        return self._connections

    def _compute_environment(
        self, vpc: ec2.IVpc, subnets: Sequence[ec2.ISubnet], max_nodes: int, job_timeout: Duration,
    ) -> batch.ManagedEc2EcsComputeEnvironment:
        # IMDSv2 with one hop, an encrypted gp3 root volume for the image; a host whose setup failed shuts down
        # (batch_agent.sh), which this makes a termination so that Batch launches another.
        launch_template = ec2.LaunchTemplate(
            self, "LaunchTemplate", require_imdsv2=True, http_put_response_hop_limit=METADATA_HOP_LIMIT,
            user_data=ec2.UserData.custom(self.node_setup.user_data),
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
            block_devices=[ec2.BlockDevice(device_name=ROOT_DEVICE_NAME, volume=ec2.BlockDeviceVolume.ebs(
                ROOT_VOLUME_GIB, volume_type=ec2.EbsDeviceVolumeType.GP3, encrypted=True))],
        )
        vcpus, _ = GENERAL_PURPOSE_TYPES[self.instance_type]
        environment = batch.ManagedEc2EcsComputeEnvironment(
            self, "ComputeEnvironment", vpc=vpc, vpc_subnets=ec2.SubnetSelection(subnets=list(subnets)),
            instance_types=[ec2.InstanceType(self.instance_type)], use_optimal_instance_classes=False,
            minv_cpus=0, maxv_cpus=max_nodes * vcpus, launch_template=launch_template,
            instance_role=self.node_role.role, security_groups=[self.security_group],
            images=[batch.EcsMachineImage(image_type=batch.EcsMachineImageType.ECS_AL2023)],
            allocation_strategy=batch.AllocationStrategy.BEST_FIT_PROGRESSIVE, spot=False,
            terminate_on_update=False, update_timeout=job_timeout,
        )
        cfn_environment = environment.node.default_child
        assert isinstance(cfn_environment, batch.CfnComputeEnvironment)
        self.ecs_agent_policy = self.node_role.scope_to(cfn_environment)
        # The L2 leaves the version out ($Default); pin it so a template change updates the nodes.
        cfn_environment.add_property_override(
            "ComputeResources.LaunchTemplate.Version", launch_template.latest_version_number)
        return environment

    def _container(self, storage: LustreMount | None) -> batch.EcsEc2ContainerDefinition:
        vcpus, memory_gib = GENERAL_PURPOSE_TYPES[self.instance_type]
        volumes = ([batch.EcsVolume.host(name="fsx", host_path=SHARED_MOUNT, container_path=SHARED_MOUNT)]
                   if storage is not None else [])
        return batch.EcsEc2ContainerDefinition(
            self, "Container", image=ecs.ContainerImage.from_registry(self.image), cpu=vcpus,
            memory=Size.mebibytes(int(memory_gib * 1024 * CONTAINER_MEMORY_FRACTION)),
            # The job's command and environment come with each submit (`trn submit`): nothing runs by default.
            command=list(CPU_DEFINITION_COMMAND), job_role=self.roles.job_role, execution_role=self.roles.execution_role,
            ulimits=[batch.Ulimit(name=batch.UlimitName.NOFILE, soft_limit=defaults.OPEN_FILES,
                                  hard_limit=defaults.OPEN_FILES)],
            privileged=False, volumes=volumes,
            logging=ecs.LogDriver.aws_logs(stream_prefix="cpu", log_group=self.log_group),
        )

