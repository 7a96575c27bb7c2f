"""The machine a rehearsed job runs on: a shared folder for /fsx, stand-ins on PATH, N nodes on loopback."""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainium_cdk.facts.names import (
    COMPILE_BACKEND_VARIABLE,
    DIST_BACKEND_VARIABLE,
    NEURON_BIN,
    NEURON_DEVICE,
    NODE_METRICS_DIR,
    SHARED_MOUNT,
    TORCH_DEVICE_VARIABLE,
)
from trainium_cdk.node.fabric_check import SIZES_VARIABLE as FABRIC_SIZES_VARIABLE
from trainium_cdk.runtime.launcher import WORKDIR_VARIABLE

EXAMPLE_DIR = Path(__file__).resolve().parent.parent / "examples" / "mlp"
# Where the example images hold the MLP example (examples/mlp/Dockerfile); the rehearsal runs this package's copy.
IMAGE_EXAMPLE_DIR = "/opt/trainium-cdk/examples/mlp/"
PROCESSES_PER_NODE = 2
LOOPBACK = "127.0.0.1"
TIMEOUT_S = 300
MAIN_EXIT_GRACE_S = 30  # ECS's default stop timeout: what a Batch child gets after the main node exits
# A TorchNeuron recipe's `neuron` device, process group backend and torch.compile backend, here: the CPU, gloo, and
# TorchDynamo's "eager" backend (the graph is captured as on Neuron, then run by PyTorch, not compiled). Neuron's
# own distributed tutorial runs its CPU comparison the same way (torch/tutorials/tutorial-torch-distributed:
# "Change --device and --backend between runs").
CPU_FOR_NEURON = {TORCH_DEVICE_VARIABLE: "cpu", DIST_BACKEND_VARIABLE: "gloo", COMPILE_BACKEND_VARIABLE: "eager"}
# The fabric check's size sweep (1 MiB to 1 GiB a rank on Neuron): 64 KiB to 4 MiB, so that every process on loopback
# holds megabytes, not gigabytes, of the machine's memory.
FABRIC_SIZES_HERE = "65536:4194304:8"

_HOSTNAME = f"""#!/bin/sh
# hostname stand-in: the node's own address is loopback here.
case "$1" in -I|--all-ip-addresses) echo "{LOOPBACK}" ;; *) echo localhost ;; esac
"""
_SCONTROL = f"""#!{sys.executable}
# scontrol stand-in: `scontrol show hostnames LIST` prints one line per host, every host mapped to loopback.
import re, sys
assert sys.argv[1:3] == ["show", "hostnames"], sys.argv
hosts = []
for part in re.findall(r"[^,\\[]+(?:\\[[^\\]]*\\])?", sys.argv[3]):
    m = re.match(r"(.*)\\[(.*)\\]$", part)
    for r in (m.group(2).split(",") if m else [None]):
        if r is None:
            hosts.append(part)
        else:
            lo, _, hi = r.partition("-")
            hosts += [m.group(1) + str(i) for i in range(int(lo), int(hi or lo) + 1)]
print("\\n".join("{LOOPBACK}" for _ in hosts))
"""
_SRUN = f"""#!{sys.executable}
# srun stand-in: the command once per node of the allocation (--ntasks-per-node=1), each in its own
# process group with the variables srun sets; with --label, each line prefixed by the task id, as srun does;
# a task that fails ends the others (--kill-on-bad-exit=1); the tasks' exit codes into $REHEARSAL_LOG.codes.
import json, os, signal, subprocess, sys, threading, time
args = sys.argv[1:]
label = False
while args and args[0].startswith("-"):
    label = label or args[0] in ("--label", "-l")
    args.pop(0)
nodes = int(os.environ["SLURM_JOB_NUM_NODES"])
log = os.environ["REHEARSAL_LOG"]
procs, pumps = [], []
for i in range(nodes):
    env = dict(os.environ, SLURM_NODEID=str(i), SLURM_PROCID=str(i), SLURM_LOCALID="0", SLURM_STEP_ID="0")
    out = open(f"{{log}}.{{i}}", "w")
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            text=True)
    def pump(proc=proc, out=out, i=i):
        for line in proc.stdout:
            out.write(f"{{i}}: {{line}}" if label else line)
            out.flush()
    pumps.append(threading.Thread(target=pump))
    pumps[-1].start()
    procs.append(proc)
# --kill-on-bad-exit=1: a task's non-zero exit ends the others (SIGTERM to each task, SIGKILL after a grace).
while None in (states := [p.poll() for p in procs]) and not any(c not in (None, 0) for c in states):
    time.sleep(0.2)
first = next((i for i, c in enumerate(states) if c not in (None, 0)), None)
for p in procs:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
deadline = time.monotonic() + 5
while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
    time.sleep(0.2)
for p in procs:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
codes = [p.wait() for p in procs]
for t in pumps:
    t.join()
with open(log + ".codes", "w") as out:
    json.dump({{"codes": codes, "first_failed": first, "stopped": [i for i, c in enumerate(states) if c is None]}}, out)
# srun's status: the highest exit code of its tasks (a signal's number if one was killed), 0 if all succeeded.
sys.exit(max((c if c > 0 else -c for c in codes), default=0))
"""
_SYSTEMD_RUN = f"""#!{sys.executable}
# systemd-run stand-in: the unit's command in the foreground, with its --setenv variables and
# --working-directory; the unit's name, user and properties are recorded in $REHEARSAL_LOG.units.
import json, os, sys
args = sys.argv[1:]
env, cwd, unit = {{}}, None, {{"properties": []}}
while args and args[0].startswith("-"):
    option = args.pop(0)
    name, eq, value = option.partition("=")
    if not eq and name in ("--unit", "--uid", "--setenv", "--working-directory", "-p", "--property"):
        value = args.pop(0)
    if name == "--setenv":
        key, _, val = value.partition("=")
        env[key] = val
    elif name == "--working-directory":
        cwd = value
    elif name in ("-p", "--property"):
        unit["properties"].append(value)
    else:
        unit[name.lstrip("-")] = value or True
with open(os.environ["REHEARSAL_LOG"] + ".units", "a") as log:
    log.write(json.dumps({{**unit, "argv": args}}) + "\\n")
os.chdir(cwd or os.getcwd())
os.execvpe(args[0], args, {{**os.environ, **env}})
"""
STAND_INS = {"hostname": _HOSTNAME, "scontrol": _SCONTROL, "srun": _SRUN, "systemd-run": _SYSTEMD_RUN}


# Rendezvous ports come from below the kernel's ephemeral range: a port the kernel picked there (bind to 0) may be
# handed to another process's outgoing connection (a concurrent rehearsal's gloo mesh, a test server's client)
# before torchrun binds it, and torchrun's store then meets a stranger ("Connection reset by peer").
PORT_FLOOR = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux's default range starts at 32768)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now, below the ephemeral range (randomly: concurrent rehearsals pick apart)."""
    low = ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(200) if low - PORT_FLOOR > 100 else ():
        port = rng.randrange(PORT_FLOOR, low)
        with socket.socket() as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # a kernel whose ephemeral range starts low: take what it gives
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def write_tool(bin_dir: Path, name: str, text: str) -> Path:
    path = bin_dir / name
    path.write_text(text)
    path.chmod(0o755)
    return path


@dataclass
class Stage:
    """The machine the job runs on: the shared folder, the stand-ins on PATH, the substitutions.

    :param root: a folder of the stage's own (stand-ins, the venv stand-in, HOME).
    :param fsx: what stands for /fsx; default ``root/fsx``.
    :param workdir: what stands for the job's ``TRN_WORKDIR`` (`trn rehearse`: where your code is); default: its
        path, substituted as any other (a job's code on the stand-in /fsx).
    :param processes_per_node: what stands for the NeuronCores of a node.
    """

    root: Path
    port: int = field(default_factory=free_port)
    fsx: Path = None  # type: ignore[assignment]  # set in __post_init__
    workdir: Path | None = None
    processes_per_node: int = PROCESSES_PER_NODE
    # A job's own packages (a virtual environment of node/job_venv.sh): first on every node's PATH, as an image that
    # installed them has them.
    packages: Path | None = None

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.fsx is None:
            self.fsx = self.root / "fsx"
        self.fsx.mkdir(parents=True, exist_ok=True)
        self.bin = self.root / "bin"
        self.bin.mkdir(exist_ok=True)
        for name, text in STAND_INS.items():
            write_tool(self.bin, name, text)
        # The host's Neuron tools: only what a script puts on PATH finds them.
        self.neuron_bin = self.root / "opt-aws-neuron-bin"
        self.neuron_bin.mkdir(exist_ok=True)
        self.venv = self.root / "neuron-venv"
        (self.venv / "bin").mkdir(parents=True, exist_ok=True)
        (self.venv / ".jobs").mkdir(exist_ok=True)  # where each Slurm job marks the venv it uses (neuron_setup.sh)
        (self.venv / "bin" / "activate").write_text("# stand-in: torch is already on PATH\n")
        # The Neuron compiler's cache (neuron_cc.py), in every Python a node starts: its sitecustomize.
        self.site = self.root / "neuron-cc"
        self.site.mkdir(exist_ok=True)
        (self.site / "sitecustomize.py").write_text((Path(__file__).parent / "neuron_cc.py").read_text())
        # The node's metrics folder (its Prometheus collector's): beside the stand-in /fsx, kept after the run.
        self.metrics = self.fsx.parent / "node-metrics"
        self.metrics.mkdir(exist_ok=True)

    @property
    def substitutions(self) -> dict[str, str]:
        from trainium_cdk import recipes
        from trainium_cdk.app.parallelcluster.cluster_config import VENV

        # A recipe's folder, where its image and the Slurm head node have it: the package's copy.
        recipe_folders = {
            f"{root}/{r.folder.name}/": f"{r.folder}/"
            for r in recipes.all_recipes() for root in (recipes.IMAGE_ROOT, recipes.HEAD_NODE_ROOT)
        }
        return {
            IMAGE_EXAMPLE_DIR: f"{EXAMPLE_DIR}/",
            **recipe_folders,
            VENV: str(self.venv),
            NEURON_BIN: str(self.neuron_bin),
            SHARED_MOUNT: str(self.fsx),
            NODE_METRICS_DIR: str(self.metrics),
        }

    def substitute(self, text: str) -> str:
        """Each path of :attr:`substitutions` where it starts a path (never inside another path, so that a
        text substituted once stays as it is: a value may pass through more than one stand-in)."""
        for old, new in self.substitutions.items():
            pattern = r"(?<![\w./-])" + re.escape(old) + ("" if old.endswith("/") else r"(?![\w.-])")
            text = re.sub(pattern, _as_written(new), text)
        return text

    def value(self, key: str, value: str) -> str:
        """A job variable's value here: the counts, port and directory that cannot be the same, the rest with
        the paths substituted."""
        if key == "NPROC_PER_NODE":
            return str(self.processes_per_node)
        if key == "MASTER_PORT":
            return str(self.port)
        if key == WORKDIR_VARIABLE and self.workdir is not None:
            return str(self.workdir)
        if key in CPU_FOR_NEURON and value == NEURON_DEVICE:
            return CPU_FOR_NEURON[key]
        if key == FABRIC_SIZES_VARIABLE:
            return FABRIC_SIZES_HERE
        return self.substitute(value)

    def substitute_script(self, text: str, *, processes_per_node: int | None = None) -> str:
        """A script that exports the job's variables itself (the Slurm batch script, the development instance's
        run script): the same substitutions as :meth:`environment`, made in its ``export KEY=VALUE`` lines and
        its text (``processes_per_node``: a job's own count that is not the NeuronCores, such as the fabric
        check's 1, stays as it is)."""

        def export(match: re.Match[str]) -> str:
            key, raw = match.group(1), match.group(2)
            if key == "NPROC_PER_NODE" and processes_per_node is not None:
                return f"export {key}={processes_per_node}"
            if key not in ("NPROC_PER_NODE", "MASTER_PORT", WORKDIR_VARIABLE):
                return match.group(0)
            words = shlex.split(raw) if raw else [""]
            return f"export {key}={shlex.quote(self.value(key, words[0]))}" if len(words) == 1 else match.group(0)

        text = re.sub(r"^export ([A-Za-z_][A-Za-z0-9_]*)=(.*)$", export, text, flags=re.M)
        return self.substitute(text)

    def base_environment(self) -> dict[str, str]:
        """What a node starts with: the stand-ins and this Python (torch, torchrun) on PATH, and nothing else."""
        packages = f"{self.packages / 'bin'}:" if self.packages is not None else ""
        return {
            "PATH": f"{packages}{self.bin}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(self.root),
            # Where node/job_venv.sh keeps the job's packages (a node's is the user's home): beside the stand-in /fsx,
            # kept from run to run.
            "TRN_VENV_ROOT": str(self.fsx.parent / "venvs"),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(self.site),
        }

    def environment(self, job_env: Mapping[str, str]) -> dict[str, str]:
        """A node's environment: a clean base, the job's own variables (substituted), and the numbers and
        directories that cannot be the same here."""
        env = {**self.base_environment(), **{k: self.value(k, v) for k, v in job_env.items()}}
        env["TRN_HEARTBEAT_S"] = "1"
        return env


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (torchrun starts its workers in sessions of their own, so a signal
    to the node's process group misses them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_node(proc: subprocess.Popen) -> None:
    """SIGKILL a node: its process group and every process it started, as when its host dies."""
    for pid in [proc.pid, *_descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class NodeResult:
    """A node's exit code and output; ``stopped``: why the rehearsal ended it, if it did (its code is then the
    signal's), as the scheduler would have: the time limit, a failed node, the main node's end."""

    rank: int
    code: int
    output: str
    stopped: str = ""


def run_nodes(
    argvs: Sequence[Sequence[str]],
    envs: Sequence[Mapping[str, str]],
    *,
    cwd: Path,
    kill: tuple[int, Callable[[], bool]] | None = None,
    main_decides: bool = False,
    timeout: float = TIMEOUT_S,
    start_after: Mapping[int, float] | None = None,
) -> list[NodeResult]:
    """Start every node at once, each in its own process group, and wait for all. A node that fails
    ends the others (as a gang scheduler would); so does the time limit. With ``main_decides`` (an AWS Batch
    multi-node job) only node 0's exit ends the others: a child that fails leaves the job running.
    ``kill=(node, when)``: once ``when()`` is true, SIGKILL every process of that node (its host dies mid-run).
    ``start_after={node: seconds}``: that node starts late (Batch starts the children once the main node runs,
    each as its own host is ready, a fresh one after pulling the image)."""
    logs = [tempfile.TemporaryFile(mode="w+") for _ in argvs]
    started = time.monotonic()
    late = dict(start_after or {})

    def start(index: int) -> subprocess.Popen:
        return subprocess.Popen(
            list(argvs[index]), env=dict(envs[index]), cwd=cwd, stdout=logs[index], stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )

    procs: list[subprocess.Popen | None] = [None if i in late else start(i) for i in range(len(argvs))]
    deadline = started + timeout
    why = f"the time limit ({timeout:g} s, --timeout)"

    def running() -> bool:
        # Every node polled (not any()'s first running one): a later node's exit code is known as it happens.
        states = [p.poll() for p in procs if p is not None]
        return bool(late) or None in states

    try:
        while running() and time.monotonic() < deadline:
            for index, delay in list(late.items()):
                if time.monotonic() - started >= delay:
                    procs[index] = start(index)
                    del late[index]
            victim = procs[kill[0]] if kill is not None else None
            if kill is not None and victim is not None and kill[1]():
                kill_node(victim)
                kill = None
            first = procs[0]
            if main_decides:
                # The main node's exit ends the job: Batch stops the others (docker stop: SIGTERM, then a grace).
                if first is not None and first.poll() is not None:
                    if deadline > time.monotonic() + MAIN_EXIT_GRACE_S:
                        deadline = time.monotonic() + MAIN_EXIT_GRACE_S
                        why = f"the main node's end (node 0 exit {first.returncode}; Batch stops the others)"
                    late.clear()  # a child not started by then never starts
            elif failed := [i for i, p in enumerate(procs) if p is not None and p.returncode not in (None, 0)]:
                why = f"node {failed[0]}'s failure (as the scheduler ends a job)"
                time.sleep(2)  # let the others report the failure too
                break
            time.sleep(0.2)
    finally:
        ended = [proc is not None and proc.poll() is not None for proc in procs]
        for proc in procs:
            if proc is not None and proc.poll() is None:
                kill_node(proc)
                proc.wait()
    results = []
    for rank, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        log.seek(0)
        results.append(NodeResult(rank, proc.returncode if proc is not None else -1, log.read(),
                                  stopped="" if ended[rank] else ("never started" if proc is None else why)))
        log.close()
    return results


def _as_written(value: str) -> Callable[[re.Match[str]], str]:
    """A re.sub replacement that is ``value`` as written (no backslash escapes), bound now, not at the loop's end."""
    return lambda _: value
