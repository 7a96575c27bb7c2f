"""Jobs on the EKS backend, through the Kubernetes API with the user's kubeconfig.

``submit`` creates the objects of the training job chart (``trainium_cdk.app.workloads.render_job``,
imported only here: it pulls in cdk8s); ``status`` reads the Job and its pods; ``logs`` streams the
pod labelled ``trainium-cdk/rank=0`` of the job.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

import yaml

from trainium_cdk.app.config import Config
from trainium_cdk.app.config.fields import image_reference
from trainium_cdk.cli._common import CliError, client, session, stack_outputs
from trainium_cdk.cli.eks_dry_run import in_namespace, launcher_once, summary
from trainium_cdk.cli.jobs import (
    CLOCK,
    FAILED,
    POLL_FACTOR,
    POLL_FIRST_S,
    POLL_MAX_S,
    SUCCEEDED,
    Clock,
    JobState,
    UserJob,
    announce,
    chatter,
    default_name,
    user_job,
    watch,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import (
    BERT_EXAMPLE_JOB,
    GROUP_LABEL,
    JOB_LABEL,
    OUTPUT_BERT_IMAGE_URI,
    OUTPUT_EXAMPLE_IMAGE_URI,
    RANK_LABEL,
    TRAINING_NAMESPACE,
    output_key,
)
from trainium_cdk.runtime.launcher import WORKER_TASK

# Pod labels naming the job, tried in this order: the training chart's own (charts/training.py
# JOB_LABEL), the one Kubernetes puts on batch/v1 Job pods, the one Volcano puts on its pods. Kept
# here rather than imported so that status and logs do not load cdk8s; a test pins them to the chart.
JOB_NAME_LABELS = (JOB_LABEL, "job-name", "volcano.sh/job-name")
DEFAULT_NAMESPACE = TRAINING_NAMESPACE  # where the stack puts the FSx claim and the workloads
# The EKS stack and its output with the example image's URI (stacks/eks_stack.py); the BERT-large
# example runs in an image of its own (examples/bert), another output of the same stack.
STACK_PART = "eks"
IMAGE_OUTPUT = output_key(OUTPUT_EXAMPLE_IMAGE_URI)
BERT_IMAGE_OUTPUT = output_key(OUTPUT_BERT_IMAGE_URI)
JOB_KINDS = ("Job", "PyTorchJob", "JobSet", "MPIJob")
# Multi-node jobs of the chart are Volcano jobs; their phase -> the states `trn status` prints.
VOLCANO_JOB = ("batch.volcano.sh", "v1alpha1", "jobs")
VOLCANO_STATES = {
    "Pending": "PENDING", "Inqueue": "PENDING", "Running": "RUNNING", "Completing": "RUNNING",
    "Completed": SUCCEEDED, "Failed": FAILED, "Aborted": FAILED, "Terminated": FAILED,
    "Restarting": "RESTARTING", "Aborting": "ABORTING", "Terminating": "TERMINATING",
}


class Kube:
    """Kubernetes API clients from the kubeconfig; nothing connects before the first call."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kubernetes import client, config

        config.load_kube_config(config_file=_kubeconfig(args), context=args.context)
        self.api = client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.namespace = args.namespace or _context_namespace(args) or DEFAULT_NAMESPACE

    def dynamic(self) -> Any:
        from kubernetes import dynamic

        return dynamic.DynamicClient(self.api)


def _kubeconfig(args: argparse.Namespace) -> str | None:
    """--kubeconfig, else $KUBECONFIG as it is now: the kubernetes client reads $KUBECONFIG once, when it is first
    imported (kube_config.KUBE_CONFIG_DEFAULT_LOCATION), so a process that runs trn twice would keep the first one."""
    return args.kubeconfig or os.environ.get("KUBECONFIG") or None


def _context_namespace(args: argparse.Namespace) -> str | None:
    from kubernetes import config

    try:
        contexts, active = config.list_kube_config_contexts(config_file=_kubeconfig(args))
    except Exception:  # noqa: BLE001 - the namespace is a convenience; load_kube_config reported real problems
        return None
    chosen = next((c for c in contexts or [] if c.get("name") == args.context), active) if args.context else active
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if isinstance(namespace, str) and namespace else None


def _api_exception() -> type[Exception]:
    from kubernetes.client.exceptions import ApiException

    return ApiException


# -- submit ------------------------------------------------------------------------------------------


# What --dry-run shows for the stack's image when it may not ask the stack (the dist/ placeholder's name).
IMAGE_PLACEHOLDER = "${TRAINING_IMAGE}"
BERT_IMAGE_PLACEHOLDER = "${BERT_IMAGE}"


def training_image(args: argparse.Namespace, config: Config, *, dry_run: bool = False) -> str:
    """--image, else the config's workloads.image, else the deployed EKS stack's example image (with
    ``dry_run``, its placeholder: a dry run needs no credentials). The BERT-large example: --image, else the
    stack's BERT image (a general workloads.image lacks its script)."""
    bert = getattr(args, "job", None) == BERT_EXAMPLE_JOB
    recipe = _recipe(config, getattr(args, "job", None))
    if recipe is not None:
        from trainium_cdk.cli.recipe_images import recipe_image

        return recipe_image(config, recipe, STACK_PART, given=args.image, dry_run=dry_run)
    if args.image:
        image = args.image
    elif config.workloads.image and not bert:
        image = config.workloads.image
    elif dry_run:
        return BERT_IMAGE_PLACEHOLDER if bert else IMAGE_PLACEHOLDER
    else:
        stack = config.stack_name(STACK_PART)
        outputs = stack_outputs(client(session(config.region), "cloudformation"), stack, config.region, backend="eks")
        key = BERT_IMAGE_OUTPUT if bert else IMAGE_OUTPUT
        if key not in outputs:
            raise CliError(f"stack {stack} has no {key} output: redeploy it, or pass --image")
        image = outputs[key]
    if not image_reference(image):  # as Batch's (batch_jobs)
        raise ConfigError("--image", image, "a real image URI such as 123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1")
    return image


def _recipe(config: Config, name: str | None) -> Any:
    """The recipe ``--job`` names, unless a configured job or an example has that name (they come first)."""
    from trainium_cdk import recipes
    from trainium_cdk.app.workloads import example_settings

    if name is None or name in {s.name for s in (*config.workloads.jobs, *example_settings(config))}:
        return None
    return recipes.recipe_for(config, name, STACK_PART) if recipes.find(name) is not None else None


def render(config: Config, job: UserJob, *, name: str, image: str, team: str | None = None) -> list[dict[str, Any]]:
    from trainium_cdk.app.workloads import render_job

    objects = render_job(
        config, group=job.group.name, name=name, nodes=job.nodes, job=job.job, image=image,
        command=job.program, env=job.env, team=team,
    )
    if not objects:
        raise CliError(f"the training job chart rendered no objects for group {job.group.name}")
    return list(objects)


def submit(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    job = user_job(args, config)
    name = args.name or default_name(job.group)
    image = training_image(args, config, dry_run=args.dry_run)
    objects = render(config, job, name=name, image=image, team=getattr(args, "team", None))
    if args.dry_run:
        # The namespace a submit would use: --namespace, else the kubeconfig context's, else the stack's.
        namespace = args.namespace or _context_namespace(args) or DEFAULT_NAMESPACE
        objects = [launcher_once(in_namespace(o, namespace)) for o in objects]
        out.write(summary(job, objects, name=name, image=image, namespace=namespace,
                          placeholder=image in (IMAGE_PLACEHOLDER, BERT_IMAGE_PLACEHOLDER)))
        out.write(yaml.safe_dump_all(objects, sort_keys=False))
        return 0
    kube = Kube(args)
    create(kube, objects, name=name, out=chatter(args, out, err))
    ns = kube.namespace
    announce(args, out, err, job=name, summary=f"submitted {name} to namespace {ns}", backend="eks", namespace=ns)
    return 0


def create(kube: Kube, objects: list[dict[str, Any]], *, name: str, out: TextIO) -> None:
    """Create the objects in the kube's namespace (an existing job of that name, or of a job kind, is an
    error; an existing shared object is left as it is); also `trn check fabric`'s path."""
    dyn = kube.dynamic()
    api_exception = _api_exception()
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    for obj in objects:
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        meta = obj.get("metadata") or {}
        try:
            resource = dyn.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            raise CliError(
                f"the cluster does not know {kind} ({api_version}): install its controller or CRD "
                "(deploy the EKS stack of this project) and submit again"
            ) from None
        # The namespace the user chose (--namespace, else the kubeconfig context's), not the chart's default.
        namespace = kube.namespace if resource.namespaced else None
        if namespace:
            obj = {**obj, "metadata": {**meta, "namespace": namespace}}
        where = f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))
        try:
            if namespace:
                dyn.create(resource, body=obj, namespace=namespace)
            else:
                dyn.create(resource, body=obj)
        except api_exception as error:
            if getattr(error, "status", None) != 409:
                raise
            if meta.get("name") == name or kind in JOB_KINDS:
                raise CliError(
                    f"{kind} {where} already exists: pick another --name, or delete it "
                    f"(`kubectl delete {kind.lower()} {meta.get('name')} -n {namespace or DEFAULT_NAMESPACE}`)"
                ) from None
            out.write(f"exists  {kind} {where} (left as it is)\n")
            continue
        out.write(f"created {kind} {where}\n")


# -- status ------------------------------------------------------------------------------------------


def _pods(kube: Kube, name: str, *, rank: str | None = None) -> tuple[str, list[Any]]:
    """(selector, pods) of job ``name``: the first job-name label that finds any pod."""
    prefix = f"{RANK_LABEL}={rank}," if rank is not None else ""
    for label in JOB_NAME_LABELS:
        selector = f"{prefix}{label}={name}"
        pods = kube.core.list_namespaced_pod(kube.namespace, label_selector=selector).items or []
        if pods:
            return selector, sorted(pods, key=lambda p: (_rank(p), str(getattr(p.metadata, "name", ""))))
    return f"{prefix}{JOB_NAME_LABELS[0]}={name}", []


def _rank(pod: Any) -> int:
    labels = getattr(pod.metadata, "labels", None) or {}
    try:
        return int(labels.get(RANK_LABEL, 1_000_000))
    except (TypeError, ValueError):
        return 1_000_000


def _pod_line(pod: Any) -> str:
    status = pod.status
    labels = pod.metadata.labels or {}
    phase = getattr(status, "phase", None) or "Unknown"
    why = ""
    for cs in getattr(status, "container_statuses", None) or []:
        waiting = getattr(getattr(cs, "state", None), "waiting", None)
        terminated = getattr(getattr(cs, "state", None), "terminated", None)
        if waiting is not None and waiting.reason:
            why = waiting.reason
        elif terminated is not None and terminated.reason:
            why = f"{terminated.reason} (exit {terminated.exit_code})"
    if phase == "Pending" and not why:
        for cond in getattr(status, "conditions", None) or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                why = f"unschedulable: {cond.message}" if cond.message else (cond.reason or "")
    node = getattr(pod.spec, "node_name", None) or "-"
    rank = labels.get(RANK_LABEL, "?")
    return f"{pod.metadata.name}  rank {rank}  {phase}  node {node}" + (f"  {why}" if why else "")


def _read_job(kube: Kube, name: str) -> tuple[str | None, Any]:
    """('batch', V1Job) or ('volcano', dict) or (None, None) when neither kind of job has that name."""
    api_exception = _api_exception()
    try:
        return "batch", kube.batch.read_namespaced_job_status(name, kube.namespace)
    except api_exception as error:
        if getattr(error, "status", None) != 404:
            raise
    group, version, plural = VOLCANO_JOB
    try:
        return "volcano", kube.custom.get_namespaced_custom_object(group, version, kube.namespace, plural, name)
    except api_exception as error:
        if getattr(error, "status", None) != 404:  # 404 also when Volcano is not installed
            raise
    return None, None


def _batch_job_state(job: Any) -> tuple[str, str] | None:
    for cond in getattr(getattr(job, "status", None), "conditions", None) or []:
        if cond.status != "True":
            continue
        reason = ": ".join(x for x in (cond.reason, cond.message) if x)
        if cond.type in ("Complete", "SuccessCriteriaMet"):
            return SUCCEEDED, reason
        if cond.type in ("Failed", "FailureTarget"):
            return FAILED, reason
        if cond.type == "Suspended":
            return "SUSPENDED", reason
    return None


def _volcano_job_state(job: dict[str, Any]) -> tuple[str, str] | None:
    state = ((job or {}).get("status") or {}).get("state") or {}
    phase = state.get("phase")
    if not phase:
        return None
    reason = ": ".join(str(x) for x in (state.get("reason"), state.get("message")) if x)
    return VOLCANO_STATES.get(phase, str(phase).upper()), reason


def job_state(kube: Kube, name: str) -> JobState:
    kind, job = _read_job(kube, name)
    _, pods = _pods(kube, name)
    if kind is None and not pods:
        raise CliError(
            f"no job {name} in namespace {kube.namespace}: check the name and --namespace "
            "(`kubectl get jobs,vcjob -A`)"
        )
    lines = [_pod_line(p) for p in pods]
    phases = [getattr(p.status, "phase", None) or "Unknown" for p in pods]
    counts = ", ".join(f"{phases.count(ph)} {ph.lower()}" for ph in dict.fromkeys(phases))
    detail = f"{len(pods)} pod(s): {counts}" if pods else "no pods yet"
    known = _batch_job_state(job) if kind == "batch" else _volcano_job_state(job) if kind == "volcano" else None
    if known is not None and (known[0] in (SUCCEEDED, FAILED) or kind == "volcano"):
        state, reason = known
        return JobState(state, f"{detail}; {reason}" if reason else detail, lines)
    if known is not None:  # a suspended batch/v1 Job
        return JobState(known[0], detail, lines)
    if not pods:
        return JobState("PENDING", detail, lines)
    if kind is None and all(ph == "Succeeded" for ph in phases):
        return JobState(SUCCEEDED, detail, lines)
    if kind is None and any(ph == "Failed" for ph in phases):
        return JobState(FAILED, detail, lines)
    if all(ph in ("Running", "Succeeded") for ph in phases):
        return JobState("RUNNING", detail, lines)
    if any(ph == "Running" for ph in phases):
        return JobState("STARTING", detail, lines)
    return JobState("PENDING", detail, lines)


def status(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO, clock: Clock = CLOCK) -> int:
    kube = Kube(args)
    final = watch(
        lambda: job_state(kube, args.job), out=out, wait=args.wait, label=f"job {kube.namespace}/{args.job}",
        timeout=args.timeout, clock=clock,
    )
    return 1 if final.state == FAILED else 0


def cancel(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    """Delete the job; Background propagation deletes its pods too (a batch/v1 Job deleted through the
    API without a policy leaves them running, orphaned)."""
    kube = Kube(args)
    kind, _ = _read_job(kube, args.job)
    if kind is None:
        raise CliError(
            f"no job {args.job} in namespace {kube.namespace}: check the name and --namespace "
            "(`kubectl get jobs,vcjob -A`)"
        )
    if kind == "batch":
        kube.batch.delete_namespaced_job(name=args.job, namespace=kube.namespace, propagation_policy="Background")
        what = "Job"
    else:
        group, version, plural = VOLCANO_JOB
        kube.custom.delete_namespaced_custom_object(
            group, version, kube.namespace, plural, args.job, propagation_policy="Background"
        )
        what = "Volcano Job"
    out.write(f"deleted {what} {kube.namespace}/{args.job} and its pods\n")
    return 0


# -- logs --------------------------------------------------------------------------------------------


def rank_pod(kube: Kube, name: str, rank: int = 0) -> tuple[str, Any | None]:
    """The pod of node rank ``rank`` of job ``name``: the leader (labelled rank 0), or Volcano's worker pod
    ``<job>-worker-<rank - 1>`` (the launcher's node rank is the task index plus one there)."""
    if rank == 0:
        selector, pods = _pods(kube, name, rank="0")
    else:
        selector, found = _pods(kube, name)
        worker = f"{name}-{WORKER_TASK}-{rank - 1}"
        pods = [p for p in found if p.metadata.name == worker]
        selector = f"pod {worker} ({selector})"
    # A restarted job leaves older rank-0 pods behind: the newest one is the one running.
    newest = max(pods, key=lambda p: str(getattr(p.metadata, "creation_timestamp", "") or ""), default=None)
    return selector, newest


def logs(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO, clock: Clock = CLOCK) -> int:
    kube = Kube(args)
    delay = POLL_FIRST_S
    announced = False
    while True:
        selector, pod = rank_pod(kube, args.job, args.rank)
        phase = getattr(getattr(pod, "status", None), "phase", None) if pod is not None else None
        if pod is not None and phase not in (None, "Pending"):
            break
        if not args.follow:
            if pod is None:
                raise CliError(
                    f"no pod labelled {selector} in namespace {kube.namespace}: "
                    "check the job name and --namespace; `--follow` waits for the pod"
                )
            raise CliError(
                f"rank-{args.rank} pod {pod.metadata.name} is Pending: no logs yet; `--follow` waits for it", code=1
            )
        if not announced:
            err.write(f"waiting for the rank-{args.rank} pod of {args.job} to start...\n")
            announced = True
        clock.sleep(delay)
        delay = min(POLL_MAX_S, delay * POLL_FACTOR)

    container = args.container or pod.spec.containers[0].name
    pod_name = pod.metadata.name
    if not args.follow:
        text = kube.core.read_namespaced_pod_log(name=pod_name, namespace=kube.namespace, container=container)
        out.write(text if text.endswith("\n") or not text else text + "\n")
        return 0
    # Unread (_preload_content=False): a urllib3 response, not the str the client declares.
    response: Any = kube.core.read_namespaced_pod_log(
        name=pod_name, namespace=kube.namespace, container=container, follow=True, _preload_content=False
    )
    try:
        for chunk in response.stream():
            out.write(chunk.decode("utf-8", errors="replace") if isinstance(chunk, bytes) else str(chunk))
            out.flush()
    finally:
        response.release_conn()
    final = kube.core.read_namespaced_pod(pod_name, kube.namespace)
    phase = getattr(final.status, "phase", None)
    err.write(f"pod {pod_name} {phase}\n")
    return 1 if phase == "Failed" else 0


# -- jobs --------------------------------------------------------------------------------------------


def _selected_group(template_spec: Any) -> str | None:
    return ((template_spec or {}).get("nodeSelector") or {}).get(GROUP_LABEL)


def list_jobs(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    """The training jobs of a group in the namespace (batch/v1 and Volcano), newest first."""
    from trainium_cdk.cli._common import table
    from trainium_cdk.cli.jobs import group_of

    group = group_of(config, args.group)
    kube = Kube(args)
    api = kube.api
    rows = []
    for job in kube.batch.list_namespaced_job(kube.namespace, label_selector=JOB_LABEL).items or []:
        raw = api.sanitize_for_serialization(job)
        if _selected_group(raw["spec"]["template"].get("spec")) != group.name:
            continue
        active = getattr(job.status, "active", None) or 0
        state = (_batch_job_state(job) or ("RUNNING" if active else "PENDING", ""))[0]
        rows.append((raw["metadata"].get("creationTimestamp", ""), raw["metadata"]["name"], state, "1"))
    group_, version, plural = VOLCANO_JOB
    api_exception = _api_exception()
    try:
        listed: Any = kube.custom.list_namespaced_custom_object(
            group_, version, kube.namespace, plural, label_selector=JOB_LABEL
        )
        volcano = listed.get("items", [])
    except api_exception as error:
        if getattr(error, "status", None) != 404:  # Volcano not installed: no such jobs
            raise
        volcano = []
    for job in volcano:
        tasks = job.get("spec", {}).get("tasks", [])
        if not tasks or _selected_group(tasks[0]["template"].get("spec")) != group.name:
            continue
        state = (_volcano_job_state(job) or ("PENDING", ""))[0]
        nodes = sum(int(t.get("replicas", 0)) for t in tasks)
        rows.append((job["metadata"].get("creationTimestamp", ""), job["metadata"]["name"], state, str(nodes)))
    rows.sort(key=lambda r: str(r[0]), reverse=True)
    if not rows:
        out.write(f"no jobs of group {group.name} in namespace {kube.namespace}\n")
        return 0
    table([(name, state, nodes, str(created)) for created, name, state, nodes in rows[: args.limit]],
          ["JOB", "STATE", "NODES", "SUBMITTED"], out)
    return 0
