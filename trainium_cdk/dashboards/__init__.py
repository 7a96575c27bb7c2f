"""Grafana dashboards over the Prometheus-format metrics every backend collects (observability.prometheus):
Neuron (neuron-monitor), EFA (the EFA hardware counters) and jobs (per-job compile-cache counters).

Each is a dashboard JSON model with a Prometheus data source variable, so that it imports into Amazon Managed
Grafana or any Grafana (Dashboards > New > Import) with the deployment's Amazon Managed Service for Prometheus
workspace as its data source. Their queries name only metrics the collectors emit (tests/app/test_prometheus_metrics.py).
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

DASHBOARDS = ("neuron", "efa", "jobs")


def source(name: str) -> str:
    """The JSON text of one dashboard (``neuron``, ``efa`` or ``jobs``)."""
    return files(__package__).joinpath(f"{name}.json").read_text()


def load(name: str) -> dict[str, Any]:
    return json.loads(source(name))
