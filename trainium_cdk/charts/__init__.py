"""cdk8s charts that run on the EKS cluster: device plugins and shared storage.

:func:`cluster_charts` builds all of them into a cdk8s App. The EKS stack passes CDK tokens and adds
each chart with ``cluster.add_cdk8s_chart``; ``make synth`` calls :func:`write_manifests` for plain
YAML in ``dist/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import cdk8s
from constructs import Construct

from trainium_cdk.charts.efa_device_plugin import EfaDevicePlugin
from trainium_cdk.charts.fsx_storage import FsxStorage, FsxStorageProps
from trainium_cdk.charts.job_metrics import JobMetricsGateway
from trainium_cdk.charts.metrics_exporters import MetricsExporters
from trainium_cdk.charts.namespace import TrainingNamespace
from trainium_cdk.charts.neuron_device_plugin import NeuronDevicePlugin
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, Catalog

__all__ = [
    "EFA_CHART_ID", "FSX_CHART_ID", "JOB_METRICS_CHART_ID", "METRICS_CHART_ID", "NAMESPACE_CHART_ID", "NEURON_CHART_ID", "EfaDevicePlugin",
    "FsxStorage", "FsxStorageProps", "JobMetricsGateway", "MetricsExporters", "NeuronDevicePlugin", "TrainingNamespace", "cluster_charts", "write_charts", "write_manifests",
]

# Chart ids are file names in dist/ and construct ids in the EKS stack: keep them stable.
NEURON_CHART_ID = "neuron-device-plugin"
EFA_CHART_ID = "efa-device-plugin"
FSX_CHART_ID = "fsx-storage"
NAMESPACE_CHART_ID = "training-namespace"
METRICS_CHART_ID = "metrics-exporters"
JOB_METRICS_CHART_ID = "job-metrics"
MANIFEST_SUFFIX = ".k8s.yaml"


def cluster_charts(
    app: Construct,
    *,
    region: str,
    catalog: Catalog = DEFAULT_CATALOG,
    storage: FsxStorageProps | Mapping[str, Any] | None = None,
    scheduler_extension: bool = False,
    monitor: bool = False,
    prometheus: bool = False,
    collector_cidr: str | None = None,
) -> list[cdk8s.Chart]:
    """Every cluster chart, built into ``app`` (a cdk8s App).

    :param region: AWS region of the cluster (a CDK token works).
    :param catalog: instance types the node affinities list. Default: the built-in catalog.
    :param storage: FsxStorage props; None leaves the storage chart out. Default: None.
    :param scheduler_extension: deploy the Neuron scheduler extension. Default: False.
    :param monitor: deploy neuron-monitor. Default: False.
    :param prometheus: deploy the exporters the managed Prometheus collector scrapes: neuron-monitor and the node
        exporter (charts/metrics_exporters.py), and the Pushgateway of the jobs' metrics (charts/job_metrics.py).
        Default: False.
    :param collector_cidr: with ``prometheus``, the addresses the managed collector scrapes from (the VPC's CIDR).

    A catalog without EFA types gets no EFA device plugin: there is no node it could run on.
    """
    charts: list[cdk8s.Chart] = [
        TrainingNamespace(app, NAMESPACE_CHART_ID),
        NeuronDevicePlugin(
            app, NEURON_CHART_ID, instance_types=catalog.neuron_types(),
            scheduler_extension=scheduler_extension, monitor=monitor or prometheus,
        )
    ]
    if prometheus:
        charts.append(MetricsExporters(app, METRICS_CHART_ID, instance_types=catalog.neuron_types()))
        if collector_cidr is None:
            raise ConfigError("cluster_charts.collector_cidr", None, "the VPC's CIDR when prometheus is on")
        charts.append(JobMetricsGateway(app, JOB_METRICS_CHART_ID, collector_cidr=collector_cidr))
    if catalog.efa_types():
        charts.append(EfaDevicePlugin(app, EFA_CHART_ID, region=region, instance_types=catalog.efa_types()))
    if storage is not None:
        kwargs = storage.as_kwargs() if isinstance(storage, FsxStorageProps) else dict(storage)
        charts.append(FsxStorage(app, FSX_CHART_ID, **kwargs))
    return charts


def write_manifests(
    outdir: str | Path,
    *,
    region: str,
    catalog: Catalog = DEFAULT_CATALOG,
    storage: FsxStorageProps | Mapping[str, Any] | None = None,
    scheduler_extension: bool = False,
    monitor: bool = False,
    prometheus: bool = False,
    collector_cidr: str | None = None,
) -> list[Path]:
    """Write one ``<chart id>.k8s.yaml`` per cluster chart into ``outdir``; return their paths.

    Takes the arguments of :func:`cluster_charts` (plain values, no tokens). Manifests left in
    ``outdir`` by an earlier run are removed first: ``kubectl apply -f dist/`` must not apply a chart
    that is no longer built.
    """
    return write_charts(
        outdir,
        lambda app: cluster_charts(
            app, region=region, catalog=catalog, storage=storage, scheduler_extension=scheduler_extension,
            monitor=monitor, prometheus=prometheus, collector_cidr=collector_cidr,
        ),
    )


def write_charts(outdir: str | Path, build: Callable[[cdk8s.App], Iterable[cdk8s.Chart]]) -> list[Path]:
    """Synthesize the charts ``build`` adds to a fresh cdk8s App into ``outdir``, one
    ``<chart id>.k8s.yaml`` each, after removing manifests an earlier run left there."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for stale in outdir.glob(f"*{MANIFEST_SUFFIX}"):
        stale.unlink()
    app = cdk8s.App(
        outdir=str(outdir), output_file_extension=MANIFEST_SUFFIX, yaml_output_type=cdk8s.YamlOutputType.FILE_PER_CHART
    )
    charts = list(build(app))
    app.synth()
    return [outdir / f"{chart.node.id}{MANIFEST_SUFFIX}" for chart in charts]
