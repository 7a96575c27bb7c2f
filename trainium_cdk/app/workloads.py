"""The workloads of a deployment, built from its config: what the EKS stack installs and dist/ holds.

The adapter from the ``workloads`` section to the training charts (charts read no config). It loads
no CDK: the ``trn`` CLI renders jobs with :func:`render_job`.

:func:`workload_charts` is the one code path: the EKS stack's :class:`TrainingWorkloads` calls it with
the example image asset's URI (a token) and adds each chart to the cluster; ``make synth`` calls it
with a ``${TRAINING_IMAGE}`` placeholder and writes YAML. :func:`example_jobs` adds the documented
examples to dist/ only.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import cdk8s
from constructs import Construct

from trainium_cdk import recipes
from trainium_cdk.app.config import EXAMPLE_COMMAND, Config, TrainingJobSettings
from trainium_cdk.charts.code import CodeConfigMap
from trainium_cdk.charts.training import (
    JOB_CHART_PREFIX,
    QUEUE_CHART_ID,
    DataLoaderJob,
    ServiceAccountChart,
    ShellPod,
    TensorBoard,
    VolcanoQueue,
    training_job,
)
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.examples import BERT_LARGE_PHASE1_COMMAND, offers_bert_example, offers_multi_node_examples
from trainium_cdk.facts.names import BERT_EXAMPLE_JOB, HF_TOKEN_SERVICE_ACCOUNT, PUSHGATEWAY_URL, SHARED_MOUNT
from trainium_cdk.runtime.jobs import JobSpec

# The MLP example's code when no example image is built: a ConfigMap of the training namespace (charts/code.py).
MLP_CODE_CONFIG_MAP = "mlp-example"
MLP_EXAMPLE_SOURCE = Path(__file__).resolve().parent.parent / "examples" / "mlp" / "train.py"


def eks_job_spec(config: Config, settings: TrainingJobSettings, *, image: str) -> JobSpec:
    """An EKS job: ``config.job_spec``, and with observability.prometheus the Pushgateway its launcher pushes the
    job's metrics to (charts/job_metrics.py; Pod Security keeps the job from the node's metrics folder). A job of
    the MLP example's command gets the example's code from its ConfigMap when no example image is built."""
    spec = config.job_spec(settings, image=image)
    if config.observability.prometheus:
        spec = replace(spec, metrics_push_url=PUSHGATEWAY_URL)
    if not config.eks.example_images and tuple(settings.command[:1]) == EXAMPLE_COMMAND:
        spec = replace(spec, code=(MLP_CODE_CONFIG_MAP, posixpath.dirname(EXAMPLE_COMMAND[0])))
    return spec


def example_code_chart(app: Construct, config: Config) -> dict[str, cdk8s.Chart]:
    """The MLP example's train.py as a ConfigMap of the training namespace, which its jobs mount where the example
    image has it, when the deploy builds no example image (``eks.example_images: false``)."""
    if config.eks.example_images:
        return {}
    return {MLP_CODE_CONFIG_MAP: CodeConfigMap(app, MLP_CODE_CONFIG_MAP, name=MLP_CODE_CONFIG_MAP,
                                               files={"train.py": MLP_EXAMPLE_SOURCE.read_text()})}


def workload_charts(app: Construct, config: Config, *, image: str) -> dict[str, cdk8s.Chart]:
    """The configured workloads by chart id: the Volcano queue, each job, the data loader, the shell
    pod and TensorBoard. ``image`` is the default training image."""
    workloads = config.workloads
    charts: dict[str, cdk8s.Chart] = example_code_chart(app, config)
    if workloads.volcano:
        charts[QUEUE_CHART_ID] = VolcanoQueue(app, QUEUE_CHART_ID, name=workloads.queue,
                                              teams={t.name: t.share for t in config.teams})
    for job in workloads.jobs:
        chart_id = f"{JOB_CHART_PREFIX}{job.name}"
        charts[chart_id] = training_job(
            app, chart_id, job=eks_job_spec(config, job, image=image), queue=workloads.queue
        )
    if workloads.data_loader is not None:
        loader = workloads.data_loader
        charts["data-loader"] = DataLoaderJob(app, "data-loader", s3_uri=loader.s3_uri, path=loader.path)
    if workloads.shell:
        charts["data-shell"] = ShellPod(app, "data-shell", image=workloads.image or image)
    if workloads.tensorboard:
        charts["tensorboard"] = TensorBoard(app, "tensorboard")
    if config.hugging_face.token_secret:
        # The service account the recipes' data jobs run as; the stack binds it to the role that reads the secret.
        charts[HF_TOKEN_SERVICE_ACCOUNT] = ServiceAccountChart(app, HF_TOKEN_SERVICE_ACCOUNT, name=HF_TOKEN_SERVICE_ACCOUNT)
    return charts


def example_settings(config: Config, *, bert_image: str | None = None) -> list[TrainingJobSettings]:
    """The documented examples on the first compute group: the MLP on one node, and, when the group has
    EFA and room for two nodes, the MLP across its nodes and (on the xla track) BERT-large phase 1
    (2 nodes, bf16) in ``bert_image``, its own image (default: the default image)."""
    group = config.compute_groups[0]

    def mlp(name: str, nodes: int) -> TrainingJobSettings:
        output = ("--output-dir", f"{SHARED_MOUNT}/runs/{name}") if config.storage.enabled else ()
        command = (*EXAMPLE_COMMAND, *output)
        return TrainingJobSettings(name=name, group=group.name, nodes=nodes, command=command, cache_set=name)

    examples = [mlp("mlp", 1)]
    if offers_multi_node_examples(config):
        examples.append(mlp("mlp-distributed", group.nodes if group.nodes > 1 else 2))
    if offers_bert_example(config):
        examples.append(TrainingJobSettings(
            name=BERT_EXAMPLE_JOB, group=group.name, nodes=2, command=BERT_LARGE_PHASE1_COMMAND,
            image=bert_image, cache_set="bert-large",
            # bf16 through autocast (--enable_pt_autocast): the Neuron docs say not to set
            # XLA_USE_BF16 or XLA_DOWNCAST_BF16 with it.
            env={"NEURON_RT_STOCHASTIC_ROUNDING_EN": "1"},
        ))
    return examples


def example_jobs(config: Config, *, image: str, bert_image: str | None = None) -> list[JobSpec]:
    return [eks_job_spec(config, s, image=image) for s in example_settings(config, bert_image=bert_image)]


def render_job(
    config: Config,
    *,
    name: str,
    image: str,
    group: str | None = None,
    nodes: int | None = None,
    job: str | None = None,
    command: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    team: str | None = None,
) -> list[dict[str, Any]]:
    """The Kubernetes objects of one training job, as dicts, for `trn submit --backend eks`.

    :param name: the name of the job to create.
    :param image: the default training image (the EKS stack's image, or the user's); a job or
        ``workloads.image`` that names its own wins. For the BERT-large example, the image it runs in
        (the stack's BERT image, or the user's): that example names no image of its own here.
    :param job: the workload it runs: a job of ``workloads.jobs``, an example (``mlp``, ``mlp-distributed``,
        ``bert-large-phase1``) or a recipe (trainium_cdk.recipes; ``image`` is then its image). Default: the
        first configured job, else ``mlp``.
    :param command: the user's own command (``train.py --lr 3e-4``), as one process runs it, instead of a
        workload: a job of that command on ``group`` with every default (its compile cache: the group's).
    :param env: environment added to the workload's (the user's wins).
    :param team: the team whose job it is (``trn submit --team``): its queue and its label. Default: none.
    :param group: compute group; default: the workload's.
    :param nodes: nodes; default: the workload's. Above 1 it becomes a gang-scheduled Volcano job.
    """
    update: dict[str, Any] = {"name": name}
    if command:
        if job is not None:
            raise ConfigError("--job", job, "left out when a command is given: one or the other")
        settings = TrainingJobSettings(name=name, group=group, command=tuple(command))
    else:
        workloads = {s.name: s for s in (*config.workloads.jobs, *example_settings(config, bert_image=image))}
        chosen = job or (config.workloads.jobs[0].name if config.workloads.jobs else "mlp")
        if chosen in workloads:
            settings = workloads[chosen]
        elif recipes.find(chosen) is not None:
            settings = recipes.job(config, chosen, group=config.group(group), backend="eks", nodes=nodes)
            update["image"] = image  # the recipe's own image, whatever workloads.image says
        else:
            offered = [*workloads, *(r.name for r in recipes.available(config, "eks"))]
            raise ConfigError("--job", chosen, "a job of workloads.jobs, an example or a recipe; " + one_of(offered))
    if group is not None:
        update["group"] = group
    if nodes is not None:
        update["nodes"] = nodes
    if env:
        update["env"] = {**settings.env, **env}
    try:
        spec = replace(eks_job_spec(config, settings.model_copy(update=update), image=image), team=team)
    except ConfigError as err:
        field = {"nodes": "--nodes", "name": "--name"}.get(err.field, err.field)
        raise ConfigError(field, err.value, err.allowed) from None
    app = cdk8s.App()
    return training_job(app, name, job=spec, queue=config.workloads.queue).to_json()


# The backends' image_build entries (app/backends.py names them by string: the registry imports no example,
# since the examples' checks take the config, whose models import the registry).
def eks_image_build(config: Config) -> str | None:
    """With eks.example_images, TrainingWorkloads builds the MLP example image (a DockerImageAsset) on every EKS
    deploy, and the BERT-large example's where the config offers that example; else nothing."""
    if not config.eks.example_images:
        return None
    mlp = "the MLP example image (trainium_cdk/examples/mlp/Dockerfile)"
    if not offers_bert_example(config):
        return mlp
    return f"{mlp} and the BERT-large example image (trainium_cdk/examples/bert/Dockerfile)"


def batch_image_build(config: Config) -> str | None:
    """TrainiumBatch builds the MLP example image when batch.image_uri names no image of the user's."""
    if config.batch.image_uri:
        return None
    return "the MLP example image of the Batch job definitions (trainium_cdk/examples/mlp/Dockerfile)"
