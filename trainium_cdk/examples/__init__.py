"""The documented example workloads beyond the MLP: what each runs, where its image puts it, which
configs offer it. Their Docker build contexts are the folders beside this file.

Pure Python, no CDK: the stacks, dist/ and the `trn` CLI (`trn doctor`) read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainium_cdk.facts.names import SHARED_MOUNT

if TYPE_CHECKING:
    from trainium_cdk.app.config import Config

# The tokenized Wikipedia corpus of Neuron's BERT tutorial (aws-neuron-sdk, frameworks/torch/torch-neuronx/
# tutorials/training/tutorial_source_code/bert_training/bert_setup_code.sh): one tar, about 48 GB, in
# Neuron's public bucket (anonymous reads, `--no-sign-request`), which unpacks into a directory of its own
# name (the tutorial untars it in ~/examples_datasets and trains on ~/examples_datasets/<that name>).
BERT_DATASET_ARCHIVE = (
    "s3://neuron-s3/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/"
    "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128.tar"
)
BERT_DATASETS = "datasets"  # where it is unpacked, under the shared mount
BERT_DATA_DIR = f"{SHARED_MOUNT}/{BERT_DATASETS}/" + BERT_DATASET_ARCHIVE.rsplit("/", 1)[1].removesuffix(".tar")
# The Job of dist/ that stages it (dist/eks/workloads/stage-bert-data.k8s.yaml).
BERT_DATA_JOB = "stage-bert-data"

# BERT-large phase 1, as the Neuron multi-node tutorial runs it: the script of aws-neuron-samples
# (torch-neuronx/training/dp_bert_hf_pretrain) where the example image (bert/Dockerfile) puts it,
# the tokenized Wikipedia corpus on FSx.
BERT_SCRIPT = "/opt/trainium-cdk/examples/bert/dp_bert_large_hf_pretrain_hdf5.py"
BERT_LARGE_PHASE1_COMMAND = (
    BERT_SCRIPT,
    "--data_dir", BERT_DATA_DIR,
    "--output_dir", f"{SHARED_MOUNT}/runs/bert-large-phase1",
    "--lr", "6e-4", "--phase1_end_step", "28125", "--batch_size", "16", "--grad_accum_usteps", "32",
    "--seq_len", "128", "--max_pred_len", "20", "--warmup_steps", "2000", "--enable_pt_autocast",
)
# The tracks whose training image has torch-xla, which the BERT script imports (the native track's,
# TorchNeuron, has none): the example and its image exist on these only.
BERT_TRACKS = ("xla",)


def offers_multi_node_examples(config: Config) -> bool:
    """The first compute group has EFA and room for two nodes."""
    group = config.compute_groups[0]
    return config.spec(group).has_efa and group.maximum >= 2


def offers_bert_example(config: Config) -> bool:
    """Whether the config has the BERT-large example (and the EKS stack its image): two EFA nodes of the
    first compute group, on a track whose image has torch-xla, with the example images built
    (``eks.example_images``: its image carries the pinned sample script)."""
    return offers_multi_node_examples(config) and config.neuron_track.name in BERT_TRACKS and config.eks.example_images
