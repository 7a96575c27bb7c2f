"""TrainiumBatch: AWS Batch for one compute group, multi-node parallel jobs over every EFA interface.

Per compute group: a managed EC2 compute environment (the group's instance type, its one compute
subnet, the cluster placement group, the shared ``EfaLaunchTemplate`` with the ECS-optimized AL2023
Neuron AMI), a job queue, and a job definition that runs torchrun on every NeuronCore of every node.
Every group gets a multi-node parallel job definition; a type without EFA (trn1.2xlarge) cannot train
across nodes, so its jobs are one-node multi-node parallel jobs (why: the job definition's comment).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import jsii
from aws_cdk import Annotations, Duration, RemovalPolicy, Size, Stack, Token
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from trainium_cdk.constructs.batch_grants import BatchGrants
from trainium_cdk.constructs.batch_node import BatchNodeSetup, node_setup
from trainium_cdk.constructs.batch_queue import DEFAULT_RUNNABLE_TIMEOUT, job_queue
from trainium_cdk.constructs.batch_roles import BatchInstanceRole, BatchRoles
from trainium_cdk.constructs.efa_launch_template import EfaLaunchTemplate
from trainium_cdk.constructs.log_encryption import encrypt_log_groups
from trainium_cdk.constructs.storage import LustreMount
from trainium_cdk.errors import ConfigError, names_construct_path
from trainium_cdk.facts import defaults
from trainium_cdk.facts.capacity import GroupNodes
from trainium_cdk.facts.catalog import BATCH_MAX_ATTEMPTS, BATCH_MAX_UPDATE_TIMEOUT_MINUTES, InstanceSpec, check_ami_id
from trainium_cdk.facts.defaults.cdk import LOG_RETENTION
from trainium_cdk.facts.names import BASE_TAG_BUILD_ARG, NODE_METRICS_DIR, SHARED_MOUNT
from trainium_cdk.facts.teams import queue_name
from trainium_cdk.facts.versions import XLA_TRACK, NeuronTrack
from trainium_cdk.runtime.batch_job import ALL_NODES, SCRIPT_PARAMETER, default_script
from trainium_cdk.runtime.jobs import check_precompile_steps
from trainium_cdk.runtime.launcher import PEER_LOST_EXIT_CODE, launch_command
from trainium_cdk.runtime.training_env import cache_dir, job_environment

# The ECS agent registers less memory than the instance has (kernel, agent): a job asking for all of
# it would never be placed. Docker's 64 MiB /dev/shm is too small for data loader workers.
CONTAINER_MEMORY_FRACTION = 0.9
SHARED_MEMORY_FRACTION = 0.25
# The MLP example's build context (the EKS stack builds the same image); its script's path in the image,
# the job definition's script parameter and its defaults are batch_job's (what `trn` submits and rehearses).
EXAMPLE_DIR = Path(__file__).resolve().parent.parent / "examples" / "mlp"
DEFAULT_NODES = 2
# Pre-training runs for days: an attempt stops after a week unless the config says otherwise (a host failure
# retries before that, and resumes from the newest checkpoint).
DEFAULT_JOB_TIMEOUT = Duration.days(7)
# How long running jobs may go on after an infrastructure update (catalog.py). Longer delays replacing the hosts
# with patched ones (the API reference's security note); a job that needs longer is stopped then, its host
# replaced, and retried from its checkpoint (Batch documents no status reason for it: a terminated host reads
# "Host EC2 (instance ...) terminated.", which the retry strategy's "Host EC2*" matches).
MAX_UPDATE_TIMEOUT_MINUTES = BATCH_MAX_UPDATE_TIMEOUT_MINUTES
DEFAULT_RETRY_ATTEMPTS = defaults.BATCH_RETRY_ATTEMPTS
DEFAULT_LOG_RETENTION = LOG_RETENTION
# Job logs are not the training record (checkpoints and metrics live on FSx or S3): they go with the stack.
DEFAULT_LOG_REMOVAL_POLICY = RemovalPolicy.DESTROY
# AWS Batch limits.
MAX_SECURITY_GROUPS = 5
RETRY_ATTEMPTS_RANGE = (1, BATCH_MAX_ATTEMPTS)
# Retry what the host or the platform broke, never what the job did (AWS Batch "Automated job retries":
# evaluateOnExit, first match wins, at most 5 conditions, a pattern may end in * only). The main node's host
# dying ends the job with a status reason "Host EC2 (instance i-...) terminated."; a child's host dying
# makes the launcher on the main node exit PEER_LOST_EXIT_CODE (launcher.py); the ECS agent's own failures
# are the Cannot...ContainerError reasons. A retry keeps the job id, so the job resumes from
# /fsx/checkpoints/<job id>. Any other exit (the training program's own error) is not retried.
HOST_FAILURE_STATUS_REASONS = ("Host EC2*",)
HOST_FAILURE_REASONS = ("Cannot*",)
HOST_FAILURE_EXIT_CODES = (str(PEER_LOST_EXIT_CODE),)

ECR_PULL_ACTIONS = ("ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage")
_ECR_IMAGE = re.compile(
    r"^(?P<account>[0-9]{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/(?P<repo>[^:@]+)"
)


@jsii.implements(ec2.IConnectable)
class TrainiumBatch(Construct, BatchGrants):
    """AWS Batch for one compute group: compute environment, job queue, job definition, logs; its roles
    its own or, given ``roles``, those every group of the stack shares. ``grant_submit_job`` and
    ``grant_job_control`` (:class:`~trainium_cdk.constructs.batch_grants.BatchGrants`) give a principal its jobs.
    ``connections`` (``ec2.IConnectable``) are its nodes' ``security_groups``: ``allow_to(queue, port)`` opens them.

    :param group: the compute group's nodes: its short name (in the queue and job definition names, the role
        descriptions, the log stream prefix and the compile cache directory), its instance type (a training
        type), the most nodes the compute environment scales to, each node's root volume and how the nodes are
        bought (AWS Batch cannot use a Capacity Block: a warning says so).
    :param vpc: the training VPC.
    :param subnets: the group's compute subnets: exactly one for an EFA type (EFA needs one subnet).
    :param security_groups: groups of every node interface (the EFA group); 1 to 5.
    :param placement_group: the group's cluster placement group. Default: none (with a reservation).
    :param nodes: nodes a job runs on (the multi-node job definition's default count). Default: 2.
    :param image_uri: the training image. Default: the MLP example image, built at deploy time from
        ``trainium_cdk/examples/mlp`` on the track's Neuron PyTorch training container (a Docker image asset).
    :param command: the training script and its arguments, which every node runs under torchrun.
        Default: the job definition's ``script`` parameter (the example's script in the example image,
        else ``/fsx/code/train.py``).
    :param job_timeout: a job attempt is stopped after this long. Default: 7 days.
    :param runnable_timeout: a job that waits this long in RUNNABLE because its instances cannot be had (no
        capacity, a group or an instance type that cannot hold it) is cancelled, with that reason, so that the jobs
        behind it in the queue can start; None: it waits. 10 minutes to 1 day. Default: 4 hours, and None with a
        capacity block (jobs queued before the block opens wait for it).
    :param update_timeout: how long running jobs go on after an infrastructure update before they are stopped (and
        retried), 1 minute to 5 days (Batch's limit). Default: the job timeout, at most 5 days.
    :param retry_attempts: attempts of a job, 1 to 10. Default: 2.
    :param log_retention: retention of the job log group. Default: one month.
    :param log_removal_policy: what deleting the stack does to the job log group. Default: destroy.
    :param track: the Neuron track (versions.py): the default image, the node AMI and the driver
        version. Default: the XLA track.
    :param precompile_steps: the steps of precompile's graph extraction (``TRN_PRECOMPILE_STEPS`` in the job's
        environment; a job submitted with ``TRN_PRECOMPILE=1`` precompiles first). Default: 10.
    :param ami_id: the nodes' AMI (an ECS-optimized AMI with the Neuron driver, such as one you built).
        Default: the track's ECS-optimized AL2023 Neuron AMI, through AWS's public per-AMI-name parameter.
    :param storage: the FSx for Lustre file system, mounted at /fsx on the nodes and in the jobs.
        Default: none (the Neuron compile cache then stays in each container).
    :param name_prefix: prefix of the job queue and job definition names. Default: generated names.
    :param metrics_deployment: publish every node's neuron-monitor metrics to CloudWatch (namespace
        ``neuron_metrics.NAMESPACE``) with this value of the ``Deployment`` dimension. Default: none
        (no metrics).
    :param prometheus_remote_write: the ARN of an Amazon Managed Service for Prometheus workspace the nodes'
        Prometheus-format exporters and agent write to (``aps:RemoteWrite`` on it alone). Default: none.
    :param roles: the execution and job roles, shared with other groups (the stack's :class:`BatchRoles`); this
        group grants them its image pulls and log writes. Default: roles of its own. The nodes' instance role
        and profile are always the group's own (:class:`BatchInstanceRole`): its ECS agent reaches this
        compute environment's ECS cluster only.
    :param shares: fair-share scheduling between teams: each share identifier (letters, digits, '_') with its share,
        more getting more (``{"research": 3, "eval": 1}``: research three nodes for one while both wait); jobs then
        name their share identifier. A fair-share queue is a new queue (``FairShareJobQueue``, its name with
        ``-teams``): Batch gives a queue its policy when it creates it. Default: none (a FIFO queue).
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        group: GroupNodes,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        placement_group: ec2.IPlacementGroup | None = None,
        nodes: int = DEFAULT_NODES,
        image_uri: str | None = None,
        command: Sequence[str] | None = None,
        job_timeout: Duration = DEFAULT_JOB_TIMEOUT,
        update_timeout: Duration | None = None,
        runnable_timeout: Duration | None = DEFAULT_RUNNABLE_TIMEOUT,
        retry_attempts: int = DEFAULT_RETRY_ATTEMPTS,
        log_retention: logs.RetentionDays = DEFAULT_LOG_RETENTION,
        log_removal_policy: RemovalPolicy = DEFAULT_LOG_REMOVAL_POLICY,
        track: NeuronTrack = XLA_TRACK,
        precompile_steps: int = defaults.PRECOMPILE_STEPS,
        storage: LustreMount | None = None,
        name_prefix: str | None = None,
        metrics_deployment: str | None = None,
        prometheus_remote_write: str | None = None,
        ami_id: str | None = None,
        roles: BatchRoles | None = None,
        shares: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        group_name, spec, maximum = group.group_name, group.spec, group.max_nodes
        _check(
            spec=spec, subnets=subnets, security_groups=security_groups, nodes=nodes, maximum=maximum,
            command=command, retry_attempts=retry_attempts,
        )
        if ami_id is not None:
            check_ami_id(ami_id)
        self.track = track
        self.precompile_steps = check_precompile_steps("precompile_steps", precompile_steps)
        self.group_name, self.spec, self.nodes, self.max_nodes = group_name, spec, nodes, maximum
        self.multi_node = spec.has_efa
        self._connections = ec2.Connections(security_groups=list(security_groups))
        self.image = self._image(image_uri, track)
        self.cache_dir = cache_dir(group_name, shared=storage is not None)
        self._shared_storage = storage is not None
        if group.capacity.is_capacity_block:
            Annotations.of(self).add_warning_v2(
                "trainium-cdk:batch-capacity-block",
                f"compute group {group_name}: AWS Batch ignores the launch template's instance market options, "
                "which a Capacity Block needs; use the EKS backend for capacity blocks.",
            )
        self._node_setup(group, security_groups, placement_group, storage, ami_id, metrics_deployment,
                         prometheus_remote_write)
        self._roles(roles, metrics=metrics_deployment is not None)
        self.compute_environment = self._compute_environment(
            vpc, subnets, security_groups, placement_group, infrastructure_update_timeout(job_timeout, update_timeout))

        name = f"{name_prefix}-{group_name}" if name_prefix else None
        self.shares = dict(shares or {})  # share identifier -> share; none: a FIFO queue
        queue = queue_name(name, fair_share=bool(shares))
        self.job_queue = job_queue(self, name=queue, compute_environment=self.compute_environment, shares=shares,
                                   runnable_timeout=None if group.capacity.is_capacity_block else runnable_timeout)
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention, removal_policy=log_removal_policy)
        encrypt_log_groups(self)
        self.container = self._container(command, storage)
        Annotations.of(self.container).acknowledge_warning(
            "@aws-cdk/aws-ecs:ecrImageRequiresPolicy",
            "The instance and execution roles are granted pulls from the training image's repository.",
        )
        self.job_definition = self._job_definition(name, command, storage, retry_attempts, job_timeout)
        # The L2 name of a job definition is its ARN (with the revision): keep the plain names.
        self.job_queue_name = queue or self.job_queue.job_queue_name
        self.job_definition_name = name or self.job_definition.job_definition_arn

    @property
    def connections(self) -> ec2.Connections:
        """Its nodes' security groups (every node interface carries them), as aws-cdk-lib's IConnectable."""
        return self._connections

    @property
    def environment(self) -> dict[str, str]:
        """The job's environment: every backend's (training_env.job_environment), on all NeuronCores."""
        return job_environment(
            self.spec, processes=self.spec.neuron_cores, cache_dir=self.cache_dir, multi_node=self.multi_node,
            container=True, shared_storage=self._shared_storage, track=self.track,
            precompile_steps=self.precompile_steps, node_metrics=True,
        )

    def _image(self, image_uri: str | None, track: NeuronTrack) -> str:
        """The configured image; without one, the MLP example's, built from its folder: nothing to copy to /fsx
        before the first job (a bare Neuron container would need the script put on the file system first)."""
        self.example_image: ecr_assets.DockerImageAsset | None = None
        if image_uri is not None:
            return image_uri
        self.example_image = ecr_assets.DockerImageAsset(
            self,
            "ExampleImage",
            directory=str(EXAMPLE_DIR),
            platform=ecr_assets.Platform.LINUX_AMD64,
            build_args={BASE_TAG_BUILD_ARG: track.training_image_tag},
        )
        return self.example_image.image_uri

    def _node_setup(
        self,
        group: GroupNodes,
        security_groups: Sequence[ec2.ISecurityGroup],
        placement_group: ec2.IPlacementGroup | None,
        storage: LustreMount | None,
        ami_id: str | None,
        metrics_deployment: str | None,
        prometheus_remote_write: str | None,
    ) -> None:
        """What a node runs at boot (``node_setup``) and the launch template that carries it."""
        track, spec = self.track, group.spec
        # AWS publishes the parameter in every region: the template reads it at deploy, synth stays offline.
        self.image_parameter = None if ami_id is not None else track.ecs_neuron_ami_parameter
        image_id = ami_id or ec2.MachineImage.from_ssm_parameter(track.ecs_neuron_ami_parameter).get_image(self).image_id
        self.node_setup = BatchNodeSetup(self, "NodeSetup", setup=node_setup(
            spec, storage, driver=track.driver, runtime=track.runtime, collectives=track.collectives,
            metrics_deployment=metrics_deployment,
            prometheus_remote_write=prometheus_remote_write))
        self.launch_template = EfaLaunchTemplate(
            self, "LaunchTemplate", spec=spec, security_groups=security_groups, placement_group=placement_group,
            root_volume_gib=group.root_volume_gib, capacity=group.capacity, image_id=image_id,
            user_data=self.node_setup.user_data,
        )
        # A host whose setup failed shuts down (node/batch_bootstrap.sh): terminated, not stopped, so that Batch
        # replaces it (AWS Batch takes the launch template's other settings; its user guide lists what it ignores).
        self.launch_template.resource.add_property_override(
            "LaunchTemplateData.InstanceInitiatedShutdownBehavior", "terminate")
        self.metrics_deployment = metrics_deployment

    def _roles(self, roles: BatchRoles | None, *, metrics: bool) -> None:
        description = f"compute group {self.group_name}"
        self.roles = roles or BatchRoles(self, "Roles", description=description)
        self.node_role = BatchInstanceRole(self, "InstanceRole", description=description, metrics=metrics)
        self.instance_role = self.node_role.role
        self.job_role = self.roles.job_role
        self.execution_role = self.roles.execution_role
        # Depending on its configuration the ECS agent pulls with the execution or the instance role: both may.
        self._grant_pull(self.instance_role)
        self._grant_pull(self.execution_role)
        self.node_setup.grant_read(self.instance_role)

    def _compute_environment(
        self,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        placement_group: ec2.IPlacementGroup | None,
        update_timeout: Duration,
    ) -> batch.ManagedEc2EcsComputeEnvironment:
        spec = self.spec
        environment = batch.ManagedEc2EcsComputeEnvironment(
            self,
            "ComputeEnvironment",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=list(subnets)),
            instance_types=[ec2.InstanceType(spec.name)],
            use_optimal_instance_classes=False,
            minv_cpus=0,
            maxv_cpus=self.max_nodes * spec.vcpus,
            placement_group=placement_group,
            launch_template=ec2.LaunchTemplate.from_launch_template_attributes(
                self, "LaunchTemplateRef", launch_template_id=self.launch_template.launch_template_id,
                version_number=self.launch_template.latest_version),
            instance_role=self.instance_role,
            security_groups=list(security_groups),
            images=[batch.EcsMachineImage(image_type=batch.EcsMachineImageType.ECS_AL2023)],
            allocation_strategy=batch.AllocationStrategy.BEST_FIT_PROGRESSIVE,
            spot=False,
            # An infrastructure update (a new launch template version: a Neuron pin, the AMI, the user data)
            # lets running jobs run as long as Batch allows, never kills them at once (default: 30 minutes).
            terminate_on_update=False,
            update_timeout=update_timeout,
        )
        cfn_ce = environment.node.default_child
        assert isinstance(cfn_ce, batch.CfnComputeEnvironment)
        # The group's ECS agent on this environment's cluster only (the L2 makes the role's instance profile).
        self.ecs_agent_policy = self.node_role.scope_to(cfn_ce)
        if spec.has_efa:
            # EC2 rejects instance-level security groups next to the template's network interfaces.
            cfn_ce.add_property_deletion_override("ComputeResources.SecurityGroupIds")
        # The L2 leaves the version out ($Default); pin it so a template change updates the nodes.
        cfn_ce.add_property_override("ComputeResources.LaunchTemplate.Version", self.launch_template.latest_version)
        return environment

    def _job_definition(
        self, name: str | None, command: Sequence[str] | None, storage: LustreMount | None, retry_attempts: int,
        job_timeout: Duration,
    ) -> batch.MultiNodeJobDefinition:
        script = default_script(example_image=self.example_image is not None, shared_storage=storage is not None)
        parameters = None if command else {SCRIPT_PARAMETER: script}
        # Multi-node parallel even for one node (a type without EFA): Batch runs those in awsvpc mode (AWS Batch
        # user guide, "Compute environment considerations for MNP"), where the node setup's ECS_AWSVPC_BLOCK_IMDS
        # keeps the job from the instance metadata and so from the instance role. A container job runs in the
        # host's network, where neither that setting nor the hop limit of 1 applies, and an iptables block of
        # 169.254.169.254 cannot tell the job from the ECS agent, which shares that network and needs the role
        # (ECS developer guide, "Amazon ECS task IAM role": blocks for awsvpc and bridge tasks only).
        definition = batch.MultiNodeJobDefinition(
            self,
            "JobDefinition",
            job_definition_name=name,
            containers=[batch.MultiNodeContainer(container=self.container, start_node=0, end_node=self.nodes - 1)],
            main_node=0,
            instance_type=ec2.InstanceType(self.spec.name),
            parameters=parameters,
            retry_attempts=retry_attempts,
            retry_strategies=retry_strategies(),
            timeout=job_timeout,
            propagate_tags=True,
        )
        # The L2 closes the node range at the default count ("0:1"); an open range ("0:") lets a
        # submit-time numNodes override reach every node (escape hatch: the L2 has no open range).
        cfn_definition = definition.node.default_child
        assert isinstance(cfn_definition, batch.CfnJobDefinition)
        cfn_definition.add_property_override("NodeProperties.NodeRangeProperties.0.TargetNodes", ALL_NODES)
        return definition

    def _grant_pull(self, role: iam.Role) -> None:
        """Pull the training image: the example image's asset repository, or the one ECR repository of the
        configured image (nothing for another registry)."""
        if self.example_image is not None:
            self.example_image.repository.grant_pull(role)
        else:
            grant_ecr_pull(role, self.image)

    def _container(
        self, command: Sequence[str] | None, storage: LustreMount | None
    ) -> batch.EcsEc2ContainerDefinition:
        spec = self.spec
        memory_mib = int(spec.memory_gib * 1024 * CONTAINER_MEMORY_FRACTION)
        linux = batch.LinuxParameters(
            self, "LinuxParameters", shared_memory_size=Size.mebibytes(int(memory_mib * SHARED_MEMORY_FRACTION))
        )
        # No permissions: the container gets read, write and mknod, as in the Batch EFA tutorial. CDK
        # writes them in lower case, which the Batch API (READ | WRITE | MKNOD) does not accept.
        linux.add_devices(
            *[
                batch.Device(host_path=path, container_path=path)
                for path in (*spec.neuron_device_paths, *(spec.efa_device_paths if self.multi_node else ()))
            ]
        )
        volumes = (
            [batch.EcsVolume.host(name="fsx", host_path=SHARED_MOUNT, container_path=SHARED_MOUNT)]
            if storage is not None
            else []
        )
        # The host's metrics folder, which its Prometheus collector reads: the launcher writes the job's
        # compile-cache counters there (TRN_METRICS_DIR, training_env.job_environment).
        volumes.append(
            batch.EcsVolume.host(name="node-metrics", host_path=NODE_METRICS_DIR, container_path=NODE_METRICS_DIR)
        )
        return batch.EcsEc2ContainerDefinition(
            self,
            "Container",
            image=(
                ecs.ContainerImage.from_docker_image_asset(self.example_image)
                if self.example_image is not None
                else ecs.ContainerImage.from_registry(self.image)
            ),
            cpu=spec.vcpus,
            memory=Size.mebibytes(memory_mib),
            # The launcher reads the node index, count and main node's address that Batch sets on each node.
            command=launch_command(command or [f"Ref::{SCRIPT_PARAMETER}"]),
            environment=self.environment,
            job_role=self.job_role,
            execution_role=self.execution_role,
            linux_parameters=linux,
            # EFA registers memory with the device: the container may lock as much as it needs. Open files:
            # Neuron's 65535 (defaults.OPEN_FILES) as soft and hard limit, not the Docker daemon's default; the
            # launcher raises the soft limit to it on every backend.
            ulimits=[
                batch.Ulimit(name=batch.UlimitName.MEMLOCK, soft_limit=-1, hard_limit=-1),
                batch.Ulimit(name=batch.UlimitName.NOFILE, soft_limit=defaults.OPEN_FILES, hard_limit=defaults.OPEN_FILES),
            ],
            privileged=False,
            logging=ecs.LogDriver.aws_logs(stream_prefix=self.group_name, log_group=self.log_group),
            volumes=volumes,
        )


def infrastructure_update_timeout(job_timeout: Duration, update_timeout: Duration | None = None) -> Duration:
    """What running jobs keep after an infrastructure update: ``update_timeout``, else the job's own timeout, at
    most what Batch allows."""
    if update_timeout is None:
        return Duration.minutes(min(job_timeout.to_minutes(), MAX_UPDATE_TIMEOUT_MINUTES))
    minutes = update_timeout.to_minutes()
    if not 1 <= minutes <= MAX_UPDATE_TIMEOUT_MINUTES:
        raise ConfigError("update_timeout", f"{minutes} minutes", f"1 to {MAX_UPDATE_TIMEOUT_MINUTES} minutes "
                          "(AWS Batch UpdatePolicy jobExecutionTimeoutMinutes)")
    return update_timeout


def retry_strategies() -> list[batch.RetryStrategy]:
    """Retry on host and platform failures; exit on everything else (the user's error)."""
    retry = [batch.Reason.custom(on_status_reason=r) for r in HOST_FAILURE_STATUS_REASONS]
    retry += [batch.Reason.custom(on_reason=r) for r in HOST_FAILURE_REASONS]
    retry += [batch.Reason.custom(on_exit_code=c) for c in HOST_FAILURE_EXIT_CODES]
    return [
        *(batch.RetryStrategy.of(batch.Action.RETRY, reason) for reason in retry),
        batch.RetryStrategy.of(batch.Action.EXIT, batch.Reason.custom(on_reason="*")),
    ]


def grant_ecr_pull(role: iam.IRole, image: str) -> None:
    """Let ``role`` pull ``image`` from its one ECR repository (nothing for another registry)."""
    repository = ecr_repository_arn(image, partition=Stack.of(role).partition)
    if repository is not None:
        role.add_to_principal_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
        role.add_to_principal_policy(iam.PolicyStatement(actions=list(ECR_PULL_ACTIONS), resources=[repository]))


def ecr_repository_arn(image: str, *, partition: str = "aws") -> str | None:
    """The ECR repository ARN of an image URI, or None for another registry (nothing to grant)."""
    if Token.is_unresolved(image):
        return None
    match = _ECR_IMAGE.match(image)
    if match is None:
        return None
    return f"arn:{partition}:ecr:{match['region']}:{match['account']}:repository/{match['repo']}"


def _check(
    *,
    spec: InstanceSpec,
    subnets: Sequence[ec2.ISubnet],
    security_groups: Sequence[ec2.ISecurityGroup],
    nodes: int,
    maximum: int,
    command: Sequence[str] | None,
    retry_attempts: int,
) -> None:
    if not spec.for_training:
        raise ConfigError("spec", spec.name, "a training type (Trainium), not an inference type")
    if spec.has_efa and len(subnets) != 1:
        raise ConfigError(
            "subnets", len(subnets), f"exactly one subnet: {spec.name} uses EFA, which needs every node in one subnet"
        )
    if not subnets:
        raise ConfigError("subnets", 0, "at least one subnet")
    if not 1 <= len(security_groups) <= MAX_SECURITY_GROUPS:
        raise ConfigError(
            "security_groups", len(security_groups), f"between 1 and {MAX_SECURITY_GROUPS} (AWS Batch limit)"
        )
    if maximum < 1:
        raise ConfigError("max_nodes", maximum, "at least 1")
    if not 1 <= nodes <= maximum:
        raise ConfigError("nodes", nodes, f"between 1 and max_nodes ({maximum})")
    low, high = RETRY_ATTEMPTS_RANGE
    if not low <= retry_attempts <= high:
        raise ConfigError("retry_attempts", retry_attempts, f"between {low} and {high} (AWS Batch limit)")
    if command is not None and not command:
        raise ConfigError("command", [], "the training script and its arguments, or leave it out")
