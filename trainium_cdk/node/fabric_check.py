"""trainium-cdk fabric check, on every node of the job (after the launcher, under torchrun, one process per
node): count this node's Neuron devices (neuron-ls), gather every node's address and count over gloo, then
run nccom-test's all-reduce, across the hosts from node 0 (multi-host) or on each node alone (single-host).

    python3 fabric_check.py EXPECTED_DEVICES CORES ROOT_COMM_PORT MODE NCCOM_TEST_SIZE_FLAGS...

The markers below frame what trainium_cdk/fabric.py reads back from the job's log (it imports them).
"""

import json
import os
import subprocess
import sys

MULTI_HOST, SINGLE_HOST = "multi-host", "single-host"
SINGLE_HOST_NOTE = (
    "trainium-fabric: single-host: each node's all-reduce over its own NeuronCores; EFA between the hosts is "
    "not measured here (nccom-test's multi-host launch needs MPI, and maybe ssh, between the nodes)"
)
NODE_REPORT = "trainium-fabric: node report"
REPORT_BEGIN = "trainium-fabric: nccom-test report begins"
REPORT_END = "trainium-fabric: nccom-test report ends"


def main(argv):
    import torch.distributed as dist

    expected, cores, port, mode = int(argv[0]), int(argv[1]), argv[2], argv[3]
    sizes = argv[4:]
    rank, nodes = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        listing = subprocess.run(["neuron-ls", "--json-output"], capture_output=True, text=True, check=True).stdout
        found = len(json.loads(listing))
    except Exception as error:
        print(f"trainium-fabric: node {rank}: neuron-ls failed: {error}", flush=True)
        found = 0
    address = next(a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
                   if not a.startswith("169.254.") and ":" not in a)
    print(f"trainium-fabric: node {rank} ({address}): {found} of {expected} Neuron devices", flush=True)
    dist.init_process_group("gloo")
    nodes_seen = [None] * nodes
    dist.all_gather_object(nodes_seen, (address, found))
    code = 0
    short = [f"node {i} ({a}): {f}" for i, (a, f) in enumerate(nodes_seen) if f != expected]
    if short:
        if rank == 0:
            print("trainium-fabric: FAIL devices: " + "; ".join(short), flush=True)
        code = 1
    elif mode == SINGLE_HOST:
        # Each node's own all-reduce over its NeuronCores: no launch across hosts, so no MPI or ssh between them.
        run = subprocess.run(["nccom-test", "-r", str(cores), "-N", "1", *sizes, "-d", "fp32", "allr"],
                             capture_output=True, text=True)
        reports = [None] * nodes
        dist.all_gather_object(reports, (run.returncode, run.stdout))
        if rank == 0:
            print(SINGLE_HOST_NOTE, flush=True)
            for i, (returncode, text) in enumerate(reports):
                print(f"{NODE_REPORT} {i} begins\n{text}{NODE_REPORT} {i} ends", flush=True)
            code = max(returncode for returncode, _ in reports)
    else:
        if rank == 0:
            hosts = [a for a, _ in nodes_seen]
            env = dict(os.environ, NEURON_RT_ROOT_COMM_ID=f"{hosts[0]}:{port}")
            argv = ["nccom-test", "-r", str(cores * nodes), "-N", str(nodes), *sizes, "-d", "fp32", "allr",
                    "--hosts", *hosts]
            print("trainium-fabric: " + " ".join(argv), flush=True)
            run = subprocess.run(argv, env=env, capture_output=True, text=True)
            print(f"{REPORT_BEGIN}\n{run.stdout}{REPORT_END}", flush=True)
            code = run.returncode
    dist.barrier()
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
