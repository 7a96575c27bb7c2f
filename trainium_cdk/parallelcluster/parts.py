"""The parts of a ParallelCluster deployment the SlurmCluster construct and the config adapters share:
script names and paths, object locations, the ids the cluster configuration refers to. No config here:
the construct imports it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainium_cdk.node.neuron_metrics import policy_statement

SETUP_SCRIPT_NAME = "neuron_setup.sh"
# The head node's action: runs the queues' setup script with their arguments (see the script).
HEAD_NODE_SCRIPT_NAME = "head_node_setup.sh"
SETUP_SCRIPT = Path(__file__).resolve().parent.parent / "node" / SETUP_SCRIPT_NAME
HEAD_NODE_SCRIPT = Path(__file__).resolve().parent.parent / "node" / HEAD_NODE_SCRIPT_NAME
# The node health check (parallelcluster/health.py renders it).
PROLOG_NAME = "50_trainium_neuron_devices.sh"
# neuron-monitor into CloudWatch on the compute nodes (trainium_cdk/node/neuron_metrics.py).
NEURON_METRICS_NAME = "neuron_metrics.py"
NEURON_METRICS_POLICY_NAME = "neuron-metrics-policy.json"
# The Prometheus-format exporters and agent on the compute nodes (trainium_cdk/node/prometheus_node.py), and the
# remote-write policy's document for pcluster CLI users (the workspace's ARN a ${PROMETHEUS_WORKSPACE_ARN}).
PROMETHEUS_NODE_NAME = "prometheus_node.py"
PROMETHEUS_POLICY_NAME = "prometheus-remote-write-policy.json"
# The path of every managed policy the cluster attaches to its node roles: ParallelCluster's roles (its provider's,
# and the pcluster user's of its documented policies) may attach only policies named parallelcluster* or under
# /parallelcluster/ (DefaultParallelClusterIamAdminPolicy, statement IamPolicy, in aws-parallelcluster's
# cloudformation/policies/parallelcluster-policies.yaml). A generated name under "/" fails the cluster's creation.
NODE_POLICY_PATH = "/parallelcluster/"
# The FSx client's tuning and the stripe layout (trainium_cdk/node/lustre_tuning.sh): the queues' OnNodeStart,
# which runs before ParallelCluster mounts the file system, so that its module options are read at that mount.
LUSTRE_TUNING_NAME = "lustre_tuning.sh"


@dataclass(frozen=True)
class S3Object:
    """An object ParallelCluster nodes read: bucket and key (either may be a CDK token) and the sha256 of its
    content, known at synth (a CDK asset's key is its asset hash, a hash of more than the content: not this).
    The setup script fetches an object only through :attr:`checked_url`; ParallelCluster's own actions (the
    setup scripts, the FSx tuning) go by :attr:`url` and need none."""

    bucket: str
    key: str
    sha256: str = ""

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def checked_url(self) -> str:
        """``SHA256@s3://bucket/key``: what neuron_setup.sh's fetch_checked takes."""
        if len(self.sha256) != 64:
            raise ValueError(f"{self.url}: no sha256 of its content (the setup script fetches only checked objects)")
        return f"{self.sha256}@{self.url}"


@dataclass(frozen=True)
class NeuronMetrics:
    """neuron-monitor into CloudWatch on the compute nodes.

    :param program: trainium_cdk/node/neuron_metrics.py, which the compute nodes copy and start.
    :param policy_arn: a managed policy allowing cloudwatch:PutMetricData in its namespace only, attached
        to the compute nodes' role (ParallelCluster takes managed policies, not inline ones).
    :param deployment: the ``Deployment`` dimension the nodes publish with (the dashboard's filter).
    """

    program: S3Object
    policy_arn: str
    deployment: str


@dataclass(frozen=True)
class PrometheusWriter:
    """The Prometheus-format exporters and agent on the compute nodes (trainium_cdk/node/prometheus_node.py).

    :param program: trainium_cdk/node/prometheus_node.py, which the compute nodes copy and run.
    :param policy_arn: a managed policy allowing aps:RemoteWrite into the workspace only.
    :param remote_write_url: the workspace's remote-write URL.
    :param deployment: the ``deployment`` label of every series.
    """

    program: S3Object
    policy_arn: str
    remote_write_url: str
    deployment: str


def neuron_metrics_policy() -> dict[str, Any]:
    """The policy document of NeuronMetrics.policy_arn: PutMetricData in the Neuron metrics namespace only."""
    return {"Version": "2012-10-17", "Statement": [policy_statement()]}


def prometheus_policy(workspace_arn: str) -> dict[str, Any]:
    """The policy document of PrometheusWriter.policy_arn: aps:RemoteWrite into ``workspace_arn`` alone."""
    return {"Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "aps:RemoteWrite", "Resource": workspace_arn}]}


@dataclass(frozen=True)
class SlurmDatabase:
    """The MySQL database of Slurm's accounting (ParallelCluster's ``SlurmSettings.Database``), which slurmdbd on the
    head node writes to.

    :param uri: ``host:port``.
    :param user_name: the database user slurmdbd logs in as.
    :param password_secret_arn: a Secrets Manager secret holding that user's password as plain text (not JSON:
        ParallelCluster writes the secret's string into slurmdbd.conf as it is); the head node's role may read it
        (ParallelCluster adds that to the role it makes).
    :param database_name: the database (schema) slurmdbd creates and uses (0-9, a-z and _, at most 64).
    :param client_security_group_id: a security group the database accepts connections from, given to the head
        node alone.
    """

    uri: str
    user_name: str
    password_secret_arn: str
    database_name: str
    client_security_group_id: str


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
    :param batch_scripts: batch script file name -> object, copied to the head node's ``~/trainium`` and, for every user, ``/home/trainium-cdk/trainium``.
    :param prologs: Slurm prolog file name -> object, installed by the head node into the shared
        ``/opt/slurm/etc/scripts/prolog.d`` (the node health check).
    :param neuron_metrics: neuron-monitor into CloudWatch on the compute nodes. Default: none.
    :param prometheus: the Prometheus-format exporters and agent on the compute nodes. Default: none.
    :param session_manager_policy_arn: a managed policy with Session Manager's minimal instance actions
        (trainium_cdk/facts/session_manager/__init__.py), for the head node. Default: none (no Session Manager).
    :param lustre_tuning: trainium_cdk/node/lustre_tuning.sh, the queues' OnNodeStart with each queue's
        arguments (SlurmQueue.lustre_tuning). Default: none (no tuning).
    :param database: the database of Slurm's accounting, which a cluster with teams needs
        (``ClusterSettings.accounting``). Default: none.
    :param accounting: the file of sacctmgr commands the head node runs (``accounting.render_commands``). Default:
        none.
    """

    head_node_subnet_id: str
    compute_subnet_ids: Mapping[str, str]
    efa_security_group_id: str
    file_system_id: str | None
    setup_script: S3Object
    head_node_script: S3Object
    batch_scripts: Mapping[str, S3Object] = field(default_factory=dict)
    prologs: Mapping[str, S3Object] = field(default_factory=dict)
    neuron_metrics: NeuronMetrics | None = None
    prometheus: PrometheusWriter | None = None
    session_manager_policy_arn: str | None = None
    lustre_tuning: S3Object | None = None
    database: SlurmDatabase | None = None
    accounting: S3Object | None = None
