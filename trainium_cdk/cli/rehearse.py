"""`trn rehearse`: your job, as a backend would run it, on this machine's CPU before you pay for Trainium.

The same artefact `trn submit` sends (the EKS job chart's objects, the Batch job definition's container with
the submit's overrides, the Slurm batch script with sbatch's arguments and environment, the development
instance's run script) runs as N nodes x P processes on loopback through the launch rehearsal
(:mod:`trainium_cdk.rehearsal`), with the CPU build of torch (gloo) in place of Neuron. What differs from a
node is substituted, and printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import CliError
from trainium_cdk.cli.jobs import (
    _common,
    add_job_arguments,
    add_skip_fit_argument,
    check_fit,
    group_of,
    load,
    on_batch_cpu_queue,
    user_job,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import REHEARSAL_FSX, SHARED_MOUNT
from trainium_cdk.rehearsal import PROCESSES_PER_NODE, TIMEOUT_S, NodeResult, Stage
from trainium_cdk.rehearsal.seed import on_fsx, seed
from trainium_cdk.rehearsal.stage import CPU_FOR_NEURON, EXAMPLE_DIR, IMAGE_EXAMPLE_DIR

DEFAULT_NODES = 2
DEFAULT_FSX = Path(REHEARSAL_FSX)
JOB_NAME = "rehearsal"
SLURM_JOB_ID = "42"
# What an image would be: the rehearsal runs this Python instead (the EKS chart needs a name to render).
IMAGE_STAND_IN = "rehearsal.invalid/this-machine:python"
TORCH_HOW_TO = (
    "trn rehearse runs your job on this machine's CPU with PyTorch, which is not installed in the Python trn runs "
    f"in ({sys.executable}): `{sys.executable} -m pip install torch==2.13.0` (or any CPU build: "
    "`pip install torch --index-url https://download.pytorch.org/whl/cpu`)"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rehearse", help="run a job as a backend would, on this machine's CPU (N nodes x P processes on loopback)",
        description="Run your job (a command after --, or --job) exactly as the chosen backend would launch it: the "
        "same launcher, environment and argv, N nodes x P processes on loopback, with the CPU build of torch "
        "(gloo) for Neuron and a local folder for /fsx. Prints what was substituted and where outputs went.",
    )
    add_job_arguments(p)
    add_skip_fit_argument(p)
    p.add_argument("--procs-per-node", type=int, default=PROCESSES_PER_NODE, metavar="P",
                   help=f"processes per node, for the NeuronCores (default {PROCESSES_PER_NODE})")
    p.add_argument("--code", metavar="DIR",
                   help="where your code is, standing for the job's working directory on the nodes (the image's "
                   "WORKDIR, or --workdir): the command runs there (default: the current directory)")
    p.add_argument("--fsx", metavar="DIR", help=f"the folder that stands for /fsx (default ./{DEFAULT_FSX})")
    p.add_argument("--data", action="append", default=[], metavar="LOCAL_DIR=/fsx/PATH",
                   help="copy LOCAL_DIR to /fsx/PATH of the stand-in first (new and changed files; repeatable): "
                   "the data your job reads there on the cluster (`trn sync` uploads it)")
    p.add_argument("--image", metavar="URI", help="EKS: the image named in the manifest (the rehearsal runs this Python)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="SECONDS",
                   help=f"stop every node after this long (default {TIMEOUT_S:.0f})")
    _common(p)
    p.set_defaults(func=rehearse)


def _nodes(config: Config, args: argparse.Namespace, backend: str) -> int | None:
    """--nodes, else 2 where the group can run 2 (a type with EFA), else 1 (the development instance: 1); a
    workload's own count stays."""
    if args.nodes is not None or args.job is not None:
        return args.nodes
    if backend == "instance":
        return 1
    group = next((g for g in config.compute_groups if g.name == args.group), config.compute_groups[0])
    return DEFAULT_NODES if config.spec(group).has_efa and group.maximum >= DEFAULT_NODES else 1


def _check_torch() -> None:
    if importlib.util.find_spec("torch") is None or not (Path(sys.executable).parent / "torchrun").exists():
        raise CliError(TORCH_HOW_TO)


def rehearse(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config, backend = load(args)
    spec = (config.catalog.get(config.instance.instance_type) if backend == "instance"
            else config.spec(group_of(config, args.group)))
    if not 1 <= args.procs_per_node <= spec.neuron_cores:
        raise ConfigError("--procs-per-node", args.procs_per_node,
                          f"1 to {spec.neuron_cores}: the processes stand for the NeuronCores of a {spec.name} node")
    if not args.timeout > 0:  # 0 stopped every node at once, a negative one never
        raise ConfigError("--timeout", args.timeout, "more than 0 seconds")
    if args.fsx and Path(args.fsx).exists() and not Path(args.fsx).is_dir():
        raise ConfigError("--fsx", args.fsx, "a directory (it stands for /fsx), not a file")
    args.nodes = _nodes(config, args, backend)
    args.name = JOB_NAME
    args.dry_run = False
    check_fit(args, config, user_job(args, config), backend, err)  # every argument checked before anything runs
    _check_torch()
    cwd = Path(args.code).resolve() if args.code else Path.cwd()
    if not cwd.is_dir():
        raise ConfigError("--code", args.code, "a directory of your code")
    fsx = Path(args.fsx) if args.fsx else DEFAULT_FSX
    data = [_data(value, fsx) for value in args.data]
    fsx.mkdir(parents=True, exist_ok=True)
    for (local, path, there) in data:
        copied, unchanged = seed(local, there)
        err.write(f"trn rehearse: {local} -> {path} ({there}): {copied} copied, {unchanged} unchanged\n")
    _check_script(user_job(args, config).program, cwd=cwd, fsx=fsx)
    with tempfile.TemporaryDirectory(prefix="trn-rehearse-") as root:
        stage = Stage(Path(root), fsx=fsx.resolve(), workdir=cwd, processes_per_node=args.procs_per_node)
        run = RUNNERS[backend]
        started = time.monotonic()
        label, results = run(args, config, stage, cwd)
        took = time.monotonic() - started
        # A failed node's output last, next to the summary: the lines that say why (a terminal or a log's tail).
        for result in sorted(results, key=lambda r: r.code != 0):
            out.write(result.output if result.output.endswith("\n") or not result.output else result.output + "\n")
        _report(label, results, stage, took=took, backend=backend, out=out)
        shutil.rmtree(Path(root) / "bin", ignore_errors=True)
    return 0 if all(r.code == 0 for r in results) else 1


def _data(value: str, fsx: Path) -> tuple[Path, str, Path]:
    """--data LOCAL_DIR=/fsx/PATH: the folder, the /fsx path and where that is on the stand-in."""
    local, eq, path = value.rpartition("=")
    if not eq or not local or not Path(local).is_dir():
        raise ConfigError("--data", value, "LOCAL_DIR=/fsx/PATH, LOCAL_DIR a directory here")
    return Path(local), path, on_fsx(fsx, path, field="--data")


def _check_script(program: tuple[str, ...], *, cwd: Path, fsx: Path) -> None:
    """Your script, where the rehearsal's nodes will look for it: in your code's folder, or on the stand-in /fsx. One
    line when it is not there (torchrun would print a traceback per rank). A path in an image is not checked."""
    script = next((word for word in program if word.endswith(".py")), None)
    if script is None or (script.startswith("/") and not script.startswith(f"{SHARED_MOUNT}/")):
        return
    here = fsx / script.removeprefix(f"{SHARED_MOUNT}/") if script.startswith("/") else cwd / script
    if not here.is_file():
        where = f"{fsx} stands for {SHARED_MOUNT}" if script.startswith("/") else f"the job starts in {cwd}"
        raise ConfigError("-- SCRIPT", script, f"a script that exists here: {here} does not ({where})")


# torchrun's failure table: the first rank that failed and its exit code ("Root Cause (first observed failure)").
# (On Slurm each line carries srun's task label, "1: ".)
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\n.*?\n(?:\d+: )?\s+rank\s+: (\d+).*?\n(?:\d+: )?\s+"
                         r"exitcode\s+: (-?\d+)", re.S)


def describe(result: NodeResult) -> str:
    """A node's end in the summary: its exit code, the rank whose failure torchrun reports (torchrun itself exits 1),
    or what stopped it."""
    if result.stopped:
        return f"node {result.rank} stopped by {result.stopped}"
    cause = _ROOT_CAUSE.search(result.output) if result.code else None
    return f"node {result.rank} exit {result.code}" + (
        f" (rank {cause.group(1)} exited {cause.group(2)})" if cause else "")


def _report(label: str, results: list[NodeResult], stage: Stage, *, took: float, backend: str, out: TextIO) -> None:
    import torch

    out.write(f"\nrehearsed {label} on {backend} in {took:.1f}s: " + ", ".join(map(describe, results)) + "\n")
    out.write("substituted (what a node has -> here):\n")
    rows = [
        (SHARED_MOUNT, str(stage.fsx)),
        ("NeuronCores of a node (NPROC_PER_NODE)", f"{stage.processes_per_node} processes on the CPU (gloo)"),
        ("the image's Python, torch-neuronx", f"{sys.executable}, torch {torch.__version__}"),
        ("a recipe's neuron device, process group, compile backend", ", ".join(CPU_FOR_NEURON.values())),
        ("node addresses, rendezvous port 29500", f"127.0.0.1, port {stage.port}"),
        ("the directory the job starts in (or TRN_WORKDIR)", f"{stage.workdir}"),
        (IMAGE_EXAMPLE_DIR, f"{EXAMPLE_DIR}/"),
        *([("the image's packages of your requirements.txt", str(stage.packages))] if stage.packages else []),
    ]
    for what, here in rows:
        out.write(f"  {what} -> {here}\n")
    out.write(f"outputs: {stage.fsx} (checkpoints in checkpoints/, the compile cache in neuron-cache/)\n")


# -- what each backend runs ------------------------------------------------------------------------------


def _image_packages(stage: Stage, cwd: Path) -> None:
    """EKS and Batch run the job in an image that installed its requirements.txt (`trn image init`'s Dockerfile does):
    here, the same packages in a virtual environment layered on this Python (node/job_venv.sh, as on Slurm), never in
    the project's .venv. Without a requirements.txt, nothing."""
    from trainium_cdk.runtime.launcher import JOB_VENV

    if not (cwd / "requirements.txt").is_file():
        return
    env = {**stage.base_environment(), "TRN_WORKDIR": str(cwd)}
    done = subprocess.run(["bash", "-c", JOB_VENV + 'job_venv >&2 && echo "$VIRTUAL_ENV"'], cwd=cwd, env=env, text=True,
                          capture_output=True, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        said = [line for line in lines if line.startswith("ERROR:")][:1] or lines[-1:] or ["pip failed"]
        raise CliError(f"{cwd / 'requirements.txt'} did not install ({said[0]}): an image built from it would not "
                       "build either", code=1)
    stage.packages = Path(done.stdout.strip())


def _eks(args: argparse.Namespace, config: Config, stage: Stage, cwd: Path) -> tuple[str, list[NodeResult]]:
    from trainium_cdk.cli.eks_jobs import render
    from trainium_cdk.rehearsal import run_kubernetes_job, run_volcano_job

    _image_packages(stage, cwd)
    job = user_job(args, config)
    objects = render(config, job, name=JOB_NAME, image=args.image or IMAGE_STAND_IN)
    (training,) = [o for o in objects if o.get("kind") == "Job"]
    timeout = {"timeout": args.timeout}
    if training["apiVersion"].startswith("batch.volcano.sh"):
        nodes = sum(t["replicas"] for t in training["spec"]["tasks"])
        return f"a Volcano job of {nodes} nodes", run_volcano_job(stage, training, cwd=cwd, **timeout)
    return "a Kubernetes Job (1 node)", run_kubernetes_job(stage, training, cwd=cwd, **timeout)


def _batch(args: argparse.Namespace, config: Config, stage: Stage, cwd: Path) -> tuple[str, list[NodeResult]]:
    from trainium_cdk.rehearsal import run_batch_node_properties
    from trainium_cdk.runtime.batch_job import BatchSubmission, definition_container

    _image_packages(stage, cwd)
    job = user_job(args, config)
    # A CPU-only recipe goes to the CPU queue, whose job definition sets no environment (batch_jobs.submit).
    cpu = on_batch_cpu_queue(config, job.job)
    if job.job is not None:
        from trainium_cdk.cli.batch_jobs import recipe_job

        job = recipe_job(config, job, cpu=cpu)
    container = definition_container(config, job.group, cpu=cpu)
    nodes = job.nodes or 1
    submission = BatchSubmission(name=JOB_NAME, nodes=nodes, multinode=container.multinode, program=job.program,
                                 env=job.env)
    runs = submission.applied_to(container)
    kind = "a multi-node parallel job" if runs.multinode else "a container job"
    # A Batch job's id is new at every submit, and so is its checkpoint folder's: the nodes' heartbeats and exit codes
    # of an earlier rehearsal (same name) are not this job's.
    shutil.rmtree(stage.fsx / "checkpoints" / JOB_NAME / ".nodes", ignore_errors=True)
    return f"{kind} of {nodes} node(s)", run_batch_node_properties(
        stage, command=runs.command, environment=runs.environment, parameters=runs.parameters, nodes=nodes,
        multinode=runs.multinode, cwd=cwd, timeout=args.timeout,
    )


def _slurm(args: argparse.Namespace, config: Config, stage: Stage, cwd: Path) -> tuple[str, list[NodeResult]]:
    from trainium_cdk.app.parallelcluster.cluster_config import queue_name
    from trainium_cdk.app.parallelcluster.sbatch import head_node_files
    from trainium_cdk.app.parallelcluster.submit import SCRIPTS_DIR
    from trainium_cdk.cli.slurm_jobs import submission
    from trainium_cdk.rehearsal import run_slurm_script

    sub = submission(args, config)
    group = user_job(args, config).group
    # ~/trainium as the head node has it: the batch scripts and the MLP example.
    scripts = stage.root / SCRIPTS_DIR
    scripts.mkdir(exist_ok=True)
    for name, text in head_node_files(config).items():
        (scripts / name).write_text(text)
    words = [str(stage.root / w[2:]) if w.startswith("~/") else w for w in sub.program]
    (step,) = run_slurm_script(
        stage, (scripts / sub.script).read_text(), sub.nodes, *words, env=sub.sbatch_environment(), cwd=cwd,
        job_name=sub.name, partition=queue_name(group), timeout=args.timeout, job_id=SLURM_JOB_ID,
    )
    # Every node's end: srun's tasks' exit codes (the srun stand-in leaves them); the batch step's output holds all
    # nodes' lines (srun --label), on node 0's result.
    log = stage.root / f"slurm-{SLURM_JOB_ID}-node"
    label = f"sbatch --nodes={sub.nodes} {sub.script}"
    if step.stopped or not Path(f"{log}.codes").exists():  # every node ended with the batch step
        return label, [NodeResult(rank, step.code, step.output if rank == 0 else "", step.stopped)
                       for rank in range(sub.nodes)]
    ran = json.loads(Path(f"{log}.codes").read_text())
    why = f"srun --kill-on-bad-exit (node {ran['first_failed']}'s failure)"
    outputs = [Path(f"{log}.{rank}").read_text() if Path(f"{log}.{rank}").exists() else ""
               for rank in range(len(ran["codes"]))]
    # The batch step's own lines (before and after srun) with node 0's.
    own = step.output[:len(step.output) - len("".join(outputs))]
    nodes = [NodeResult(rank, code, (own if rank == 0 else "") + outputs[rank],
                        stopped=why if rank in ran["stopped"] else "") for rank, code in enumerate(ran["codes"])]
    return label, nodes


def _instance(args: argparse.Namespace, config: Config, stage: Stage, cwd: Path) -> tuple[str, list[NodeResult]]:
    from trainium_cdk.cli.instance_jobs import submission
    from trainium_cdk.rehearsal import run_nodes
    from trainium_cdk.runtime.instance_job import EXIT_RECORD, LAUNCH_SCRIPT, OUTPUT_LOG, RUN_SCRIPT
    from trainium_cdk.runtime.launcher import LAUNCHER

    sub = submission(args, config)
    folder = stage.root / "job"
    folder.mkdir()
    (folder / LAUNCH_SCRIPT).write_text(LAUNCHER)
    (folder / RUN_SCRIPT).write_text(stage.substitute_script(sub.run_script()))
    (result,) = run_nodes([["/bin/bash", str(folder / RUN_SCRIPT)]], [stage.environment({})], cwd=cwd,
                          timeout=args.timeout)
    log = folder / OUTPUT_LOG
    result.output += log.read_text() if log.exists() else ""
    if not (folder / EXIT_RECORD).exists():
        result.output += "trn rehearse: the run script left no exit record\n"
    return f"unit {sub.unit} (1 node)", [result]


RUNNERS = {"eks": _eks, "batch": _batch, "parallelcluster": _slurm, "instance": _instance}
