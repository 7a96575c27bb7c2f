"""trainium-cdk: AWS CDK constructs and cdk8s charts for AWS Trainium training clusters.

The public API, importable from the package root::

    from trainium_cdk import TrainingNetwork, LustreStorage, TrainiumCluster, TrainiumNodeGroup, DEFAULT_CATALOG

The library: the constructs, the charts, their props and the public facts; none of it reads a config. The app
that builds a deployment from a config (the config, the stacks, ``compose``, ``TrainingApp``, the backend
registry) is :mod:`trainium_cdk.app`.

Names resolve on first use, so that ``import trainium_cdk`` (and the ``trn`` CLI) does not start the
CDK's JavaScript runtime until a construct is needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trainium_cdk.node_runtime import use_bundled_node

# Here, not in the modules that import aws_cdk: a user's app imports trainium_cdk before aws_cdk (which starts
# jsii's Node process), so jsii runs on the wheel's supported Node 24 whatever node is on their PATH, and prints
# no end-of-life banner because there is none to print; a JSII_NODE they set wins.
use_bundled_node()

__version__ = "0.1.0"

# name -> module that defines it
_PUBLIC = {
    # facts
    "ConfigError": "trainium_cdk.errors",
    "Catalog": "trainium_cdk.facts.catalog",
    "InstanceSpec": "trainium_cdk.facts.catalog",
    "NodeCapacity": "trainium_cdk.facts.capacity",
    "GroupNodes": "trainium_cdk.facts.capacity",
    "DEFAULT_CATALOG": "trainium_cdk.facts.catalog",
    "JobSpec": "trainium_cdk.runtime.jobs",
    "NeuronTrack": "trainium_cdk.facts.versions",
    "NEURON_TRACKS": "trainium_cdk.facts.versions",
    "AmiQuery": "trainium_cdk.facts.versions",
    # constructs
    "TrainingNetwork": "trainium_cdk.constructs.network",
    "ComputePlacement": "trainium_cdk.constructs.network",
    "ITrainingNetwork": "trainium_cdk.constructs.network",
    "LustreStorage": "trainium_cdk.constructs.storage",
    "DataRepositoryProps": "trainium_cdk.constructs.storage",
    "ILustreStorage": "trainium_cdk.constructs.storage",
    "LustreMount": "trainium_cdk.constructs.storage",
    "LustreConnections": "trainium_cdk.constructs.storage",
    "EfaLaunchTemplate": "trainium_cdk.constructs.efa_launch_template",
    "TrainiumCluster": "trainium_cdk.constructs.eks_cluster",
    "ITrainiumCluster": "trainium_cdk.constructs.eks_cluster_import",
    "ApiAccessHost": "trainium_cdk.constructs.api_access",
    "TrainiumNodeGroup": "trainium_cdk.constructs.eks_nodegroup",
    "KarpenterController": "trainium_cdk.constructs.karpenter",
    "KarpenterOptions": "trainium_cdk.constructs.karpenter",
    "ClusterAutoscaler": "trainium_cdk.constructs.cluster_autoscaler",
    "ClusterAutoscalerOptions": "trainium_cdk.constructs.cluster_autoscaler",
    "ClusterObservability": "trainium_cdk.constructs.observability",
    "TrainingWorkloads": "trainium_cdk.constructs.eks_workloads",
    "TrainingWorkloadsOptions": "trainium_cdk.constructs.eks_workloads",
    "TrainingImageRepository": "trainium_cdk.constructs.training_images",
    "TrainiumBatch": "trainium_cdk.constructs.batch",
    "BatchCpuQueue": "trainium_cdk.constructs.batch_cpu",
    "BatchRoles": "trainium_cdk.constructs.batch_roles",
    "BatchTaskRules": "trainium_cdk.constructs.batch_tasks",
    "SlurmCluster": "trainium_cdk.constructs.parallelcluster",
    "ClusterSettings": "trainium_cdk.parallelcluster.configuration",
    "HeadNode": "trainium_cdk.parallelcluster.configuration",
    "SlurmQueue": "trainium_cdk.parallelcluster.configuration",
    "NewFileSystem": "trainium_cdk.parallelcluster.configuration",
    "SlurmAccounting": "trainium_cdk.parallelcluster.accounting",
    "SlurmAccount": "trainium_cdk.parallelcluster.accounting",
    "SlurmDatabase": "trainium_cdk.parallelcluster.parts",
    "SlurmAccountingDatabase": "trainium_cdk.constructs.slurm_database",
    "MetricsWorkspace": "trainium_cdk.constructs.prometheus",
    "DevInstance": "trainium_cdk.constructs.dev_instance",
    "NagAcknowledgments": "trainium_cdk.constructs.nag",
    # cdk8s charts
    "NeuronDevicePlugin": "trainium_cdk.charts.neuron_device_plugin",
    "EfaDevicePlugin": "trainium_cdk.charts.efa_device_plugin",
    "FsxStorage": "trainium_cdk.charts.fsx_storage",
    "FsxStorageProps": "trainium_cdk.charts.fsx_storage",
    "TrainingNamespace": "trainium_cdk.charts.namespace",
    "TrainiumNodePools": "trainium_cdk.charts.karpenter",
    "NodePoolProps": "trainium_cdk.charts.karpenter",
    "SingleNodeTrainingJob": "trainium_cdk.charts.training",
    "DistributedTrainingJob": "trainium_cdk.charts.training",
    "VolcanoQueue": "trainium_cdk.charts.training",
    "DataLoaderJob": "trainium_cdk.charts.training",
    "ShellPod": "trainium_cdk.charts.training",
    "TensorBoard": "trainium_cdk.charts.training",
}

__all__ = sorted(_PUBLIC)


# Exported under another name than the module's (none today; trainium_cdk.app has one).
_ALIASES: dict[str, str] = {}


# Exported here before 0.1.0's layout, trainium_cdk.app's now (named, not imported: a construct's import, which
# may ask this module for a name it lacks, loads no app; tests/e2e/test_package.py keeps the set equal to app.__all__).
_MOVED_TO_APP = frozenset({
    "Backend", "BatchStack", "Config", "EksStack", "InstanceStack", "NetworkStack", "ParallelClusterStack",
    "PipelineStack", "StorageStack", "TrainingApp", "build_config", "compose", "load_config", "register_backend",
})


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        if name in _MOVED_TO_APP:  # exported here before 0.1.0's layout: say where it went
            raise AttributeError(f"module 'trainium_cdk' has no attribute {name!r}: it is trainium_cdk.app.{name}")
        raise AttributeError(f"module 'trainium_cdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _ALIASES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*globals(), *__all__]


if TYPE_CHECKING:  # static type checkers see the real names
    from trainium_cdk.charts.efa_device_plugin import EfaDevicePlugin
    from trainium_cdk.charts.fsx_storage import FsxStorage, FsxStorageProps
    from trainium_cdk.charts.karpenter import NodePoolProps, TrainiumNodePools
    from trainium_cdk.charts.namespace import TrainingNamespace
    from trainium_cdk.charts.neuron_device_plugin import NeuronDevicePlugin
    from trainium_cdk.charts.training import (
        DataLoaderJob,
        DistributedTrainingJob,
        ShellPod,
        SingleNodeTrainingJob,
        TensorBoard,
        VolcanoQueue,
    )
    from trainium_cdk.constructs.api_access import ApiAccessHost
    from trainium_cdk.constructs.batch import TrainiumBatch
    from trainium_cdk.constructs.batch_cpu import BatchCpuQueue
    from trainium_cdk.constructs.batch_roles import BatchRoles
    from trainium_cdk.constructs.batch_tasks import BatchTaskRules
    from trainium_cdk.constructs.cluster_autoscaler import ClusterAutoscaler, ClusterAutoscalerOptions
    from trainium_cdk.constructs.dev_instance import DevInstance
    from trainium_cdk.constructs.efa_launch_template import EfaLaunchTemplate
    from trainium_cdk.constructs.eks_cluster import TrainiumCluster
    from trainium_cdk.constructs.eks_cluster_import import ITrainiumCluster
    from trainium_cdk.constructs.eks_nodegroup import TrainiumNodeGroup
    from trainium_cdk.constructs.eks_workloads import TrainingWorkloads, TrainingWorkloadsOptions
    from trainium_cdk.constructs.karpenter import KarpenterController, KarpenterOptions
    from trainium_cdk.constructs.nag import NagAcknowledgments
    from trainium_cdk.constructs.network import ComputePlacement, ITrainingNetwork, TrainingNetwork
    from trainium_cdk.constructs.observability import ClusterObservability
    from trainium_cdk.constructs.parallelcluster import SlurmCluster
    from trainium_cdk.constructs.prometheus import MetricsWorkspace
    from trainium_cdk.constructs.slurm_database import SlurmAccountingDatabase
    from trainium_cdk.constructs.storage import (
        DataRepositoryProps,
        ILustreStorage,
        LustreConnections,
        LustreMount,
        LustreStorage,
    )
    from trainium_cdk.constructs.training_images import TrainingImageRepository
    from trainium_cdk.errors import ConfigError
    from trainium_cdk.facts.capacity import GroupNodes, NodeCapacity
    from trainium_cdk.facts.catalog import DEFAULT_CATALOG, Catalog, InstanceSpec
    from trainium_cdk.facts.versions import NEURON_TRACKS, AmiQuery, NeuronTrack
    from trainium_cdk.parallelcluster.accounting import SlurmAccount, SlurmAccounting
    from trainium_cdk.parallelcluster.configuration import ClusterSettings, HeadNode, NewFileSystem, SlurmQueue
    from trainium_cdk.parallelcluster.parts import SlurmDatabase
    from trainium_cdk.runtime.jobs import JobSpec
