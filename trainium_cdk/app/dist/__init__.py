"""Plain YAML in dist/ for users who apply with kubectl or pcluster: the same charts the stacks install.

Values known only after deploy (the file system id, subnet, security group) are left as ``${NAME}``
placeholders; each file with placeholders starts with a comment naming them and the envsubst command
that fills exactly those (trainium_cdk/runtime/envsubst.py: a bare envsubst would empty the launcher's variables).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cdk8s

from trainium_cdk.runtime import envsubst
from trainium_cdk.facts import names
from trainium_cdk.charts import MANIFEST_SUFFIX, FsxStorageProps, write_charts, write_manifests
from trainium_cdk.charts._k8s import placeholder
from trainium_cdk.charts.training import (
    JOB_CHART_PREFIX, ArchiveLoaderJob, DataLoaderJob, ShellPod, TensorBoard, training_job,
)
from trainium_cdk.app.config import Config
from trainium_cdk.examples import BERT_DATA_JOB, BERT_DATASET_ARCHIVE, BERT_DATASETS, offers_bert_example
from trainium_cdk.facts.names import output_key
from trainium_cdk.app import backends as backend_registry
from trainium_cdk.app.workloads import example_jobs, workload_charts

DIST = Path("dist")
# Placeholder -> the stack output that holds its value.
PLACEHOLDERS = {
    "FSX_FILE_SYSTEM_ID": ("storage", output_key(names.OUTPUT_FILE_SYSTEM_ID)),
    "FSX_DNS_NAME": ("storage", output_key(names.OUTPUT_FILE_SYSTEM_DNS_NAME)),
    "FSX_MOUNT_NAME": ("storage", output_key(names.OUTPUT_FILE_SYSTEM_MOUNT_NAME)),
    "FSX_SECURITY_GROUP_ID": ("storage", output_key(names.OUTPUT_FILE_SYSTEM_SECURITY_GROUP_ID)),
    "COMPUTE_SUBNET_ID": ("network", output_key(names.OUTPUT_COMPUTE_SUBNET) + "<group>"),
    "TRAINING_IMAGE": ("eks", output_key(names.OUTPUT_EXAMPLE_IMAGE_URI)),
    "BERT_IMAGE": ("eks", output_key(names.OUTPUT_BERT_IMAGE_URI)),
    "DATA_S3_URI": ("", "the s3://bucket/prefix of your dataset"),
}


@dataclass(frozen=True)
class PlannedFileSystem:
    """The storage stack's file system as dist/ knows it: the config's settings, placeholders for its ids."""

    deployment_type: str
    throughput_mb_per_tib: int | None
    lustre_version: str
    compression: str
    capacity_gib: int
    file_system_id: str = placeholder("FSX_FILE_SYSTEM_ID")
    dns_name: str = placeholder("FSX_DNS_NAME")
    mount_name: str = placeholder("FSX_MOUNT_NAME")


def dist_storage_props(config: Config) -> FsxStorageProps | None:
    """The FSx chart's props in dist/ (the same mapping as the EKS stack's, FsxStorageProps.of)."""
    if not config.storage.enabled:
        return None
    storage = config.storage
    planned = PlannedFileSystem(
        deployment_type=storage.deployment_type, throughput_mb_per_tib=storage.throughput_mb_per_tib,
        lustre_version=storage.lustre_version, compression=storage.compression, capacity_gib=storage.capacity_gib,
    )
    return FsxStorageProps.of(
        planned, subnet_id=placeholder("COMPUTE_SUBNET_ID"), security_group_id=placeholder("FSX_SECURITY_GROUP_ID")
    )


def dist_workloads(app: cdk8s.App, config: Config) -> list[cdk8s.Chart]:
    """The configured workloads, then every example not configured: the MLP jobs, BERT-large phase 1
    (in its own image), and, with shared storage, a data loader, the Job that stages BERT's dataset, the
    shell pod and TensorBoard."""
    image = config.workloads.image or placeholder("TRAINING_IMAGE")
    charts = workload_charts(app, config, image=image)
    for job in example_jobs(config, image=image, bert_image=placeholder("BERT_IMAGE")):
        chart_id = f"{JOB_CHART_PREFIX}{job.name}"
        if chart_id not in charts:
            charts[chart_id] = training_job(app, chart_id, job=job, queue=config.workloads.queue)
    if not config.storage.enabled:
        return list(charts.values())  # the data loader, the shell and TensorBoard need the file system
    if "data-loader" not in charts:
        charts["data-loader"] = DataLoaderJob(app, "data-loader", s3_uri=placeholder("DATA_S3_URI"))
    if offers_bert_example(config):
        charts[BERT_DATA_JOB] = ArchiveLoaderJob(
            app, BERT_DATA_JOB, s3_uri=BERT_DATASET_ARCHIVE, path=BERT_DATASETS, name=BERT_DATA_JOB
        )
    if "data-shell" not in charts:
        charts["data-shell"] = ShellPod(app, "data-shell", image=image)
    if "tensorboard" not in charts:
        charts["tensorboard"] = TensorBoard(app, "tensorboard")
    return list(charts.values())


def write_dist(config: Config, outdir: Path = DIST) -> list[Path]:
    """Write the plain files of every deployed backend (its ``dist`` in trainium_cdk/app/backends.py) into
    ``outdir/<backend>``; return the paths."""
    written: list[Path] = []
    for backend in backend_registry.deployed(config):
        written += backend.write_dist(config, outdir)
    return written


def write_eks_dist(config: Config, outdir: Path = DIST) -> list[Path]:
    """Every manifest of the EKS cluster into ``outdir/eks`` and its workloads into ``outdir/eks/workloads``."""
    written = write_charts(outdir / "eks" / "workloads", lambda app: dist_workloads(app, config))
    written += write_manifests(
        outdir / "eks",
        region=config.region,
        catalog=config.catalog,
        storage=dist_storage_props(config),
        scheduler_extension=config.eks.neuron_scheduler_extension,
        monitor=config.eks.neuron_monitor,
        prometheus=config.observability.prometheus,
        collector_cidr=config.network.cidr,
    )
    for path in written:
        _add_envsubst_header(path, DIST / path.relative_to(outdir), config)
    return written


def placeholder_sources(config: Config) -> dict[str, str]:
    """Where each placeholder's value comes from after deploy, in the words of the stack outputs."""
    sources = {}
    for name, (part, key) in PLACEHOLDERS.items():
        key = key.replace("<group>", config.storage_group.name)
        sources[name] = f"output {key} of {config.stack_name(part)}" if part else key
    return sources


def _add_envsubst_header(path: Path, shown: Path, config: Config) -> None:
    """Start a manifest with placeholders with the names and the one command that fills only those."""
    text = path.read_text()
    found = envsubst.placeholders_in(text, PLACEHOLDERS)
    if not found:
        return
    lines = envsubst.header(found, shown.as_posix(), "| kubectl apply -f -", sources=placeholder_sources(config))
    if path.name.startswith(JOB_CHART_PREFIX):
        job = path.name.removeprefix(JOB_CHART_PREFIX).removesuffix(MANIFEST_SUFFIX)
        lines.append(f"# Or, with nothing to fill: trn submit --backend eks --job {job}")
    path.write_text("\n".join(lines) + "\n" + text)
