"""The ``observability`` section: metrics beyond CloudWatch's defaults."""

from __future__ import annotations

from pydantic import Field

from trainium_cdk.app.config.base import _Model


class ObservabilitySettings(_Model):
    """Prometheus-format metrics of Neuron, EFA and jobs, in one Amazon Managed Service for Prometheus workspace."""

    prometheus: bool = Field(
        False,
        description="An Amazon Managed Service for Prometheus workspace fed by every backend: on EKS the managed "
        "collector scrapes neuron-monitor and the node exporter; Batch and ParallelCluster compute nodes and the "
        "development instance run them with a Prometheus agent that remote-writes. Off by default: CloudWatch already "
        "carries the Neuron and EFA metrics, and the workspace bills per sample ingested and per collector hour.",
    )
