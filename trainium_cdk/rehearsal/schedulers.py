"""What each scheduler sets on a node, and how it starts the job there: Kubernetes, Volcano, AWS Batch, Slurm.

Each function takes the artefact a backend deploys or sends (a manifest, a job definition with the submit's
overrides, a batch script) and runs it on a :class:`~trainium_cdk.rehearsal.stage.Stage`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainium_cdk.rehearsal.stage import LOOPBACK, NodeResult, Stage, run_nodes


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion of a container's command, args and env values: ``$(VAR)`` becomes VAR's value when it is
    defined (the container's env; for an env value, the entries before it), else stays as written; ``$$`` becomes
    ``$``; any other ``$`` stays (the Container API; kubernetes third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1:
            out.append(env.get(text[i + 2:end], text[i:end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    """A Kubernetes container's ``env`` as the container gets it (only literal values: the charts use no valueFrom),
    each value expanded with the entries before it."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        env[entry["name"]] = expand(entry["value"], env)
    return env


def _argv(stage: Stage, container: Mapping[str, Any]) -> list[str]:
    env = container_env(container)
    return [stage.substitute(expand(a, env)) for a in (*container["command"], *container.get("args", []))]


def run_kubernetes_job(stage: Stage, job: dict[str, Any], *, cwd: Path | None = None, **run: Any) -> list[NodeResult]:
    """A batch/v1 Job: one pod, no scheduler variables (the launcher runs one node)."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return run_nodes([_argv(stage, container)], [stage.environment(container_env(container))],
                     cwd=cwd or stage.root, **run)


def run_volcano_job(stage: Stage, job: dict[str, Any], *, cwd: Path | None = None, **run: Any) -> list[NodeResult]:
    """A Volcano Job: the env plugin's task index and the svc plugin's host list and counts, per pod."""
    tasks = job["spec"]["tasks"]
    plugins = {}
    for task in tasks:
        key = task["name"].upper().replace("-", "_")
        plugins[f"VC_{key}_NUM"] = str(task["replicas"])
        # The svc plugin's host names (<job>-<task>-<i>.<job>) resolve to the pods; here every pod is on loopback.
        plugins[f"VC_{key}_HOSTS"] = ",".join(LOOPBACK for _ in range(task["replicas"]))
    argvs, envs = [], []
    for task in tasks:
        (container,) = task["template"]["spec"]["containers"]
        for index in range(task["replicas"]):
            argvs.append(_argv(stage, container))
            env = {**container_env(container), **plugins, "VC_TASK_INDEX": str(index), "VK_TASK_INDEX": str(index)}
            envs.append(stage.environment(env))
    return run_nodes(argvs, envs, cwd=cwd or stage.root, **run)


def run_batch_job(stage: Stage, definition: dict[str, Any], nodes: int, *, attempt: int = 1, **run: Any) -> list[NodeResult]:
    """A multi-node parallel job of a job definition as the template holds it (``AWS::Batch::JobDefinition``):
    Batch substitutes Ref:: parameters and sets the node variables (``attempt``: AWS_BATCH_JOB_ATTEMPT, 1 for
    the first). The main node's exit ends the job, as in Batch."""
    props = definition["Properties"]
    (node_range,) = props["NodeProperties"]["NodeRangeProperties"]
    container = node_range["Container"]
    return run_batch_node_properties(
        stage, command=container["Command"], environment={e["Name"]: e["Value"] for e in container["Environment"]},
        parameters=props.get("Parameters", {}), nodes=nodes, attempt=attempt, **run,
    )


def run_batch_node_properties(
    stage: Stage,
    *,
    command: Sequence[str],
    environment: Mapping[str, str],
    parameters: Mapping[str, str] | None = None,
    nodes: int,
    multinode: bool = True,
    attempt: int = 1,
    job_id: str = "rehearsal",
    cwd: Path | None = None,
    **run: Any,
) -> list[NodeResult]:
    """A Batch job's container on every node: ``command`` and ``environment`` as the job runs them (the job
    definition's, with a submit's overrides applied), ``Ref::`` parameters substituted. A single-node
    (container) job gets no node variables."""
    parameters = parameters or {}
    argv = [parameters[a.removeprefix("Ref::")] if a.startswith("Ref::") else a for a in command]
    argvs, envs = [], []
    for index in range(nodes):
        batch_vars = {"AWS_BATCH_JOB_ID": f"{job_id}#{index}" if multinode else job_id,
                      "AWS_BATCH_JOB_ATTEMPT": str(attempt)}
        if multinode:
            batch_vars.update({
                "AWS_BATCH_JOB_NUM_NODES": str(nodes), "AWS_BATCH_JOB_NODE_INDEX": str(index),
                "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
            })
            if index != 0:  # Batch leaves it unset on the main node itself
                batch_vars["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = LOOPBACK
        argvs.append([stage.substitute(a) for a in argv])
        envs.append(stage.environment({**environment, **batch_vars}))
    return run_nodes(argvs, envs, cwd=cwd or stage.root, main_decides=multinode, **run)


def run_slurm_script(
    stage: Stage, script: str, nodes: int, *args: str, env: Mapping[str, str] | None = None,
    cwd: Path | None = None, job_id: str = "42", job_name: str = "rehearsal", partition: str = "train",
    timeout: float | None = None, user: Sequence[str] = (), **substitute: Any,
) -> list[NodeResult]:
    """`sbatch -N nodes script args`: the batch step on the first node; srun starts one task per node.
    ``env``: the submitter's environment that sbatch passes on (its default, --export=ALL); the job's own
    variables in it (``TRN_JOB_ENV`` lines) get the stage's values. ``user``: a command that runs the batch step
    as the submitting user (slurmd starts it with the user's uid and the groups slurmctld sent), such as
    ``setpriv --reuid ...``; default: this process's user."""
    from trainium_cdk.app.parallelcluster.sbatch import JOB_ENV_VARIABLE

    path = stage.root / f"job-{job_id}.sbatch"
    path.write_text(stage.substitute_script(script, **substitute))
    log = stage.root / f"slurm-{job_id}-node"
    submitter = dict(env or {})
    job_env = submitter.pop(JOB_ENV_VARIABLE, None)
    work = cwd or stage.root
    node_env = stage.environment({
        **submitter,
        "SLURM_JOB_ID": job_id, "SLURM_JOB_NAME": job_name, "SLURM_JOB_PARTITION": partition,
        "SLURM_SUBMIT_DIR": str(work), "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NODELIST": f"train-st-trn1-32xlarge-[1-{nodes}]", "SLURM_NODEID": "0",
        "REHEARSAL_LOG": str(log),
    })
    if job_env is not None:  # each KEY=VALUE line with the stage's value (substituted once)
        pairs = (line.partition("=") for line in job_env.splitlines() if line)
        node_env[JOB_ENV_VARIABLE] = "\n".join(f"{k}={stage.value(k, v)}" for k, _, v in pairs)
    argv = [*user, "bash", str(path), *(stage.substitute(a) for a in args)]
    (batch_step,) = (run_nodes([argv], [node_env], cwd=work, timeout=timeout) if timeout is not None
                     else run_nodes([argv], [node_env], cwd=work))
    nodes_out = [Path(f"{log}.{i}").read_text() if Path(f"{log}.{i}").exists() else "" for i in range(nodes)]
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
