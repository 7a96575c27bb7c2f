"""Names more than one layer uses: the stacks, constructs and charts write them; the CLI, dist/ and
the pipeline read them. Each has its home here (``tests/meta/test_names.py`` fails on a stray copy).

Pure Python: the ``trn`` CLI imports it.
"""

from __future__ import annotations

import re

from trainium_cdk.facts.catalog import NEURON_RESOURCE

# -- Kubernetes ---------------------------------------------------------------------------------------

# The training workloads, their FSx claim and the data pods (Pod Security Admission baseline).
TRAINING_NAMESPACE = "training"
# The Volcano queue of training jobs.
QUEUE_NAME = "training"
# Trainium nodes are tainted with the Neuron resource name, as EKS's Neuron guide does: only pods that
# tolerate it (the device plugins, the FSx node driver, training jobs) land there.
NEURON_TAINT_KEY = NEURON_RESOURCE
NEURON_TAINT_VALUE = "true"
# The startup taint every Trainium node joins with (Karpenter NodePools' startupTaints, managed node groups'
# taints); the health checker (charts/node_health.py, node/health_check.py) removes it once the node passes.
# Training pods never tolerate it. Its prefix makes Cluster Autoscaler treat it as a startup taint: ignored when
# it simulates a node group's nodes, so pending pods still scale a managed node group from zero
# (cluster-autoscaler FAQ, "startup taints": every taint with the prefix startup-taint.cluster-autoscaler.kubernetes.io/).
# Karpenter ignores a NodePool's startupTaints the same way (docs, concepts/nodepools.md "startupTaints").
# EKS takes a node group taint key of at most 63 characters (EKS API reference, Taint): this one is 62.
STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
HEALTH_TAINT_KEY = f"{STARTUP_TAINT_PREFIX}trainium-health"
HEALTH_TAINT_VALUE = "unchecked"
# Labels the Trainium nodes carry (managed node groups and Karpenter node pools alike); jobs select them.
GROUP_LABEL = "trainium-cdk/compute-group"
NODE_INSTANCE_TYPE_LABEL = "trainium-cdk/instance-type"
NODE_EFA_LABEL = "trainium-cdk/efa"
# The system nodes: controllers (Karpenter, Cluster Autoscaler) and data pods select them.
SYSTEM_NODE_LABELS = {"trainium-cdk/role": "system"}
# The BERT-large phase 1 example job (dist/ and `trn submit --job`), which runs in its own image.
BERT_EXAMPLE_JOB = "bert-large-phase1"
# Labels of a training job's pods: the CLI finds a job's pods, and rank 0's logs, by them.
JOB_LABEL = "trainium-cdk/job"
RANK_LABEL = "trainium-cdk/rank"
# The FSx StorageClass, the static volume of the deployed file system and the claim jobs mount.
STORAGE_CLASS_NAME = "fsx-lustre"
VOLUME_NAME = "fsx-lustre-static"
CLAIM_NAME = "fsx-lustre"

# -- Paths on every node and in every container ------------------------------------------------------

# Where the shared file system is mounted on every backend: hosts (Batch, ParallelCluster, the dev
# instance) and pods alike, so that one path (a dataset, a checkpoint, the compile cache) is the same
# path everywhere.
SHARED_MOUNT = "/fsx"
# What stands for /fsx in `trn rehearse` (relative to where it runs) unless --fsx says: its outputs, and what a
# rehearsed data job left there (`trn fit` reads a model's config.json from it).
REHEARSAL_FSX = ".trn-rehearse/fsx"
CACHE_DIR_NAME = "neuron-cache"
# ParallelCluster: the group whose members' jobs share the compile cache (/fsx/neuron-cache, setgid 2775), made on
# the head node; the README tells how a user joins it.
CACHE_GROUP = "neuron"
# Neuron's compile cache when no shared storage is deployed: on the node, per cache set.
LOCAL_CACHE_ROOT = "/var/tmp/neuron-compile-cache"
# The Neuron tools (neuron-ls, nccom-test, neuron-top) on a host with the Neuron packages (aws-neuronx-tools):
# on PATH only in login shells (/etc/profile.d), so a program that a scheduler starts puts it there itself.
# (neuron_metrics.py and health_check.py, programs copied to nodes that have no trainium_cdk, keep their own copy.)
NEURON_BIN = "/opt/aws/neuron/bin"
# Checkpoints: /fsx/checkpoints/<job> on every backend. The launcher appends the job (its name on EKS,
# the Slurm job id, the Batch job id): all stay the same when the scheduler restarts the job.
CHECKPOINT_ROOT = f"{SHARED_MOUNT}/checkpoints"
# The same directory as the file system names it: what storage.checkpoint_export links to its S3 bucket.
CHECKPOINT_FILE_SYSTEM_PATH = "/checkpoints"
# Datasets: /fsx/datasets, where the EKS data loader copies an S3 prefix by default. Both directories get a
# stripe layout on every backend's nodes (lustre_tuning.py).
DATASETS_DIR_NAME = "datasets"

# Where a TorchNeuron recipe runs, as its job says it (recipes on the native track): the torch device, the process
# group backend and the torch.compile backend (empty: eager). The launch rehearsal gives the CPU's instead
# (trainium_cdk/rehearsal: its substitution table), the one place a recipe's Neuron-only part is replaced.
TORCH_DEVICE_VARIABLE = "TRN_TORCH_DEVICE"
DIST_BACKEND_VARIABLE = "TRN_DIST_BACKEND"
COMPILE_BACKEND_VARIABLE = "TRN_COMPILE_BACKEND"
NEURON_DEVICE = "neuron"  # TorchNeuron's device, process group backend and torch.compile backend
# EKS: the service account of the jobs that read the Hugging Face token's secret (hugging_face.token_secret): the
# stack binds it to a role that may read that secret (EKS Pod Identity); the recipes' data jobs run as it.
HF_TOKEN_SERVICE_ACCOUNT = "hf-token-reader"
# EKS: the data loader's Job and service account (its role reads the loader's S3 prefix, EKS Pod Identity); an
# admission policy admits a pod as that service account only when the Job of that name owns it.
DATA_LOADER_SERVICE_ACCOUNT = "data-loader"
DATA_LOADER_JOB = "data-loader"

# Metrics a job writes for the node's Prometheus collector (issue 34): the launcher writes Prometheus text files
# (``*.prom``, the node_exporter textfile format) into the directory named by TRN_METRICS_DIR when it is set; each
# backend's node collector reads NODE_METRICS_DIR. Per-job compile-cache counters carry these names (labels: job).
METRICS_DIR_VARIABLE = "TRN_METRICS_DIR"
NODE_METRICS_DIR = "/var/lib/trainium-cdk/metrics"
COMPILE_CACHE_HITS_METRIC = "trn_neuron_compile_cache_hits_total"
COMPILE_CACHE_MISSES_METRIC = "trn_neuron_compile_cache_misses_total"
# EKS: Pod Security keeps a job from the node's metrics folder (no hostPath in the training namespace), so the
# launcher pushes the same text to the Prometheus Pushgateway at TRN_METRICS_PUSH_URL (Prometheus docs, "When to use
# the Pushgateway": the outcome of a batch job), a Service of the training namespace (charts/job_metrics.py).
METRICS_PUSH_URL_VARIABLE = "TRN_METRICS_PUSH_URL"
# The job's label the launcher exports for the program's own series (recipes/*/job_metrics.py), and the gauges the
# recipes publish each step: tokens a second per node, and the model FLOPs utilization against the node's BF16 peak.
METRICS_JOB_VARIABLE = "TRN_METRICS_JOB"
JOB_TOKENS_PER_SECOND_METRIC = "trn_job_tokens_per_second_per_node"
JOB_MFU_METRIC = "trn_job_model_flops_utilization_ratio"
PUSHGATEWAY_NAME = "pushgateway"
PUSHGATEWAY_PORT = 9091
PUSHGATEWAY_URL = f"http://{PUSHGATEWAY_NAME}.{TRAINING_NAMESPACE}.svc:{PUSHGATEWAY_PORT}"

# -- Training images ----------------------------------------------------------------------------------

# The build argument that names a training image's base, the Neuron training image of the deployment's track:
# `trn image push` passes it, and the starter Dockerfile (`trn image init`) builds FROM it.
BASE_IMAGE_BUILD_ARG = "NEURON_BASE_IMAGE"
# The example images' build argument: the tag of that image (their FROM line names its public repository).
BASE_TAG_BUILD_ARG = "BASE_TAG"

# -- Stack outputs ------------------------------------------------------------------------------------
# The construct id of each CfnOutput; CloudFormation shows it as :func:`output_key` (CDK drops the
# characters a logical id cannot hold). Per-group outputs are ``<kind>-<group>`` (:func:`group_output`).
# A stack whose groups are many (Batch) writes them as one JSON output instead.

# network
OUTPUT_VPC_ID = "VpcId"
OUTPUT_EFA_SECURITY_GROUP_ID = "EfaSecurityGroupId"
OUTPUT_COMPUTE_SUBNET = "ComputeSubnet"  # per group
OUTPUT_ALARM_TOPIC_ARN = "AlarmTopicArn"
OUTPUT_PROMETHEUS_WORKSPACE_ID = "PrometheusWorkspaceId"  # with observability.prometheus
# with observability.prometheus: what pcluster CLI users fill in dist/parallelcluster/ (the hosts' agents write there)
OUTPUT_PROMETHEUS_WORKSPACE_ARN = "PrometheusWorkspaceArn"
OUTPUT_PROMETHEUS_REMOTE_WRITE_URL = "PrometheusRemoteWriteUrl"
# storage
OUTPUT_FILE_SYSTEM_ID = "FileSystemId"
OUTPUT_FILE_SYSTEM_DNS_NAME = "FileSystemDnsName"
OUTPUT_FILE_SYSTEM_MOUNT_NAME = "FileSystemMountName"
OUTPUT_FILE_SYSTEM_SECURITY_GROUP_ID = "FileSystemSecurityGroupId"
OUTPUT_DATA_BUCKET_NAME = "DataBucketName"
OUTPUT_CHECKPOINT_BUCKET_NAME = "CheckpointBucketName"
# eks (and parallelcluster: OUTPUT_CLUSTER_NAME)
OUTPUT_CLUSTER_NAME = "ClusterName"
OUTPUT_DASHBOARD_NAME = "DashboardName"
OUTPUT_EXAMPLE_IMAGE_URI = "ExampleImageUri"
OUTPUT_BERT_IMAGE_URI = "BertImageUri"
# eks and batch: the repository of the team's own training images (`trn image push`)
OUTPUT_TRAINING_IMAGE_REPOSITORY_URI = "TrainingImageRepositoryUri"
OUTPUT_UPDATE_KUBECONFIG = "UpdateKubeconfig"
OUTPUT_ACCESS_HOST_ID = "AccessHostId"
# The managed policy a user is granted to run `trn connect` through the access host (constructs/api_access.py).
OUTPUT_CONNECT_POLICY_ARN = "ConnectPolicyArn"
# The only Session Manager document `trn connect` starts on the access host, and the only one its policy allows.
PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"
# The instance type of the EKS API access host (constructs/api_access.py; priced by cost.py).
ACCESS_HOST_INSTANCE_TYPE = "t4g.nano"
ACCESS_HOST_ROOT_VOLUME_GIB = 8
# The EKS system node group's root volumes, set by its launch template. EKS gives a node group without one 20 GiB
# (DiskSize), room for the add-ons' images; the system nodes also run the training image (the shell pod, the recipes'
# data preparation), a Neuron image of several GB whose layers containerd keeps packed and unpacked. Its size is not
# measured here (no registry reachable): 100 GiB leaves room for two such images. Priced by cost.py.
SYSTEM_NODE_DISK_GIB = 100
# batch: one output for every compute group, a JSON object of group name -> {field: value} with the
# BATCH_* fields below. An output per group and field (six a group) would reach CloudFormation's 200
# outputs at 33 groups, short of AWS Batch's own limit of 50 job queues.
OUTPUT_BATCH_GROUPS = "BatchGroups"
BATCH_JOB_QUEUE_NAME = "JobQueueName"
BATCH_JOB_QUEUE_ARN = "JobQueueArn"
BATCH_JOB_DEFINITION_NAME = "JobDefinitionName"
BATCH_JOB_DEFINITION_ARN = "JobDefinitionArn"
BATCH_LOG_GROUP_NAME = "LogGroupName"
BATCH_SUBMIT_JOB = "SubmitJob"
# batch: the CPU queue's job queue, job definition and log group (JSON, the BATCH_* fields above), when it has one.
OUTPUT_BATCH_CPU = "BatchCpu"
# Its queue's and job definition's name after the stack's: no compute group's name has a '_', so none can take it.
BATCH_CPU_SUFFIX = "_cpu"
# parallelcluster
OUTPUT_HEAD_NODE_INSTANCE_ID = "HeadNodeInstanceId"
OUTPUT_HEAD_NODE_SESSION = "HeadNodeSession"
OUTPUT_VALIDATION_MESSAGES = "ValidationMessages"
# With teams: the secret of Slurm's accounting database password (the database user's, for an administrator's mysql)
OUTPUT_ACCOUNTING_DATABASE_SECRET_ARN = "AccountingDatabaseSecretArn"
# instance
OUTPUT_INSTANCE_ID = "InstanceId"
OUTPUT_START_SESSION = "StartSession"
OUTPUT_INSTANCE_CONNECT_SSH = "InstanceConnectSsh"

_NOT_IN_LOGICAL_ID = re.compile(r"[^A-Za-z0-9]")


def group_output(kind: str, group: str) -> str:
    """The construct id of a per-group output: ``JobQueueArn-train``."""
    return f"{kind}-{group}"


def instance_type_dns_label(instance_type: str) -> str:
    """An instance type as a DNS label, for object names: ``trn1.32xlarge`` -> ``trn1-32xlarge`` (RFC 1123 labels
    take no dot)."""
    return instance_type.replace(".", "-")


def output_key(output_id: str) -> str:
    """The key CloudFormation lists for a stack-level CfnOutput of this id: ``JobQueueArntrain``."""
    return _NOT_IN_LOGICAL_ID.sub("", output_id)
# Neuron's yum repository (Amazon Linux 2023 nodes: Batch's and EKS's).
NEURON_YUM_REPO = "https://yum.repos.neuron.amazonaws.com"
