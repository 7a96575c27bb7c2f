"""Run a deployed training job's exact command on this machine: N "nodes" as N process groups on loopback.

Every substitution the rehearsal makes is in :data:`SUBSTITUTIONS` and :class:`Stage` (nothing else
differs from what the scheduler runs on a node):

=====================================  ==========================================================
what the artefact says                 what runs here, and why
=====================================  ==========================================================
``/opt/trainium-cdk/examples/mlp/``    this repository's ``trainium_cdk/examples/mlp/`` (the image's copy of it)
``/fsx`` (the shared file system)      one temporary folder that every node of the job shares
ParallelCluster's Neuron venv          a folder whose ``bin/activate`` does nothing (torch is on PATH)
``NPROC_PER_NODE`` (NeuronCores)       2 processes per node (2 cores here, no NeuronCores)
``MASTER_PORT`` 29500                  a free port (tests may run beside other programs)
host names and node addresses          127.0.0.1 (``hostname``, ``scontrol`` stand-ins; Volcano hosts)
``srun``                               starts the command once per node, each with its SLURM_NODEID
Neuron and EFA devices, torch-neuronx  absent: the CPU build of torch (gloo) trains instead
``/opt/aws/neuron/bin`` (Neuron tools)  a folder of the stage (``Stage.neuron_bin``), not on the PATH a node
                                       gets: a Slurm script must put it there itself, as on a host. EKS and
                                       Batch containers carry the tools on their PATH: there, ``Stage.bin``
``neuron-ls --json-output``            prints N devices (:func:`neuron_ls`): the health and fabric checks
``nccom-test``                         prints a captured real report (:func:`nccom_test`): fabric check
``scontrol update``                    records its arguments (:func:`scontrol_recorder`): health prolog
``neuron_parallel_compile``            runs its command with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` and records what it
                                       saw, compiling nothing (:func:`neuron_parallel_compile`): precompile
``TRN_HEARTBEAT_S`` 30 (Batch nodes)   1: a lost peer shows in seconds, not minutes
=====================================  ==========================================================
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_DIR = ROOT / "trainium_cdk" / "examples" / "mlp"
PROCESSES_PER_NODE = 2
LOOPBACK = "127.0.0.1"
TIMEOUT_S = 300
MAIN_EXIT_GRACE_S = 30  # ECS's default stop timeout: what a Batch child gets after the main node exits

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
# process group with the variables srun sets; exit 1 if any node fails (--kill-on-bad-exit).
import os, subprocess, sys
args = sys.argv[1:]
while args and args[0].startswith("-"):
    args.pop(0)
nodes = int(os.environ["SLURM_JOB_NUM_NODES"])
log = os.environ["REHEARSAL_LOG"]
procs = []
for i in range(nodes):
    env = dict(os.environ, SLURM_NODEID=str(i), SLURM_PROCID=str(i), SLURM_LOCALID="0", SLURM_STEP_ID="0")
    out = open(f"{{log}}.{{i}}", "w")
    procs.append(subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
codes = [p.wait() for p in procs]
sys.exit(0 if all(c == 0 for c in codes) else 1)
"""


def _tool(bin_dir: Path, name: str, text: str) -> Path:
    path = bin_dir / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def neuron_ls(bin_dir: Path, devices: int) -> Path:
    """neuron-ls stand-in: ``--json-output`` lists ``devices`` Neuron devices (one object each)."""
    listing = json.dumps([{"neuron_device": i, "nc_count": 2} for i in range(devices)])
    return _tool(bin_dir, "neuron-ls", f"#!/bin/sh\ncase \"$*\" in *--json-output*) echo '{listing}' ;; *) exit 2 ;; esac\n")


def nccom_test(bin_dir: Path, report: Path, log: Path) -> Path:
    """nccom-test stand-in: records its arguments and NEURON_RT_ROOT_COMM_ID, prints a real report."""
    return _tool(bin_dir, "nccom-test", f"#!/bin/sh\necho \"$NEURON_RT_ROOT_COMM_ID $*\" >> '{log}'\ncat '{report}'\n")


def scontrol_recorder(bin_dir: Path, log: Path) -> Path:
    """scontrol stand-in for the prolog: records ``update`` calls."""
    return _tool(bin_dir, "scontrol", f"#!/bin/sh\necho \"$*\" >> '{log}'\n")


def neuron_parallel_compile(bin_dir: Path, log: Path) -> Path:
    """neuron_parallel_compile stand-in, as Neuron documents the tool ("PyTorch NeuronX neuron_parallel_compile
    CLI"): it runs its command with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` (graph extraction) and exits as the command
    does; the compiling of the extracted graphs is left out. Each call appends a JSON line to ``log``: its
    arguments and the variables its command gets that precompile is about."""
    seen = ("TRN_CHECKPOINT_DIR", "TRN_PRECOMPILE_STEPS", "NEURON_CC_FLAGS", "NODE_RANK")
    return _tool(bin_dir, "neuron_parallel_compile", f"""#!{sys.executable}
import json, os, subprocess, sys
env = dict(os.environ, NEURON_EXTRACT_GRAPHS_ONLY="1")
with open({str(log)!r}, "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: env.get(k) for k in {seen!r}}}}}) + "\\n")
sys.exit(subprocess.run(sys.argv[1:], env=env).returncode)
""")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@dataclass
class Stage:
    """The machine the job runs on: the shared folder, the stand-ins on PATH, the substitutions."""

    root: Path
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.fsx = self.root / "fsx"
        self.fsx.mkdir(parents=True)
        self.bin = self.root / "bin"
        self.bin.mkdir()
        for name, text in (("hostname", _HOSTNAME), ("scontrol", _SCONTROL), ("srun", _SRUN)):
            path = self.bin / name
            path.write_text(text)
            path.chmod(0o755)
        # The host's Neuron tools (neuron_ls, nccom_test): only what a script puts on PATH finds them.
        self.neuron_bin = self.root / "opt-aws-neuron-bin"
        self.neuron_bin.mkdir()
        self.venv = self.root / "neuron-venv"
        (self.venv / "bin").mkdir(parents=True)
        (self.venv / "bin" / "activate").write_text("# stand-in: torch is already on PATH\n")

    @property
    def substitutions(self) -> dict[str, str]:
        from trainium_cdk.names import NEURON_BIN
        from trainium_cdk.parallelcluster.cluster_config import VENV

        return {
            "/opt/trainium-cdk/examples/mlp/": f"{EXAMPLE_DIR}/",
            VENV: str(self.venv),
            NEURON_BIN: str(self.neuron_bin),
            "/fsx": str(self.fsx),
        }

    def substitute(self, text: str) -> str:
        for old, new in self.substitutions.items():
            text = text.replace(old, new)
        return text

    def substitute_script(self, text: str, *, processes_per_node: int = PROCESSES_PER_NODE) -> str:
        """A script that exports the job's variables itself (the Slurm batch script): the same
        substitutions as :meth:`environment`, made in its text (``processes_per_node``: a job's own count
        that is not the NeuronCores, such as the fabric check's 1, stays as it is)."""
        text = re.sub(r"^export NPROC_PER_NODE=.*$", f"export NPROC_PER_NODE={processes_per_node}", text, flags=re.M)
        text = re.sub(r"^export MASTER_PORT=.*$", f"export MASTER_PORT={self.port}", text, flags=re.M)
        return self.substitute(text)

    def environment(self, job_env: Mapping[str, str]) -> dict[str, str]:
        """A node's environment: a clean base, the job's own variables (substituted), and the
        two numbers that cannot be the same here."""
        base = {
            "PATH": f"{self.bin}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
        }
        env = {**base, **{k: self.substitute(v) for k, v in job_env.items()}}
        if "NPROC_PER_NODE" in env:
            env["NPROC_PER_NODE"] = str(PROCESSES_PER_NODE)
        if "MASTER_PORT" in env:
            env["MASTER_PORT"] = str(self.port)
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
    rank: int
    code: int
    output: str


def run_nodes(
    argvs: Sequence[Sequence[str]],
    envs: Sequence[Mapping[str, str]],
    *,
    cwd: Path,
    kill: tuple[int, Callable[[], bool]] | None = None,
    main_decides: bool = False,
) -> list[NodeResult]:
    """Start every node at once, each in its own process group, and wait for all. A node that fails
    ends the others (as a gang scheduler would); so does the time limit. With ``main_decides`` (an AWS Batch
    multi-node job) only node 0's exit ends the others: a child that fails leaves the job running.
    ``kill=(node, when)``: once ``when()`` is true, SIGKILL every process of that node (its host dies mid-run)."""
    logs = [tempfile.TemporaryFile(mode="w+") for _ in argvs]
    procs = [
        subprocess.Popen(
            list(argv), env=dict(env), cwd=cwd, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        for argv, env, log in zip(argvs, envs, logs, strict=True)
    ]
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if kill is not None and kill[1]():
                kill_node(procs[kill[0]])
                kill = None
            if main_decides:
                # The main node's exit ends the job: Batch stops the others (docker stop: SIGTERM, then a grace).
                if procs[0].poll() is not None:
                    deadline = min(deadline, time.monotonic() + MAIN_EXIT_GRACE_S)
            elif any(p.returncode not in (None, 0) for p in procs):
                time.sleep(2)  # let the others report the failure too
                break
            time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_node(proc)
                proc.wait()
    results = []
    for rank, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        log.seek(0)
        results.append(NodeResult(rank, proc.returncode, log.read()))
        log.close()
    return results


def losses(outputs: Sequence[str]) -> list[float]:
    """The per-epoch losses rank 0 printed (the MLP example prints one JSON line)."""
    found = [
        json.loads(line[line.index("{"):])["loss_per_epoch"]
        for text in outputs
        for line in text.splitlines()
        if '"loss_per_epoch"' in line
    ]
    assert len(found) == 1, f"expected one loss report from rank 0, got {len(found)}:\n" + "\n".join(outputs)
    return found[0]


def assert_trained(results: Sequence[NodeResult]) -> list[float]:
    """Every node (so every rank) exited 0 and the loss fell."""
    for r in results:
        others = "\n".join(f"--- node {o.rank} (exit {o.code}):\n{o.output[-3000:]}" for o in results)
        assert r.code == 0, f"node {r.rank} exited {r.code}\n{others}"
    history = losses([r.output for r in results])
    assert history[-1] < 0.5 * history[0], history
    return history


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


# -- the schedulers: what each sets on a node -------------------------------------------------------


def run_kubernetes_job(stage: Stage, job: dict[str, Any]) -> list:
    """A batch/v1 Job: one pod, no scheduler variables (the launcher runs one node)."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    argv = [stage.substitute(a) for a in (*container["command"], *container.get("args", []))]
    return run_nodes([argv], [stage.environment(container_env(container))], cwd=stage.root)


def run_volcano_job(stage: Stage, job: dict[str, Any], **run: Any) -> list:
    """A Volcano Job: the env plugin's task index and the svc plugin's host list and counts, per pod."""
    name = job["metadata"]["name"]
    tasks = job["spec"]["tasks"]
    plugins = {}
    for task in tasks:
        key = task["name"].upper().replace("-", "_")
        hosts = [f"{name}-{task['name']}-{i}.{name}" for i in range(task["replicas"])]
        plugins[f"VC_{key}_NUM"] = str(task["replicas"])
        # The svc plugin's host names resolve to the pods; here every pod is on loopback.
        plugins[f"VC_{key}_HOSTS"] = ",".join(LOOPBACK for _ in hosts)
    argvs, envs = [], []
    for task in tasks:
        (container,) = task["template"]["spec"]["containers"]
        for index in range(task["replicas"]):
            argvs.append([stage.substitute(a) for a in (*container["command"], *container.get("args", []))])
            env = {**container_env(container), **plugins, "VC_TASK_INDEX": str(index), "VK_TASK_INDEX": str(index)}
            envs.append(stage.environment(env))
    return run_nodes(argvs, envs, cwd=stage.root, **run)


def run_batch_job(stage: Stage, definition: dict[str, Any], nodes: int, *, attempt: int = 1, **run: Any) -> list:
    """A multi-node parallel job: Batch substitutes Ref:: parameters and sets the node variables (``attempt``:
    AWS_BATCH_JOB_ATTEMPT, 1 for the first). The main node's exit ends the job, as in Batch."""
    props = definition["Properties"]
    (node_range,) = props["NodeProperties"]["NodeRangeProperties"]
    container = node_range["Container"]
    parameters = props.get("Parameters", {})
    argv = [parameters[a.removeprefix("Ref::")] if a.startswith("Ref::") else a for a in container["Command"]]
    job_env = {e["Name"]: e["Value"] for e in container["Environment"]}
    argvs, envs = [], []
    for index in range(nodes):
        batch_vars = {
            "AWS_BATCH_JOB_ID": "rehearsal#" + str(index), "AWS_BATCH_JOB_NUM_NODES": str(nodes),
            "AWS_BATCH_JOB_NODE_INDEX": str(index), "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
            "AWS_BATCH_JOB_ATTEMPT": str(attempt),
        }
        if index != 0:  # Batch leaves it unset on the main node itself
            batch_vars["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = LOOPBACK
        argvs.append([stage.substitute(a) for a in argv])
        envs.append(stage.environment({**job_env, **batch_vars}))
    return run_nodes(argvs, envs, cwd=stage.root, main_decides=True, **run)


def run_slurm_script(stage: Stage, script: str, nodes: int, *args: str, **substitute: Any) -> list:
    """`sbatch -N nodes script args`: the batch step on the first node; srun starts one task per node."""
    path = stage.root / "job.sbatch"
    path.write_text(stage.substitute_script(script, **substitute))
    log = stage.root / "slurm-node"
    env = stage.environment({
        "SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NODELIST": f"train-st-trn1-32xlarge-[1-{nodes}]", "SLURM_NODEID": "0",
        "REHEARSAL_LOG": str(log),
    })
    (batch_step,) = run_nodes([["bash", str(path), *(stage.substitute(a) for a in args)]], [env], cwd=stage.root)
    nodes_out = [Path(f"{log}.{i}").read_text() for i in range(nodes)]
    batch_step.output += "".join(nodes_out)
    return [batch_step]


def batch_retry_action(strategy: Mapping[str, Any], *, exit_code: int, reason: str = "",
                       status_reason: str = "Essential container in task exited") -> str:
    """What AWS Batch does with a failed attempt under a job definition's RetryStrategy (AWS Batch user guide,
    "Automated job retries"): the first EvaluateOnExit condition whose every given field matches decides; a
    pattern matches the start of the text when it ends in *, else the whole text; no match retries. (The
    default status reason is the one of a container that exited; an exit has no reason.)"""

    def matches(pattern: str, text: str) -> bool:
        return text.startswith(pattern[:-1]) if pattern.endswith("*") else text == pattern

    for condition in strategy.get("EvaluateOnExit", []):
        fields = (("OnExitCode", str(exit_code)), ("OnReason", reason), ("OnStatusReason", status_reason))
        if all(matches(condition[key], value) for key, value in fields if key in condition):
            return condition["Action"]
    return "RETRY"
