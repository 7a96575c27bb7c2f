"""The ParallelCluster 3 cluster configuration of a deployment, from the project's config, and the
pcluster CLI's YAML of it.

One function renders it (``configuration.render_configuration``) from the settings the config maps to
(``trainium_cdk.app.adapters.parallelcluster``): the :class:`SlurmCluster` construct with CDK tokens for the ids
that other stacks own, :func:`render_cluster_yaml` with ``${NAME}`` placeholders (filled with `envsubst`
from the stack outputs) for users of the pcluster CLI. Both describe the same cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from trainium_cdk.app.adapters.parallelcluster import cluster_name, cluster_settings, slurm_accounting
from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.facts.names import OUTPUT_PROMETHEUS_REMOTE_WRITE_URL, OUTPUT_PROMETHEUS_WORKSPACE_ARN
from trainium_cdk.facts.session_manager import POLICY_FILE_NAME as SESSION_MANAGER_POLICY_FILE
from trainium_cdk.facts.versions import PARALLELCLUSTER_VERSION
from trainium_cdk.node.neuron_metrics import NAMESPACE as NEURON_METRICS_NAMESPACE
from trainium_cdk.parallelcluster.accounting import COMMANDS_FILE_NAME, database_name, render_commands
from trainium_cdk.parallelcluster.configuration import (  # noqa: F401 (the names this module has always offered)
    OS_USER,
    QUEUE_UPDATE_STRATEGY,
    SHARED_STORAGE_NAME,
    VENV,
    apt_args,
    metrics_args,
    read_access,
    render_configuration,
    setup_args,
)
from trainium_cdk.parallelcluster.parts import (
    HEAD_NODE_SCRIPT_NAME,
    LUSTRE_TUNING_NAME,
    NEURON_METRICS_NAME,
    NEURON_METRICS_POLICY_NAME,
    NODE_POLICY_PATH,
    PROLOG_NAME,
    PROMETHEUS_NODE_NAME,
    PROMETHEUS_POLICY_NAME,
    SETUP_SCRIPT_NAME,
    ClusterIds,
    NeuronMetrics,
    PrometheusWriter,
    S3Object,
    SlurmDatabase,
)
from trainium_cdk.runtime import envsubst


def accounting_commands(config: Config) -> str | None:
    """The head node's sacctmgr commands of the config's teams (accounting.render_commands), or None without teams."""
    accounting = slurm_accounting(config)
    return render_commands(accounting) if accounting is not None else None


def queue_name(group: ComputeGroup) -> str:
    return group.name


def compute_resource_name(group: ComputeGroup) -> str:
    """The name of the group's one compute resource (SlurmQueue.compute_resource_name, from the config)."""
    return group.instance_type.replace(".", "-")


def batch_script_name(group: ComputeGroup) -> str:
    return f"train-{group.name}.sbatch"


def cluster_configuration(config: Config, ids: ClusterIds) -> dict[str, Any]:
    """The ParallelCluster 3 configuration of ``config``: :func:`render_configuration` of its settings."""
    return render_configuration(cluster_settings(config), ids)


# -- the pcluster CLI alternative ------------------------------------------------------------------

SCRIPTS_PREFIX = "trainium"
EXAMPLE_SCRIPT_NAME = "mlp_train.py"  # the MLP example beside the batch scripts (parallelcluster/sbatch.py)
SCRIPTS_BUCKET = "SCRIPTS_BUCKET"  # the placeholder of the bucket the scripts are uploaded to


def placeholder(name: str) -> str:
    return envsubst.placeholder(name)


def subnet_placeholder(group: ComputeGroup) -> str:
    return "COMPUTE_SUBNET_ID_" + group.name.upper().replace("-", "_")


NODE_POLICY_NOTE = f"created under path {NODE_POLICY_PATH} (aws iam create-policy --path {NODE_POLICY_PATH} ...)"


def placeholder_names(config: Config) -> dict[str, str]:
    """Placeholder -> where its value comes from after `cdk deploy` of the network (and storage) stacks."""
    names = {
        "HEAD_NODE_SUBNET_ID": (
            f"the public subnet in AZ ID {config.storage_group.az_id} of {config.stack_name('network')} "
            "(tag aws-cdk:subnet-name=public)"
            if config.parallelcluster.head_node_subnet == "public"
            else f"output ComputeSubnet-{config.storage_group.name} of {config.stack_name('network')}"
        ),
        "EFA_SECURITY_GROUP_ID": f"output EfaSecurityGroupId of {config.stack_name('network')}",
        SCRIPTS_BUCKET: f"an S3 bucket of yours; upload this directory to s3://$SCRIPTS_BUCKET/{SCRIPTS_PREFIX}/",
    }
    for group in config.compute_groups:
        names[subnet_placeholder(group)] = f"output ComputeSubnet-{group.name} of {config.stack_name('network')}"
    if config.storage.enabled:
        names["FSX_FILE_SYSTEM_ID"] = f"output FileSystemId of {config.stack_name('storage')}"
    names["SESSION_MANAGER_POLICY_ARN"] = (
        f"a managed policy of yours with the document {SESSION_MANAGER_POLICY_FILE}, {NODE_POLICY_NOTE} (Session "
        "Manager's minimal instance policy: the head node is reached with `aws ssm start-session`)"
    )
    names["NEURON_METRICS_POLICY_ARN"] = (
        f"a managed policy of yours with the document {NEURON_METRICS_POLICY_NAME}, {NODE_POLICY_NOTE} "
        f"(cloudwatch:PutMetricData in namespace {NEURON_METRICS_NAMESPACE} only)"
    )
    if config.teams:
        source = ("a MySQL database of yours that the head node reaches (ParallelCluster's guide, 'Slurm accounting "
                  "with AWS ParallelCluster'); the ParallelCluster stack makes one for the cluster it deploys")
        names["SLURM_DATABASE_URI"] = f"host:port of {source}"
        names["SLURM_DATABASE_USER_NAME"] = "the database user slurmdbd logs in as"
        names["SLURM_DATABASE_PASSWORD_SECRET_ARN"] = "a Secrets Manager secret holding that user's password as plain text"
        names["SLURM_DATABASE_CLIENT_SECURITY_GROUP_ID"] = "a security group the database accepts MySQL from (the head node's)"
    if config.observability.prometheus:
        network = config.stack_name("network")
        names["PROMETHEUS_REMOTE_WRITE_URL"] = f"output {OUTPUT_PROMETHEUS_REMOTE_WRITE_URL} of {network}"
        names["PROMETHEUS_POLICY_ARN"] = (
            f"a managed policy of yours with the document {PROMETHEUS_POLICY_NAME}, {NODE_POLICY_NOTE} (aps:RemoteWrite into the "
            f"workspace alone: fill its Resource with the output {OUTPUT_PROMETHEUS_WORKSPACE_ARN} of {network})"
        )
    return names


def placeholder_ids(config: Config, digests: Mapping[str, str]) -> ClusterIds:
    """The ids of the pcluster CLI's YAML; ``digests``: file name -> sha256 of each file the setup script fetches
    (``dist.fetched_digests``: the nodes refuse any other content)."""
    bucket = placeholder(SCRIPTS_BUCKET)

    def fetched(name: str) -> S3Object:
        return S3Object(bucket, f"{SCRIPTS_PREFIX}/{name}", digests.get(name, ""))

    return ClusterIds(
        head_node_subnet_id=placeholder("HEAD_NODE_SUBNET_ID"),
        compute_subnet_ids={g.name: placeholder(subnet_placeholder(g)) for g in config.compute_groups},
        efa_security_group_id=placeholder("EFA_SECURITY_GROUP_ID"),
        file_system_id=placeholder("FSX_FILE_SYSTEM_ID") if config.storage.enabled else None,
        setup_script=S3Object(bucket, f"{SCRIPTS_PREFIX}/{SETUP_SCRIPT_NAME}"),
        head_node_script=S3Object(bucket, f"{SCRIPTS_PREFIX}/{HEAD_NODE_SCRIPT_NAME}"),
        batch_scripts={
            name: fetched(name)
            for name in [*(batch_script_name(g) for g in config.compute_groups), EXAMPLE_SCRIPT_NAME]
        },
        prologs={PROLOG_NAME: fetched(PROLOG_NAME)},
        neuron_metrics=NeuronMetrics(
            program=fetched(NEURON_METRICS_NAME),
            policy_arn=placeholder("NEURON_METRICS_POLICY_ARN"), deployment=cluster_name(config),
        ),
        # The compute nodes' Prometheus agents write into the network stack's workspace, as the stack's nodes do.
        prometheus=PrometheusWriter(
            program=fetched(PROMETHEUS_NODE_NAME), policy_arn=placeholder("PROMETHEUS_POLICY_ARN"),
            remote_write_url=placeholder("PROMETHEUS_REMOTE_WRITE_URL"), deployment=cluster_name(config),
        ) if config.observability.prometheus else None,
        session_manager_policy_arn=placeholder("SESSION_MANAGER_POLICY_ARN"),
        lustre_tuning=S3Object(bucket, f"{SCRIPTS_PREFIX}/{LUSTRE_TUNING_NAME}"),
        database=SlurmDatabase(
            uri=placeholder("SLURM_DATABASE_URI"), user_name=placeholder("SLURM_DATABASE_USER_NAME"),
            password_secret_arn=placeholder("SLURM_DATABASE_PASSWORD_SECRET_ARN"),
            database_name=database_name(cluster_name(config)),
            client_security_group_id=placeholder("SLURM_DATABASE_CLIENT_SECURITY_GROUP_ID"),
        ) if config.teams else None,
        accounting=fetched(COMMANDS_FILE_NAME) if config.teams else None,
    )


def render_cluster_yaml(config: Config, digests: Mapping[str, str], ids: ClusterIds | None = None) -> str:
    """The cluster configuration as YAML for `pcluster create-cluster`, with ``${NAME}`` placeholders
    for ids known only after deploy (or the concrete ``ids`` given); ``digests``: see :func:`placeholder_ids`."""
    body = yaml.safe_dump(cluster_configuration(config, ids or placeholder_ids(config, digests)), sort_keys=False)
    header = [
        f"# ParallelCluster {PARALLELCLUSTER_VERSION} configuration of {cluster_name(config)}, generated by trainium-cdk",
        "# (the same cluster the ParallelCluster stack deploys).",
    ]
    if ids is None:
        sources = placeholder_names(config)
        names = envsubst.placeholders_in(body, sources)
        header += envsubst.header(names, f"dist/parallelcluster/{cluster_file_name(config)}", "> cluster.yaml",
                                  sources=sources)
        header.append("# then:")
    header.append(
        f"#   pcluster create-cluster --region {config.region} --cluster-name {cluster_name(config)} "
        "--cluster-configuration cluster.yaml"
    )
    return "\n".join(header) + "\n" + body


def cluster_file_name(config: Config) -> str:
    """The cluster configuration's name in dist/parallelcluster/."""
    return f"{config.project}-cluster.yaml"
