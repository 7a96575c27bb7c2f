"""The fabric check: every node's Neuron devices (``neuron-ls``), then an all-reduce across the nodes
(``nccom-test``), its bus bandwidth set against the instance's EFA line rate from the catalog.

The job runs the project's launcher like any training job (one process per node): the launcher derives
node rank, count and the rendezvous address from the scheduler, torchrun starts :data:`PROGRAM`
(``trainium_cdk/node/fabric_check.py``) on every node. The nodes exchange their addresses over
torch.distributed (gloo, no device needed); node 0 runs nccom-test, which drives the other hosts itself
(``--hosts``, ``NEURON_RT_ROOT_COMM_ID``, as the Neuron nccom-test guide describes multi-instance runs).
Here: the command, and the report read back from the job's log. Pure Python: no CDK, no AWS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainium_cdk import node
from trainium_cdk.catalog import InstanceSpec
from trainium_cdk.node.fabric_check import (
    MULTI_HOST, NODE_REPORT, REPORT_BEGIN, REPORT_END, SINGLE_HOST, SINGLE_HOST_NOTE,
)

# A few message sizes: latency-bound, middle, bandwidth-bound (1 MiB, 32 MiB, 1 GiB).
MIN_BYTES = "1MB"
MAX_BYTES = "1GB"
STEP_FACTOR = 32
# nccom-test's bootstrap port on node 0 (NEURON_RT_ROOT_COMM_ID=<address>:<port>).
ROOT_COMM_PORT = 45654
# PASS when the best bus bandwidth reaches this fraction of the EFA line rate. The Neuron guide's own
# 2 x trn1.32xlarge all-reduce peaks at 47.09 GB/s busbw, about 51% of 800 Gbps.
DEFAULT_MIN_FRACTION = 0.4
GIB = 1024**3

# The program every node runs (python3 -c), and the markers it frames its output with. Where no launch across
# hosts is verified (Batch, EKS: nccom-test's multi-host runs go through MPI, which may need ssh between the
# nodes; the containers run none), each node measures its own all-reduce, and the check says that EFA between
# the hosts was not measured.
PROGRAM = node.source("fabric_check.py")


def fabric_command(spec: InstanceSpec, *, multi_host: bool = True) -> list[str]:
    """The program every node of the fabric job runs (after the launcher). ``multi_host``: node 0's nccom-test
    drives every host (Slurm nodes run sshd); else each node measures its own NeuronCores (Batch, EKS)."""
    sizes = ["-b", MIN_BYTES, "-e", MAX_BYTES, "-f", str(STEP_FACTOR)]
    mode = MULTI_HOST if multi_host else SINGLE_HOST
    return ["python3", "-c", PROGRAM, str(spec.neuron_devices), str(spec.neuron_cores), str(ROOT_COMM_PORT), mode,
            *sizes]


@dataclass(frozen=True)
class Row:
    size: int
    busbw_gib_s: float

    @property
    def gbps(self) -> float:
        """nccom-test's GB/s are GiB/s (its guide): in gigabits per second, as EFA line rates are given."""
        return self.busbw_gib_s * GIB * 8 / 1e9


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*$")


def parse_report(text: str) -> list[Row]:
    """The rows of an nccom-test report (size and bus bandwidth); failed sizes have no row."""
    if REPORT_BEGIN in text:
        text = text.split(REPORT_BEGIN, 1)[1].split(REPORT_END, 1)[0]
    return [Row(int(m.group(1)), float(m.group(6))) for line in text.splitlines() if (m := _ROW.match(line))]


def node_reports(text: str) -> dict[int, list[Row]] | None:
    """A single-host check's rows per node, or None for a multi-host report."""
    if SINGLE_HOST_NOTE not in text:
        return None
    found = {}
    for match in re.finditer(rf"{re.escape(NODE_REPORT)} (\d+) begins\n(.*?){re.escape(NODE_REPORT)} \1 ends", text, re.S):
        found[int(match.group(1))] = parse_report(match.group(2))
    return found


def single_host_verdict(reports: dict[int, list[Row]], spec: InstanceSpec) -> tuple[str, list[str]]:
    """PARTIAL when every node measured its own all-reduce (EFA between hosts not measured), else FAIL."""
    lines = [SINGLE_HOST_NOTE.removeprefix("trainium-fabric: ")]
    for node, rows in sorted(reports.items()):
        if rows:
            best = max(rows, key=lambda r: r.gbps)
            lines.append(f"node {node}: best bus bandwidth {best.gbps:.0f} Gbps at {best.size} B over its "
                         f"{spec.neuron_cores} NeuronCores")
        else:
            lines.append(f"node {node}: nccom-test reported no bandwidth")
    if not reports or any(not rows for rows in reports.values()):
        return "FAIL", [*lines, "FAIL: a node's all-reduce failed (see the job's log)"]
    return "PARTIAL", [*lines, f"PARTIAL: {len(reports)} nodes passed on their own; for EFA between hosts, run the "
                       "fabric check on ParallelCluster or watch a multi-node job's throughput"]


def verdict(rows: list[Row], spec: InstanceSpec, *, min_fraction: float = DEFAULT_MIN_FRACTION) -> tuple[str, list[str]]:
    """PASS, WARN (below the fraction) or FAIL (no result), and the lines to print."""
    line_rate = spec.network_gbps
    lines = [f"{'size(B)':>12}  {'busbw(Gbps)':>12}  {'of ' + str(line_rate) + ' Gbps EFA':>18}"]
    lines += [f"{r.size:>12}  {r.gbps:>12.1f}  {r.gbps / line_rate:>18.0%}" for r in rows]
    if not rows:
        return "FAIL", [*lines, "FAIL: nccom-test reported no bandwidth (see the job's log)"]
    best = max(rows, key=lambda r: r.gbps)
    result = "PASS" if best.gbps >= min_fraction * line_rate else "WARN"
    lines.append(
        f"{result}: best bus bandwidth {best.gbps:.0f} Gbps at {best.size} B = {best.gbps / line_rate:.0%} of the "
        f"{spec.name} EFA line rate ({line_rate} Gbps); threshold {min_fraction:.0%}"
    )
    return result, lines
