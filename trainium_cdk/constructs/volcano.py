"""Volcano, the gang scheduler multi-node training jobs run under, from its vendored Helm chart."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_cdk.constructs import vendored_charts

VOLCANO_NAMESPACE = "volcano-system"
# Volcano's install waits for its controllers and admission webhook (image pulls on fresh nodes):
# more than Helm's 5 minute default, less than the 15 minutes the kubectl provider's Lambda may run.
VOLCANO_WAIT = Duration.minutes(10)
# Volcano's default scheduler configuration (chart config/volcano-scheduler.conf, the same in 1.13 and 1.15) without the
# `enqueue` action: enqueue holds a gang's PodGroup Pending until the cluster has room, so its pods are
# never created and no autoscaler sees them; without it, allocate moves the PodGroup to Inqueue at once
# (pkg/scheduler/actions/allocate, "If not config enqueue action") and the pending pods ask Karpenter or
# Cluster Autoscaler for the whole gang. The gang plugin still binds all pods or none.
VOLCANO_SCHEDULER_CONFIG = """actions: "allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def add_volcano(cluster: eks.ICluster, *, after: Construct | None = None) -> eks.HelmChart:
    """Install Volcano on ``cluster``; ``after``: what runs its pods (the system node group)."""
    chart = cluster.add_helm_chart(
        "Volcano",
        chart_asset=vendored_charts.chart_asset(cluster, "VolcanoChart", "volcano", cluster),
        namespace=VOLCANO_NAMESPACE,
        create_namespace=True,
        wait=True,
        timeout=VOLCANO_WAIT,
        values={"custom": {"scheduler_config_override": VOLCANO_SCHEDULER_CONFIG}},
    )
    # Its admission webhook has no endpoints until its pods run somewhere.
    if after is not None:
        chart.node.add_dependency(after)
    return chart
