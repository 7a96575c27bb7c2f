"""trainium-cdk fabric check, on every node of the job (after the launcher, under torchrun): count this node's
Neuron devices (neuron-ls), then measure bus bandwidth across the nodes for all-reduce, all-gather and
reduce-scatter in bf16 over a sweep of sizes.

    python3 fabric_check.py between-hosts EXPECTED_DEVICES       (EKS, Batch: one process per NeuronCore)
    python3 fabric_check.py multi-host EXPECTED_DEVICES CORES ROOT_COMM_PORT   (Slurm: one process per node)

between-hosts: torch.distributed over the job's process group (TRN_DIST_BACKEND, TorchNeuron's ``neuron``;
TRN_TORCH_DEVICE its device), every NeuronCore of every node in one group, so each collective crosses EFA
between the hosts. No ssh, no MPI: torchrun's rendezvous, as a training job starts. (nccom-test cannot run
here: its multi-node modes start workers through MPI, which may need ssh between hosts, or srun; Neuron
nccom-test guide, "MPI Execution" and "Slurm Execution".)
multi-host: node 0's nccom-test drives every host itself (``--hosts``, NEURON_RT_ROOT_COMM_ID), the nodes run sshd.

Both print nccom-test's table (its columns; GB/s are GiB/s, bus bandwidth by its factors: Neuron nccom-test
guide, "Bus Bandwidth Calculation"), one framed report per operation, which trainium_cdk/runtime/fabric.py reads back
from the job's log (it imports the markers below). TRN_FABRIC_SIZES: MIN:MAX:FACTOR in bytes.
"""

import json
import os
import subprocess
import sys
import time

MULTI_HOST, BETWEEN_HOSTS = "multi-host", "between-hosts"
# nccom-test's names of the operations; the torch program measures the same three.
OPERATIONS = ("allr", "allg", "redsct")
DATATYPE = "bf16"
SIZES_VARIABLE = "TRN_FABRIC_SIZES"
DEFAULT_SIZES = "1048576:1073741824:32"  # 1 MiB, 32 MiB, 1 GiB: latency-bound, middle, bandwidth-bound
WARMUP, ITERATIONS = 5, 20  # nccom-test's defaults (-w 5, -n 20)
REPORT = "trainium-fabric: report"  # "<REPORT> <op> begins" ... "<REPORT> <op> ends"
HEADER = ("       size(B)    count(elems)    type    time(us)    algbw(GB/s)    busbw(GB/s)")
GIB = 1024**3


def sizes():
    low, high, factor = (int(n) for n in os.environ.get(SIZES_VARIABLE, DEFAULT_SIZES).split(":"))
    found = []
    while low <= high:
        found.append(low)
        low *= factor
    return found


def bus_factor(op, ranks):
    """nccom-test's bus bandwidth factor: all-reduce 2(r-1)/r, all-gather and reduce-scatter (r-1)/r."""
    return (2 if op == "allr" else 1) * (ranks - 1) / ranks


def row(size, count, seconds, ranks, op):
    algbw = size / seconds / GIB
    return (f"{size:>14}{count:>16}{DATATYPE:>8}{seconds * 1e6:>12.0f}{algbw:>15.2f}"
            f"{algbw * bus_factor(op, ranks):>15.2f}")


def framed(op, text):
    return f"{REPORT} {op} begins\n{text.rstrip()}\n{REPORT} {op} ends"


def device_count():
    try:
        listing = subprocess.run(["neuron-ls", "--json-output"], capture_output=True, text=True, check=True).stdout
        return len(json.loads(listing))
    except Exception as error:
        print(f"trainium-fabric: neuron-ls failed: {error}", flush=True)
        return 0


def own_address():
    return next(a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
                if not a.startswith("169.254.") and ":" not in a)


def check_devices(dist, group, rank, nodes, expected, local):
    """Every node's address and device count (its local rank 0 asks neuron-ls), gathered over ``group``; False
    (and node 0 says which) when a node is short."""
    mine = (own_address(), device_count()) if local else None
    if local:
        print(f"trainium-fabric: node {os.environ.get('GROUP_RANK', '?')} ({mine[0]}): {mine[1]} of {expected} "
              "Neuron devices", flush=True)
    seen = [None] * nodes
    dist.all_gather_object(seen, mine, group=group)
    found = [s for s in seen if s is not None]
    short = [f"node {i} ({a}): {f}" for i, (a, f) in enumerate(found) if f != expected]
    if rank == 0:
        print("trainium-fabric: FAIL devices: " + "; ".join(short) if short else
              f"trainium-fabric: every node: {expected} of {expected} Neuron devices ({len(found)} nodes)", flush=True)
    return not short, [a for a, _ in found]


def between_hosts(expected):
    """One process per NeuronCore on every node: the three collectives over the job's process group."""
    import torch
    import torch.distributed as dist

    device = torch.device(os.environ.get("TRN_TORCH_DEVICE", "cpu"))
    if device.type == "neuron":
        try:
            import torch_neuronx  # noqa: F401  (registers the neuron device and process group backend)
        except ImportError:
            # The XLA track's images have no native device; XLA's lazy collectives compile a graph per size.
            print("trainium-fabric: FAIL this image has no TorchNeuron (torch_neuronx with the neuron device): "
                  "run the check with the native track's image (--image)", flush=True)
            return 1
    dist.init_process_group(os.environ.get("TRN_DIST_BACKEND", "gloo"))
    rank, ranks, local = dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0"))
    # Objects (addresses, counts, timings) go over gloo on the host: the device's backend moves tensors only.
    cpu = dist.new_group(backend="gloo")
    ok, _ = check_devices(dist, cpu, rank, ranks, expected, local == 0)
    if not ok:
        dist.destroy_process_group()
        return 1
    module = getattr(torch, device.type, None)

    def synchronize(tensor):
        # Eager collectives on a device return before the data moved: wait for them, then time.
        if hasattr(module, "synchronize"):
            module.synchronize()
        elif device.type != "cpu":
            tensor.cpu()

    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    for op in OPERATIONS:
        lines = [HEADER]
        for size in sizes():
            count = (size // 2) // ranks * ranks  # bf16: 2 bytes; a whole chunk per rank
            if count == 0:
                continue
            full = torch.ones(count, dtype=torch.bfloat16, device=device)
            part = torch.ones(count // ranks, dtype=torch.bfloat16, device=device)
            run = {"allr": lambda full=full: dist.all_reduce(full), "allg": lambda full=full, part=part: gather(full, part),
                   "redsct": lambda full=full, part=part: scatter(part, full)}[op]
            for _ in range(WARMUP):
                run()
            synchronize(full)
            dist.barrier(group=cpu)
            start = time.perf_counter()
            for _ in range(ITERATIONS):
                run()
            synchronize(full)
            elapsed = torch.tensor([(time.perf_counter() - start) / ITERATIONS], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=cpu)  # the slowest rank's time is the op's
            lines.append(row(count * 2, count, elapsed.item(), ranks, op))
        if rank == 0:
            print(framed(op, "\n".join(lines)), flush=True)
    dist.barrier(group=cpu)
    dist.destroy_process_group()
    return 0


def multi_host(expected, cores, port):
    """One process per node: node 0's nccom-test drives every host (MPI over the nodes' sshd)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, nodes = dist.get_rank(), dist.get_world_size()
    ok, hosts = check_devices(dist, None, rank, nodes, expected, True)
    code = 0 if ok else 1
    if ok and rank == 0:
        env = dict(os.environ, NEURON_RT_ROOT_COMM_ID=f"{hosts[0]}:{port}")
        low, high, factor = os.environ.get(SIZES_VARIABLE, DEFAULT_SIZES).split(":")
        for op in OPERATIONS:
            argv = ["nccom-test", "-r", str(cores * nodes), "-N", str(nodes), "-b", low, "-e", high, "-f", factor,
                    "-d", DATATYPE, op, "--hosts", *hosts]
            print("trainium-fabric: " + " ".join(argv), flush=True)
            run = subprocess.run(argv, env=env, capture_output=True, text=True)
            print(framed(op, run.stdout), flush=True)
            code = max(code, run.returncode)
    dist.barrier()
    dist.destroy_process_group()
    return code


def main(argv):
    mode, expected = argv[0], int(argv[1])
    if mode == BETWEEN_HOSTS:
        return between_hosts(expected)
    return multi_host(expected, int(argv[2]), argv[3])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
