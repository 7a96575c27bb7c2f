"""The fabric check: every node's Neuron devices (``neuron-ls``), then bus bandwidth across the nodes for
all-reduce, all-gather and reduce-scatter in bf16, each set against the instance type's reference figure
(the catalog's :func:`~trainium_cdk.facts.catalog.fabric_reference`: a published Neuron number, else the EFA line rate).

The job runs the project's launcher like any training job: the launcher derives node rank, count and the
rendezvous address from the scheduler, torchrun starts :data:`PROGRAM` (``trainium_cdk/node/fabric_check.py``).
On EKS and Batch one process per NeuronCore measures the collectives over the job's process group (no ssh);
on Slurm node 0 runs nccom-test across the hosts (``--hosts``, as the Neuron nccom-test guide describes
multi-instance runs). Here: the command, and the verdict read back from the job's log. Pure Python: no CDK, no AWS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainium_cdk import node
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import FabricReference, InstanceSpec, fabric_reference
from trainium_cdk.node.fabric_check import (
    BETWEEN_HOSTS,
    DATATYPE,
    DEFAULT_SIZES,
    MULTI_HOST,
    OPERATIONS,
    REPORT,
    SIZES_VARIABLE,
)

# nccom-test's bootstrap port on node 0 (NEURON_RT_ROOT_COMM_ID=<address>:<port>).
ROOT_COMM_PORT = 45654
GIB = 1024**3
OPERATION_NAMES = {"allr": "all-reduce", "allg": "all-gather", "redsct": "reduce-scatter"}

# The program every node runs (python3 -c), and the variables of its job: the size sweep, and on EKS and Batch
# the TorchNeuron device and process group (the launch rehearsal gives the CPU's and gloo instead).
PROGRAM = node.source("fabric_check.py")
FABRIC_SIZES = {SIZES_VARIABLE: DEFAULT_SIZES}


def check_applies(spec: InstanceSpec) -> None:
    """A type without EFA has no fabric between hosts to measure."""
    if not spec.has_efa:
        raise ConfigError("instance_type", spec.name, "a type with EFA: the fabric check measures EFA between hosts, "
                          f"and {spec.name} has none (its nodes talk over ENA at {spec.network_gbps} Gbps)")


def fabric_command(spec: InstanceSpec, *, multi_host: bool = True) -> list[str]:
    """The program every node of the fabric job runs (after the launcher). ``multi_host``: node 0's nccom-test
    drives every host, one process per node (Slurm nodes run sshd); else one process per NeuronCore measures
    over torch.distributed (Batch, EKS)."""
    if multi_host:
        return ["python3", "-c", PROGRAM, MULTI_HOST, str(spec.neuron_devices), str(spec.neuron_cores),
                str(ROOT_COMM_PORT)]
    return ["python3", "-c", PROGRAM, BETWEEN_HOSTS, str(spec.neuron_devices)]


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
    """The rows of one nccom-test table (size and bus bandwidth); failed sizes have no row."""
    return [Row(int(m.group(1)), float(m.group(6))) for line in text.splitlines() if (m := _ROW.match(line))]


def parse_reports(text: str) -> dict[str, list[Row]]:
    """Each operation's rows from a fabric job's log; an operation without a report has none."""
    found: dict[str, list[Row]] = {op: [] for op in OPERATIONS}
    for match in re.finditer(rf"{re.escape(REPORT)} (\w+) begins\n(.*?){re.escape(REPORT)} \1 ends", text, re.S):
        found[match.group(1)] = parse_report(match.group(2))
    return found


def verdict(reports: dict[str, list[Row]], spec: InstanceSpec, *,
            min_fraction: float | None = None) -> tuple[str, list[str]]:
    """PASS when every operation's best bus bandwidth reaches the pass line, else FAIL; the lines to print."""
    reference = fabric_reference(spec)
    fraction = min_fraction if min_fraction is not None else reference.fraction
    line = fraction * reference.busbw_gib_s
    lines = [f"reference: {describe(reference)}",
             f"pass line: {fraction:.0%} of {reference.busbw_gib_s:.2f} GB/s = {line:.2f} GB/s bus bandwidth"
             f"{' (provisional)' if reference.provisional and min_fraction is None else ''}"]
    if reference.provisional:
        lines.append(f"provisional: Neuron publishes no bus bandwidth between {spec.name} hosts; the pass line is a "
                     "guess until a known-good pair's measurement is recorded with its date in FABRIC_REFERENCES "
                     "(trainium_cdk/facts/catalog.py); --min-fraction sets another")
    failed = []
    for op in OPERATIONS:
        rows = reports.get(op, [])
        lines.append(f"{OPERATION_NAMES[op]} ({DATATYPE}):  {'size(B)':>12}  {'busbw(GB/s)':>12}  {'busbw(Gbps)':>12}")
        lines += [f"{'':>{len(OPERATION_NAMES[op]) + 9}}{r.size:>12}  {r.busbw_gib_s:>12.2f}  {r.gbps:>12.1f}"
                  for r in rows]
        if not rows:
            failed.append(f"{OPERATION_NAMES[op]} reported no bandwidth (see the job's log)")
            continue
        best = max(rows, key=lambda r: r.busbw_gib_s)
        if best.busbw_gib_s < line:
            failed.append(f"{OPERATION_NAMES[op]} best {best.busbw_gib_s:.2f} GB/s at {best.size} B is "
                          f"{best.busbw_gib_s / reference.busbw_gib_s:.0%} of the reference")
    if failed:
        return "FAIL", [*lines, "FAIL: " + "; ".join(failed)]
    return "PASS", [*lines, f"PASS: all-reduce, all-gather and reduce-scatter at or above {line:.2f} GB/s "
                    f"({fraction:.0%} of the {spec.name} reference)"]


def describe(reference: FabricReference) -> str:
    return f"{reference.busbw_gib_s:.2f} GB/s ({reference.busbw_gib_s * GIB * 8 / 1e9:.0f} Gbps): {reference.source}"
