"""Defaults a user would pick, each written once: the config's fields, the constructs' props and the
charts' props read them from here (AWS limits live in the catalog, pinned versions in versions.py).

Plain values, no CDK: the config and the charts load this module too. The constructs' CDK forms of
them (a RetentionDays, a RemovalPolicy) are in trainium_cdk/facts/defaults/cdk.py.
"""

from __future__ import annotations

# Encrypted gp3 root volume of a Trainium node or the development instance, GiB: the Neuron setup guides
# ask for at least 512 GiB (the DLAMI, the compile cache and container images share it).
ROOT_VOLUME_GIB = 512
# Retention of every log group of ours (flow logs, job logs, control plane, Lambda functions), days.
LOG_RETENTION_DAYS = 30
# What `cdk destroy` may do to a stateful resource, in the config's words (CloudFormation snapshots only
# volumes and databases, not FSx: there is no snapshot policy).
REMOVAL_POLICIES = ("retain", "destroy")
# The EKS system node group (cluster add-ons, Karpenter, the data pods): its default and most nodes.
SYSTEM_NODES = 2
MAX_SYSTEM_NODES = 10
# Attempts of an AWS Batch job: a host failure retries once (AWS's limit is catalog.BATCH_MAX_ATTEMPTS).
BATCH_RETRY_ATTEMPTS = 2
# Steps of the trial run that `precompile` extracts graphs from (TRN_PRECOMPILE_STEPS, which the training
# script reads): "Your trial run should be limited to a few steps (eg.10-15)" (Neuron, "PyTorch NeuronX
# neuron_parallel_compile CLI", frameworks/torch/torch-neuronx/api-reference-guide/training/
# pytorch-neuron-parallel-compile.rst in aws-neuron/aws-neuron-sdk).
PRECOMPILE_STEPS = 10
# Open files a training process may have: the soft RLIMIT_NOFILE the launcher raises to on every backend
# (and the Batch job definition's nofile ulimit). Neuron's NxD training scripts run `ulimit -n 65535` first
# (aws-neuron/neuronx-distributed, release 2.29: examples/training/llama/tp_zero1_llama_hf_pretrain/
# tp_zero1_llama3_8B_hf_pretrain.sh, "Increase the fd limit for container"; aws-neuron/
# neuronx-distributed-training examples/train_setup.sh): each worker holds sockets to its peers, the
# compile cache's files and data loader pipes, past the soft 1024 of systemd's DefaultLimitNOFILE=1024:524288,
# which a service (slurmd, containerd) and what it starts get unless its unit says otherwise.
OPEN_FILES = 65535
