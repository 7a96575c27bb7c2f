"""The ParallelCluster backend stack: a Slurm cluster through ParallelCluster's custom resource."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from trainium_cdk.config import Config
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.parallelcluster import SlurmCluster
from trainium_cdk.constructs.storage import LustreStorage


class ParallelClusterStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        network: TrainingNetwork,
        storage: LustreStorage | None,
        **kwargs,
    ) -> None:
        super().__init__(
            scope, construct_id, description="trainium-cdk: AWS ParallelCluster (Slurm) with Trainium queues", **kwargs
        )
        self.slurm = SlurmCluster(self, "Slurm", config=config, network=network, storage=storage)
        CfnOutput(self, "ClusterName", value=self.slurm.cluster_name)
        CfnOutput(self, "HeadNodeInstanceId", value=self.slurm.head_node_instance_id)
        CfnOutput(
            self,
            "HeadNodeSession",
            value=f"aws ssm start-session --region {config.region} --target {self.slurm.head_node_instance_id}",
        )
        CfnOutput(self, "ValidationMessages", value=self.slurm.validation_messages)
