"""What `trn submit --backend eks --dry-run` prints before the objects: the namespace a submit would use, and a summary
of the job (issue 49: it always said `namespace: training`, and its hundreds of lines began with the manifest)."""

from __future__ import annotations

import shlex
from typing import Any

from trainium_cdk.cli.jobs import UserJob
from trainium_cdk.facts.names import CHECKPOINT_ROOT
from trainium_cdk.runtime.launcher import WORKDIR_VARIABLE


def in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A chart's namespaced object (one whose metadata names a namespace) in ``namespace``."""
    meta = obj.get("metadata") or {}
    return {**obj, "metadata": {**meta, "namespace": namespace}} if "namespace" in meta else obj


def summary(job: UserJob, objects: list[dict[str, Any]], *, name: str, image: str, namespace: str,
            placeholder: bool) -> str:
    """What the dry run's YAML says, first and in a few lines (comments: the output stays `kubectl apply`-able)."""
    (training,) = [o for o in objects if o.get("kind") == "Job"] or [objects[0]]
    spec = training.get("spec") or {}
    if "tasks" in spec:
        nodes, pod = sum(t["replicas"] for t in spec["tasks"]), spec["tasks"][0]["template"]["spec"]
    else:
        nodes, pod = 1, spec.get("template", {}).get("spec", {})
    (container,) = pod.get("containers") or [{}]
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    mounts = ", ".join(f"{m['mountPath']} ({m['name']})" for m in container.get("volumeMounts", [])) or "none"
    kind = f"{training.get('kind')} ({training.get('apiVersion')})"
    lines = [
        f"dry run: would create {len(objects)} object(s) in namespace {namespace} of your kubeconfig's cluster",
        f"job:         {name}, a {kind} of {nodes} node(s) x {env.get('NPROC_PER_NODE', '?')} processes, "
        + (f"group {job.group.name} ({job.group.instance_type})" if "nodeSelector" in pod
           else "the system nodes (CPU work: no Neuron device)"),
        f"image:       {image}" + (" (the eks stack's image output at submit time, or pass --image)" if placeholder
                                   else ""),
        "command:     " + (shlex.join(job.program) if job.program else f"recipe or example {job.job}'s"),
        f"your env:    {' '.join(f'{k}={v}' for k, v in job.env.items()) or 'none'}",
        f"mounts:      {mounts}",
        "starts in:   " + (env.get(WORKDIR_VARIABLE) or "the image's working directory"),
        f"checkpoints: {env.get('TRN_CHECKPOINT_ROOT', CHECKPOINT_ROOT)}/{name}",
        "(every $ in the command and env is written $$: Kubernetes passes it as written, as the other backends do)",
        *(["(the launcher once: each task after the first runs the same command, a YAML alias: *id001)"]
          if "tasks" in spec else []),
    ]
    return "".join(f"# {line}\n" for line in lines)


def launcher_once(obj: dict[str, Any]) -> dict[str, Any]:
    """A Volcano job whose tasks run the same command (the launcher, then the job's): one list for all, which YAML
    writes once (an anchor) and refers to from the others (an alias), as kubectl reads it. The same object, a
    shorter text: the launcher is hundreds of lines."""
    first: list[Any] | None = None
    for task in (obj.get("spec") or {}).get("tasks") or []:
        for container in task["template"]["spec"].get("containers", []):
            if first is None:
                first = container["command"]
            elif container["command"] == first:
                container["command"] = first
    return obj
