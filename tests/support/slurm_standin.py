"""Slurm's commands on a head node stand-in (``python -m tests.support.slurm_standin TOOL ...``), and the cluster that runs
what they queue.

``sbatch`` queues the job in a spool folder (``$HARNESS_SLURM_SPOOL``) and prints its id as Slurm does
(``--parsable``: the id alone); :func:`run_spooled` then runs each queued batch script through the launch
rehearsal, which writes the job's output file where Slurm would (``#SBATCH --output``, in the submission's
working directory) and the script its own exit record. ``squeue``, ``scontrol show job -o`` and ``scancel`` answer
from the spool as Slurm would for the options `trn` and the README use; ``sinfo`` lists the partitions of the
deployed cluster configuration. Anything else exits 2 naming what is missing.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

FIRST_JOB_ID = 101
# What sbatch passes on of the submitter's environment that the harness keeps (sbatch's --export=ALL passes all).
KEPT_ENVIRONMENT = ("PRECOMPILE", "TRN_JOB_ENV")


def _spool() -> Path:
    return Path(os.environ["HARNESS_SLURM_SPOOL"])


def _jobs(spool: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(spool.glob("job-*.json"))]


def _directive(name: str, text: str) -> str:
    found = re.search(rf"^#SBATCH --{name}=(\S+)", text, re.M)
    assert found, f"no #SBATCH --{name} in the batch script"
    return found.group(1)


def _state(spool: Path, job: dict[str, Any]) -> tuple[str, str]:
    """(Slurm state, exit code) of a spooled job."""
    if (spool / f"cancelled-{job['id']}").exists():
        return "CANCELLED", "0:15"
    done = spool / f"done-{job['id']}"
    if done.exists():
        code = done.read_text().strip() or "0"
        return ("COMPLETED" if code == "0" else "FAILED"), f"{code}:0"
    return "PENDING", "0:0"


def sbatch(args: list[str]) -> int:
    parsable, nodes, name, account = False, None, None, None
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "--parsable":
            parsable = True
        elif option in ("-N", "--nodes"):
            nodes = int(rest.pop(0))
        elif option.startswith("--nodes="):
            nodes = int(option.split("=", 1)[1])
        elif option.startswith("-N"):
            nodes = int(option[2:])
        elif option.startswith("--job-name="):
            name = option.split("=", 1)[1]
        elif option.startswith("--account="):
            account = option.split("=", 1)[1]
        else:
            print(f"sbatch stand-in: option {option} is not one trn or the README uses", file=sys.stderr)
            return 2
    if not rest:
        print("sbatch: error: no batch script", file=sys.stderr)
        return 1
    script = Path(rest[0]).expanduser()
    if not script.is_file():
        print(f"sbatch: error: Unable to open file {rest[0]}", file=sys.stderr)
        return 1
    text = script.read_text()
    spool = _spool()
    job_id = FIRST_JOB_ID + len(list(spool.glob("job-*.json")))
    (spool / f"job-{job_id}.json").write_text(json.dumps({
        "id": job_id, "script": str(script.resolve()), "args": rest[1:], "cwd": os.getcwd(),
        "nodes": nodes or int(_directive("nodes", text)), "name": name or _directive("job-name", text),
        "partition": _directive("partition", text), "account": account,
        "env": {k: v for k, v in os.environ.items() if k in KEPT_ENVIRONMENT},
    }))
    print(job_id if parsable else f"Submitted batch job {job_id}")
    return 0


def squeue(args: list[str]) -> int:
    partition, fmt, header = None, None, True
    rest = list(args)
    while rest:
        option = rest.pop(0)
        if option == "-h":
            header = False
        elif option == "-p":
            partition = rest.pop(0)
        elif option == "-o":
            fmt = rest.pop(0)
        else:
            print(f"squeue stand-in: option {option} is not one trn or the README uses", file=sys.stderr)
            return 2
    spool = _spool()
    queued = [j for j in _jobs(spool) if _state(spool, j)[0] == "PENDING" and partition in (None, j["partition"])]
    if fmt is None:
        if header:
            print("JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)")
        for job in queued:
            print(f"{job['id']:>5} {job['partition']:>9} {job['name'][:8]} ubuntu CF       0:01      {job['nodes']} (Resources)")
        return 0
    fields = {"%i": "id", "%j": "name", "%T": None, "%D": "nodes", "%V": None}
    for job in queued:
        line = fmt
        for code, key in fields.items():
            value = "PENDING" if code == "%T" else "2026-11-26T10:00:00" if code == "%V" else str(job[key])
            line = line.replace(code, value)
        print(line)
    return 0


def scontrol(args: list[str]) -> int:
    if args[:3] != ["show", "job", "-o"] or len(args) != 4:
        print(f"scontrol stand-in: `scontrol {' '.join(args)}` is not one trn uses", file=sys.stderr)
        return 2
    spool = _spool()
    for job in _jobs(spool):
        if str(job["id"]) == args[3] and not (spool / f"forgotten-{job['id']}").exists():
            state, code = _state(spool, job)
            reason = "Resources" if state == "PENDING" else "None"
            print(f"JobId={job['id']} JobName={job['name']} UserId=ubuntu(1000) JobState={state} Reason={reason} "
                  f"Partition={job['partition']} NumNodes={job['nodes']} ExitCode={code} "
                  f"StdOut={job['cwd']}/{job['name']}-{job['id']}.out")
            return 0
    print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
    return 1


def scancel(args: list[str]) -> int:
    spool = _spool()
    for job in _jobs(spool):
        if [str(job["id"])] == args:
            if _state(spool, job)[0] == "PENDING":
                (spool / f"cancelled-{job['id']}").touch()
            return 0
    print(f"scancel: error: Kill job error on job id {' '.join(args)}: Invalid job id specified", file=sys.stderr)
    return 1


def sinfo(args: list[str]) -> int:
    partitions = json.loads((_spool() / "partitions.json").read_text())
    print("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST")
    for index, (name, max_count, nodes) in enumerate(partitions):
        default = "*" if index == 0 else ""
        print(f"{name}{default:<9} up   infinite {max_count:>6}  idle~ {nodes}")
    return 0


def run_spooled(spool: Path, stage: Any) -> list[dict[str, Any]]:
    """Every queued job, through the launch rehearsal: its batch script with sbatch's arguments and the
    submitter's environment, its output where ``#SBATCH --output`` says. Returns what ran."""
    from tests.support.rehearsal import run_slurm_script

    ran = []
    for job in _jobs(spool):
        if _state(spool, job)[0] != "PENDING":
            continue
        script = Path(job["script"]).read_text()
        results = run_slurm_script(
            stage, script, job["nodes"], *job["args"], env=job["env"], cwd=Path(job["cwd"]), job_id=str(job["id"]),
            job_name=job["name"], partition=job["partition"],
        )
        output = Path(job["cwd"]) / _directive("output", script).replace("%x", job["name"]).replace("%j", str(job["id"]))
        output.write_text(results[0].output)
        (spool / f"done-{job['id']}").write_text(str(results[0].code))
        ran.append({"job": job, "results": results})
    return ran


def main(argv: list[str]) -> int:
    tools = {"sbatch": sbatch, "squeue": squeue, "sinfo": sinfo, "scontrol": scontrol, "scancel": scancel}
    return tools[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
