"""The parts of a ParallelCluster deployment the SlurmCluster construct and the config adapters share:
script names and paths, object locations, the ids the cluster configuration refers to. No config here:
the construct imports it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SETUP_SCRIPT_NAME = "neuron_setup.sh"
# The head node's action: runs the queues' setup script with their arguments (see the script).
HEAD_NODE_SCRIPT_NAME = "head_node_setup.sh"
SETUP_SCRIPT = Path(__file__).resolve().parent / SETUP_SCRIPT_NAME
HEAD_NODE_SCRIPT = Path(__file__).resolve().parent / HEAD_NODE_SCRIPT_NAME
SSM_POLICY = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
# The node health check (parallelcluster/health.py renders it).
PROLOG_NAME = "50_trainium_neuron_devices.sh"


@dataclass(frozen=True)
class S3Object:
    """An object ParallelCluster nodes read: bucket and key (either may be a CDK token)."""

    bucket: str
    key: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


@dataclass(frozen=True)
class ClusterIds:
    """What the cluster configuration refers to but does not create.

    :param head_node_subnet_id: the head node's subnet (public or private, per the config).
    :param compute_subnet_ids: compute group name -> its one compute subnet.
    :param efa_security_group_id: the EFA security group (also the group FSx accepts clients from).
    :param file_system_id: the storage stack's file system, or None for a new one created by
        ParallelCluster from ``config.storage``.
    :param setup_script: the Neuron setup script (the queues' OnNodeConfigured).
    :param head_node_script: the head node's OnNodeConfigured script; its S3 key must never change
        (ParallelCluster cannot update a head node's OnNodeConfigured).
    :param batch_scripts: batch script file name -> object, copied to the head node's ``~/trainium``.
    :param prologs: Slurm prolog file name -> object, installed by the head node into the shared
        ``/opt/slurm/etc/scripts/prolog.d`` (the node health check).
    """

    head_node_subnet_id: str
    compute_subnet_ids: Mapping[str, str]
    efa_security_group_id: str
    file_system_id: str | None
    setup_script: S3Object
    head_node_script: S3Object
    batch_scripts: Mapping[str, S3Object] = field(default_factory=dict)
    prologs: Mapping[str, S3Object] = field(default_factory=dict)
