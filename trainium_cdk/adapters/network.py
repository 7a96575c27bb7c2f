"""The network stack's adapter: the config mapped to TrainingNetwork's props."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import aws_logs as logs

from trainium_cdk.config import Config
from trainium_cdk.constructs.defaults import retention
from trainium_cdk.constructs.network import ComputePlacement
from trainium_cdk.examples import BERT_DATASET_ARCHIVE, offers_bert_example


@dataclass(frozen=True)
class NetworkProps:
    """TrainingNetwork's props of one deployment (see TrainingNetwork for each)."""

    az_ids: Sequence[str]
    compute_groups: Sequence[ComputePlacement]
    cidr: str
    public_subnet_mask: int
    private_subnet_mask: int
    nat_gateways: int
    interface_endpoints: bool
    flow_log_retention: logs.RetentionDays
    s3_buckets: Sequence[str]


def network_props(config: Config) -> NetworkProps:
    network = config.network
    return NetworkProps(
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
        s3_buckets=endpoint_buckets(config),
    )


def endpoint_buckets(config: Config) -> list[str]:
    """The buckets the config names, which the S3 gateway endpoint must reach even in another account: the data
    repository's, the data loader's, the BERT-large example's dataset (Neuron's) and ``network.s3_buckets``."""
    named = list(config.network.s3_buckets)
    repository = config.storage.data_repository if config.storage.enabled else None
    if repository is not None and repository.bucket_name:
        named.append(repository.bucket_name)
    if config.workloads.data_loader is not None:
        named.append(config.workloads.data_loader.bucket)
    if offers_bert_example(config):
        named.append(BERT_DATASET_ARCHIVE.removeprefix("s3://").split("/", 1)[0])
    return sorted(set(named))
