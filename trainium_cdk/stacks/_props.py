"""Adapters: the config mapped to each construct's props. Constructs never read the config themselves."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_logs as logs

from trainium_cdk.catalog import LOG_RETENTION_DAYS
from trainium_cdk.config import ComputeGroup, Config
from trainium_cdk.constructs.eks_workloads import BERT_EXAMPLE_DIR, TrainingWorkloadsOptions
from trainium_cdk.constructs.network import ComputePlacement
from trainium_cdk.constructs.storage import DataRepositoryProps
from trainium_cdk.examples import offers_bert_example
from trainium_cdk.workloads import workload_charts

REMOVAL_POLICIES = {"retain": RemovalPolicy.RETAIN, "destroy": RemovalPolicy.DESTROY}


def retention(days: int) -> logs.RetentionDays:
    """A retention in days (validated by the config) as the CDK enum."""
    return logs.RetentionDays[LOG_RETENTION_DAYS[days]]


def network_props(config: Config) -> dict[str, Any]:
    network = config.network
    return dict(
        az_ids=config.vpc_az_ids,
        compute_groups=[
            ComputePlacement(
                name=group.name,
                az_ids=tuple(group.az_ids),
                placement_group=group.placement_group,
                existing_placement_group=group.capacity.placement_group,
            )
            for group in config.compute_groups
        ],
        cidr=network.cidr,
        public_subnet_mask=network.public_subnet_mask,
        private_subnet_mask=network.private_subnet_mask,
        nat_gateways=1 if network.nat_gateways == "one" else len(config.vpc_az_ids),
        interface_endpoints=network.interface_endpoints,
        flow_log_retention=retention(network.flow_log_retention_days),
    )


def storage_props(config: Config) -> dict[str, Any]:
    storage = config.storage
    repo = storage.data_repository
    return dict(
        capacity_gib=storage.capacity_gib,
        deployment_type=fsx.LustreDeploymentType[storage.deployment_type],
        throughput_mb_per_tib=storage.throughput_mb_per_tib,
        compression=fsx.LustreDataCompressionType[storage.compression],
        file_system_type_version=fsx.FileSystemTypeVersion["V_" + storage.lustre_version.replace(".", "_")],
        removal_policy=REMOVAL_POLICIES[storage.removal_policy],
        backup_retention_days=storage.backup_retention_days,
        data_repository=(
            DataRepositoryProps(
                bucket_name=repo.bucket_name,
                s3_prefix=repo.s3_prefix,
                file_system_path=repo.file_system_path,
                auto_import=repo.auto_import,
                auto_export=repo.auto_export,
            )
            if repo is not None
            else None
        ),
    )


def cluster_props(config: Config) -> dict[str, Any]:
    eks = config.eks
    return dict(
        cluster_name=config.stack_name("eks"),
        public_access_cidrs=eks.public_access_cidrs if eks.endpoint_access == "public-and-private" else (),
        admin_role_arns=eks.admin_role_arns,
        system_instance_type=ec2.InstanceType(eks.system_instance_type),
        system_nodes=eks.system_nodes,
        log_retention=retention(eks.log_retention_days),
        catalog=config.catalog,
        neuron_scheduler_extension=eks.neuron_scheduler_extension,
        neuron_monitor=eks.neuron_monitor,
        volcano=config.workloads.volcano,
    )


def _group_props(config: Config, group: ComputeGroup) -> dict[str, Any]:
    """What every construct of a compute group's nodes takes: its name, type, size, disk and capacity."""
    return dict(
        group_name=group.name,
        spec=config.spec(group),
        max_nodes=group.maximum,
        root_volume_gib=group.root_volume_gib,
        capacity_reservation_id=group.capacity.reservation_id,
        capacity_block=group.capacity.type == "capacity-block",
    )


def node_group_props(config: Config, group: ComputeGroup) -> dict[str, Any]:
    return dict(**_group_props(config, group), min_nodes=group.min_nodes)


def batch_props(config: Config, group: ComputeGroup) -> dict[str, Any]:
    settings = config.batch
    return dict(
        **_group_props(config, group),
        nodes=group.nodes,
        image_uri=settings.image_uri,
        command=settings.command,
        job_timeout=Duration.minutes(settings.job_timeout_minutes),
        retry_attempts=settings.retry_attempts,
        log_retention=retention(settings.log_retention_days),
        log_removal_policy=RemovalPolicy.DESTROY,
        track=config.neuron_track,
        ami_id=settings.ami_id,
    )


def workloads_options(config: Config) -> TrainingWorkloadsOptions:
    """Volcano, the example image on the configured Neuron track (and the BERT-large example's image where
    the config offers that example), the data loader's bucket, and the configured workload charts (the
    ones ``make synth`` writes to dist/, with the image's URI)."""
    workloads = config.workloads
    loader = workloads.data_loader
    return TrainingWorkloadsOptions(
        charts=lambda app, image: workload_charts(app, config, image=image),
        data_loader_bucket=loader.bucket if loader is not None else None,
        bert_image_directory=BERT_EXAMPLE_DIR if offers_bert_example(config) else None,
        base_image_tag=config.neuron_track.training_image_tag,
    )
