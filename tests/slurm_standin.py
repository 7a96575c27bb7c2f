"""`sbatch`, `squeue` and `sinfo` on the README walkthroughs' Slurm head node (``python -m tests.slurm_standin``).

``sbatch`` queues the job in a spool folder (``$HARNESS_SLURM_SPOOL``) and prints its id as Slurm does
(``--parsable``: the id alone); the harness then runs the batch script through the launch rehearsal
(tests/readme_exemptions.py), which writes the job's output file where Slurm would (``#SBATCH --output``,
in the submission's working directory). ``squeue`` lists the jobs not yet run, ``sinfo`` the partitions of
the deployed cluster configuration. Anything else exits 2 naming what is missing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FIRST_JOB_ID = 101


def _spool() -> Path:
    return Path(os.environ["HARNESS_SLURM_SPOOL"])


def sbatch(args: list[str]) -> int:
    parsable, nodes = False, None
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
        else:
            print(f"sbatch stand-in: option {option} is not one the README uses", file=sys.stderr)
            return 2
    if not rest:
        print("sbatch: error: no batch script", file=sys.stderr)
        return 1
    script = Path(rest[0]).expanduser()
    if not script.is_file():
        print(f"sbatch: error: Unable to open file {rest[0]}", file=sys.stderr)
        return 1
    spool = _spool()
    job_id = FIRST_JOB_ID + len(list(spool.glob("job-*.json")))
    (spool / f"job-{job_id}.json").write_text(json.dumps({
        "id": job_id, "script": str(script.resolve()), "args": rest[1:], "nodes": nodes, "cwd": os.getcwd(),
        "env": {k: v for k, v in os.environ.items() if k in ("PRECOMPILE",)},
    }))
    print(job_id if parsable else f"Submitted batch job {job_id}")
    return 0


def squeue(args: list[str]) -> int:
    print("JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)")
    for path in sorted(_spool().glob("job-*.json")):
        job = json.loads(path.read_text())
        if not (_spool() / f"done-{job['id']}").exists():
            print(f"{job['id']:>5} {'train':>9} trainium ubuntu CF       0:01      {job['nodes'] or '?'} (Resources)")
    return 0


def sinfo(args: list[str]) -> int:
    partitions = json.loads((_spool() / "partitions.json").read_text())
    print("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST")
    for index, (name, max_count, nodes) in enumerate(partitions):
        default = "*" if index == 0 else ""
        print(f"{name}{default:<9} up   infinite {max_count:>6}  idle~ {nodes}")
    return 0


def main(argv: list[str]) -> int:
    tools = {"sbatch": sbatch, "squeue": squeue, "sinfo": sinfo}
    return tools[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
