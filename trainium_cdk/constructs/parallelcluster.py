"""SlurmCluster: an AWS ParallelCluster 3 (Slurm) cluster deployed through CloudFormation.

ParallelCluster creates its clusters itself (its own stack, launch templates, Slurm daemons); its
official CloudFormation custom resource drives that from a template. We deploy the provider it
publishes per version and region as a nested stack and declare one ``Custom::PclusterCluster``
whose ``ClusterConfiguration`` comes from :func:`cluster_configuration`, the same function that
renders the YAML for pcluster CLI users. The Neuron setup script and the batch scripts ship as S3
assets the nodes may read (and nothing else of the asset bucket).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from aws_cdk import Aws, CfnStack, CustomResource, Stage
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from trainium_cdk.config import Config
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.storage import LustreStorage
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.parallelcluster.cluster_config import (
    SSM_POLICY,
    ClusterIds,
    S3Object,
    cluster_configuration,
    cluster_name,
)
from trainium_cdk.parallelcluster.dist import HEAD_NODE_SCRIPT, SETUP_SCRIPT
from trainium_cdk.parallelcluster.health import PROLOG_NAME, render_prolog
from trainium_cdk.parallelcluster.sbatch import render_all
from trainium_cdk.versions import parallelcluster_provider_template_url

CLUSTER_RESOURCE_TYPE = "Custom::PclusterCluster"
# The provider's Lambda may attach only the managed policies it is told about to the node roles.
PROVIDER_ADDITIONAL_POLICIES = (SSM_POLICY,)


class SlurmCluster(Construct):
    """A ParallelCluster Slurm cluster: a head node and one queue per compute group, on the training
    network, with the storage stack's file system at /fsx (or a new one ParallelCluster creates).

    :param config: the whole deployment (compute groups, storage, the parallelcluster section).
    :param network: the training network: compute subnets, public subnets, the EFA security group.
    :param storage: the storage stack's file system, or None for one created with the cluster.
    :param name: the cluster's name; default ``<project>-cluster`` (must differ from every stack name).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        network: TrainingNetwork,
        storage: LustreStorage | None,
        name: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.cluster_name = name or cluster_name(config)
        self.setup_script = s3_assets.Asset(self, "NeuronSetupScript", path=str(SETUP_SCRIPT))
        self.head_node_script = s3_assets.Asset(self, "HeadNodeSetupScript", path=str(HEAD_NODE_SCRIPT))
        self.batch_scripts = {
            file_name: s3_assets.Asset(self, f"BatchScript-{file_name}", path=str(self._stage(file_name, text)))
            for file_name, text in render_all(config).items()
        }
        self.prolog = s3_assets.Asset(self, "HealthProlog", path=str(self._stage(PROLOG_NAME, render_prolog(config))))
        self.ids = ClusterIds(
            head_node_subnet_id=self._head_node_subnet(config, network).subnet_id,
            compute_subnet_ids={g.name: network.compute_subnet(g.name).subnet_id for g in config.compute_groups},
            efa_security_group_id=network.efa_security_group.security_group_id,
            file_system_id=storage.file_system_id if storage is not None else None,
            setup_script=_object(self.setup_script),
            head_node_script=_object(self.head_node_script),
            batch_scripts={n: _object(a) for n, a in self.batch_scripts.items()},
            prologs={PROLOG_NAME: _object(self.prolog)},
        )
        self.configuration = cluster_configuration(config, self.ids)

        # L1: ParallelCluster publishes the provider as a plain template at an S3 URL; NestedStack is
        # for stacks written in CDK, and including the template would copy it into ours at synth.
        self.provider = CfnStack(
            self,
            "Provider",
            template_url=parallelcluster_provider_template_url(config.region, Aws.URL_SUFFIX),
            parameters={"AdditionalIamPolicies": ",".join(PROVIDER_ADDITIONAL_POLICIES)},
        )
        # A custom resource of ParallelCluster's provider: no CloudFormation type describes a cluster.
        self.cluster = CustomResource(
            self,
            "Cluster",
            service_token=self.provider.get_att("Outputs.ServiceToken").to_string(),
            resource_type=CLUSTER_RESOURCE_TYPE,
            properties={
                "ClusterName": self.cluster_name,
                "ClusterConfiguration": self.configuration,
                "DeletionPolicy": config.parallelcluster.deletion_policy,
            },
        )
        self.head_node_instance_id = self.cluster.get_att_string("headNode.instanceId")
        self.validation_messages = self.cluster.get_att_string("validationMessages")

    @staticmethod
    def _head_node_subnet(config: Config, network: TrainingNetwork) -> ec2.ISubnet:
        # Next to the file system (the storage group's AZ): Lustre traffic and /home stay in one AZ.
        if config.parallelcluster.head_node_subnet == "private":
            return network.compute_subnet(config.storage_group.name)
        az_id = config.storage_group.az_id
        by_az = {s.availability_zone: s for s in network.vpc.public_subnets}
        if az_id not in by_az:
            raise ConfigError("parallelcluster.head_node_subnet", "public", "a public subnet in " + one_of(by_az))
        return by_az[az_id]

    def _stage(self, file_name: str, text: str) -> Path:
        # Rendered files need a path for an asset: stage them in the cloud assembly, by content.
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        path = Path(Stage.of(self).asset_outdir) / "trainium-cdk-sources" / digest / file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path


def _object(asset: s3_assets.Asset) -> S3Object:
    return S3Object(bucket=asset.s3_bucket_name, key=asset.s3_object_key)
