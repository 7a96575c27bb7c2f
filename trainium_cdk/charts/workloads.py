"""The workloads of a deployment, built from its config: what the EKS stack installs and dist/ holds.

:func:`workload_charts` is the one code path: the EKS stack calls it with the example image asset's
URI (a token) and adds each chart to the cluster; ``make synth`` calls it with a ``${TRAINING_IMAGE}``
placeholder and writes YAML. :func:`example_jobs` adds the documented examples to dist/ only.
"""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

from trainium_cdk.charts.training import (
    DataLoaderJob, ShellPod, TensorBoard, VolcanoQueue, training_job,
)
from trainium_cdk.config import EXAMPLE_COMMAND, Config, TrainingJobSettings
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.jobs import JobSpec

QUEUE_CHART_ID = "volcano-queue"
# BERT-large phase 1, as the Neuron multi-node tutorial runs it: the script of aws-neuron-samples
# (torch-neuronx/training/dp_bert_hf_pretrain) in an image of yours, the tokenized Wikipedia corpus on FSx.
BERT_LARGE_PHASE1_COMMAND = (
    "python3", "dp_bert_large_hf_pretrain_hdf5.py",
    "--data_dir", "/data/datasets/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128",
    "--output_dir", "/data/runs/bert-large-phase1",
    "--lr", "6e-4", "--phase1_end_step", "28125", "--batch_size", "16", "--grad_accum_usteps", "32",
    "--seq_len", "128", "--max_pred_len", "20", "--warmup_steps", "2000", "--enable_pt_autocast",
)


def workload_charts(app: Construct, config: Config, *, image: str) -> dict[str, cdk8s.Chart]:
    """The configured workloads by chart id: the Volcano queue, each job, the data loader, the shell
    pod and TensorBoard. ``image`` is the default training image."""
    workloads = config.workloads
    charts: dict[str, cdk8s.Chart] = {}
    if workloads.volcano:
        charts[QUEUE_CHART_ID] = VolcanoQueue(app, QUEUE_CHART_ID, name=workloads.queue)
    for job in workloads.jobs:
        charts[f"job-{job.name}"] = training_job(
            app, f"job-{job.name}", job=config.job_spec(job, image=image), queue=workloads.queue
        )
    if workloads.data_loader is not None:
        loader = workloads.data_loader
        charts["data-loader"] = DataLoaderJob(app, "data-loader", s3_uri=loader.s3_uri, path=loader.path)
    if workloads.shell:
        charts["data-shell"] = ShellPod(app, "data-shell", image=workloads.image or image)
    if workloads.tensorboard:
        charts["tensorboard"] = TensorBoard(app, "tensorboard")
    return charts


def example_jobs(config: Config, *, image: str) -> list[JobSpec]:
    """The documented examples on the first compute group: the MLP on one node, the MLP across the
    group's nodes (when it has EFA and more than one node), and BERT-large phase 1 (2 nodes, bf16)."""
    group = config.compute_groups[0]
    spec = config.spec(group)
    def mlp(name: str, nodes: int) -> JobSpec:
        command = (*EXAMPLE_COMMAND, "--output-dir", f"/data/runs/{name}")
        return config.job_spec(
            TrainingJobSettings(name=name, nodes=nodes, command=command, cache_set=name), image=image
        )

    examples = [mlp("mlp", 1)]
    if spec.has_efa and group.maximum >= 2:
        nodes = group.nodes if group.nodes > 1 else 2
        examples += [
            mlp("mlp-distributed", nodes),
            config.job_spec(
                TrainingJobSettings(
                    name="bert-large-phase1", nodes=2, command=BERT_LARGE_PHASE1_COMMAND, cache_set="bert-large",
                    # bf16 through autocast; XLA_DOWNCAST_BF16 for SDKs before autocast support.
                    env={"XLA_DOWNCAST_BF16": "1", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1"},
                ),
                image=image,
            ),
        ]
    return examples


def render_job(config: Config, *, name: str, group: str | None = None, nodes: int | None = None,
               image: str | None = None) -> list[dict[str, Any]]:
    """The Kubernetes objects of a configured job (or an example, by name) as dicts, for `trn submit`."""
    image = image or config.workloads.image or "${TRAINING_IMAGE}"
    configured = {j.name: j for j in config.workloads.jobs}
    if name in configured:
        settings = configured[name]
        overrides: dict[str, Any] = {}
        if group is not None:
            overrides["group"] = group
        if nodes is not None:
            overrides["nodes"] = nodes
        job = config.job_spec(settings.model_copy(update=overrides), image=image)
    else:
        examples = {j.name: j for j in example_jobs(config, image=image)}
        if name not in examples:
            raise ConfigError("job", name, "a job of workloads.jobs or an example; " + one_of([*configured, *examples]))
        job = examples[name]
    app = cdk8s.App()
    chart = training_job(app, name, job=job, queue=config.workloads.queue)
    return chart.to_json()
