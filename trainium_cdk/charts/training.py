"""Training workloads on the EKS cluster: single-node and multi-node jobs, data loading, a shell, TensorBoard.

Every pod that trains asks for all Neuron devices (and, across nodes, all EFA interfaces) of its
instance type from the catalog, lands on its compute group's nodes (one AZ, one subnet), tolerates
the Neuron taint and mounts the FSx volume at /fsx. Multi-node jobs are Volcano jobs: gang-scheduled
(all pods or none), a leader task whose pod is labelled ``trainium-cdk/rank=0``, and torchrun's static
rendezvous on the leader's stable DNS name (no etcd).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cdk8s import Chart
from constructs import Construct

from trainium_cdk.charts._k8s import (
    CHART_LABELS,
    INSTANCE_TYPE_LABEL,
    NEURON_NO_SCHEDULE,
    POD_SECURITY,
    api_object,
    check_name,
    container_security,
    literal,
    service_account,
    workload,
)
from trainium_cdk.charts.admission import loader_admission
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import EFA_RESOURCE, NEURON_RESOURCE
from trainium_cdk.facts.names import (
    CLAIM_NAME,
    DATA_LOADER_JOB,
    DATA_LOADER_SERVICE_ACCOUNT,
    GROUP_LABEL,
    JOB_LABEL,
    QUEUE_NAME,
    RANK_LABEL,
    SHARED_MOUNT,
    TRAINING_NAMESPACE,
)
from trainium_cdk.facts.teams import TEAM_TAG, team_queue
from trainium_cdk.runtime.jobs import JobSpec
from trainium_cdk.runtime.launcher import LEADER_TASK, RANK_OFFSET_VARIABLE, WORKER_TASK

# Karpenter neither consolidates nor drifts a node running a pod so annotated: a gang loses no member
# to a voluntary disruption mid-run (Karpenter docs, concepts/disruption). Ignored without Karpenter.
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}
DEFAULT_CLAIM = CLAIM_NAME
DEFAULT_NAMESPACE = TRAINING_NAMESPACE
DEFAULT_QUEUE = QUEUE_NAME
VOLCANO_SCHEDULER = "volcano"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"  # a pod's queue (Volcano's example/deploy-with-volcano)
# Chart ids (dist/ file names, EKS stack construct ids): the queues, each job as job-<name>; both need Volcano's CRDs.
QUEUE_CHART_ID = "volcano-queue"
JOB_CHART_PREFIX = "job-"
DATA_VOLUME = "data"
SHM_VOLUME = "dshm"
# A training pod requests three quarters of the node's vCPUs and memory (Burstable: it may use the rest), the
# kubelet, the device plugins and the CSI node driver keep the other quarter.
TRAINING_SHARE = 0.75
# Neuron images run as root with the runtime's default capabilities (EFA, the Neuron runtime): only NET_RAW dropped.
TRAINING_SECURITY = container_security(drop=("NET_RAW",))
# The data pods: requests within a system node, memory limits against a runaway process.
DATA_LOADER_RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
# A CPU-only job (a data preparation): room within a system node (m7i.large by default, 8 GiB), a memory limit.
CPU_JOB_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
SHELL_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
TENSORBOARD_RESOURCES = {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "4Gi"}}
# TensorBoard only reads event files: it runs as nobody.
NOBODY = 65534
# The archive loader's unpack step ($1 the archive, $2 the directory): options BusyBox and GNU tar both take.
UNPACK_SCRIPT = 'tar -x -o -f "$1" -C "$2" && rm -f "$1"'
CODE_VOLUME = "code"  # the volume of a job's code from a ConfigMap (JobSpec.code)


def _check_path(field: str, path: str) -> None:
    if path.startswith("/") or ".." in path.split("/"):
        raise ConfigError(field, path, "a relative directory under /fsx, such as datasets/wiki")


def _data_volumes(claim_name: str | None) -> list[dict[str, Any]]:
    # PyTorch data loaders share tensors through /dev/shm; the container default (64 MiB) is too small.
    shm = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    if claim_name is None:
        return shm
    return [{"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim_name}}, *shm]


def _data_mounts(claim_name: str | None) -> list[dict[str, Any]]:
    shm = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    return shm if claim_name is None else [{"name": DATA_VOLUME, "mountPath": SHARED_MOUNT}, *shm]


def training_pod_spec(job: JobSpec, *, env: Mapping[str, str], claim_name: str) -> dict[str, Any]:
    """The pod of one node of a job: all the node's devices, its group's nodes, the launcher, and the
    data volume when the job uses shared storage."""
    if job.service_account:
        check_name("job.service_account", job.service_account)
    limits = {NEURON_RESOURCE: str(job.instance.neuron_devices)}
    if job.distributed and job.instance.has_efa:
        limits[EFA_RESOURCE] = str(job.instance.efa_interfaces)
    selector = {INSTANCE_TYPE_LABEL: job.instance.name}
    if job.group:
        selector[GROUP_LABEL] = job.group
    requests = {
        "cpu": str(int(job.instance.vcpus * TRAINING_SHARE)),
        "memory": f"{int(job.instance.memory_gib * TRAINING_SHARE)}Gi",
    }
    resources = {"requests": requests, "limits": limits}  # Neuron and EFA through limits (requests default to them)
    placement: dict[str, Any] = {"nodeSelector": selector, "tolerations": [NEURON_NO_SCHEDULE]}
    if job.cpu_only:
        # No Neuron device and no Trainium taint tolerated: the system nodes run it, not a node billed by the hour
        # for its accelerators.
        resources, placement = CPU_JOB_RESOURCES, {}
    claim = claim_name if job.shared_storage else None
    volumes, mounts = _data_volumes(claim), _data_mounts(claim)
    if job.code is not None:
        config_map, directory = job.code
        check_name("job.code", config_map)
        volumes.append({"name": CODE_VOLUME, "configMap": {"name": config_map}})
        mounts.append({"name": CODE_VOLUME, "mountPath": directory, "readOnly": True})
    return {
        "restartPolicy": "Never",
        "securityContext": POD_SECURITY,
        # Training talks to its peers, not to the Kubernetes API; a job that calls AWS runs as its service account,
        # whose role EKS Pod Identity hands the pod (as the archive loader's).
        **({"serviceAccountName": job.service_account} if job.service_account
           else {"automountServiceAccountToken": False}),
        **placement,
        "containers": [
            {
                "name": "train",
                "image": job.image,
                "command": [literal(word) for word in job.launch()],
                "env": [{"name": k, "value": literal(v)} for k, v in env.items()],
                "resources": resources,
                "securityContext": TRAINING_SECURITY,
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }


class SingleNodeTrainingJob(Chart):
    """A Kubernetes Job: the launcher runs torchrun on every NeuronCore of one node.

    :param job: the job (``nodes`` must be 1).
    :param claim_name: the FSx PersistentVolumeClaim mounted at /fsx. Default: ``fsx-lustre``.
    :param namespace: Default: ``default``.
    """

    def __init__(
        self, scope: Construct, id: str, *, job: JobSpec, claim_name: str = DEFAULT_CLAIM,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        if job.distributed:
            raise ConfigError("SingleNodeTrainingJob.job.nodes", job.nodes, "1; use DistributedTrainingJob")
        super().__init__(scope, id, labels=CHART_LABELS)
        labels = {JOB_LABEL: job.name, RANK_LABEL: "0", **_team_label(job)}
        pod, annotations = training_pod_spec(job, env=job.environment(), claim_name=claim_name), dict(DO_NOT_DISRUPT)
        if job.team:  # Volcano schedules it in the team's queue (its controller makes the pod a PodGroup)
            pod, annotations[QUEUE_ANNOTATION] = {**pod, "schedulerName": VOLCANO_SCHEDULER}, team_queue(job.team)
        self.job = api_object(
            self, "Job", api_version="batch/v1", kind="Job", name=job.name, namespace=namespace, labels=labels,
            spec={"backoffLimit": job.retries,
                  "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod}},
        )


class DistributedTrainingJob(Chart):
    """A Volcano Job of ``nodes`` pods x ``processes_per_node`` processes, gang-scheduled.

    Task ``leader`` (one pod, node rank 0, labelled ``trainium-cdk/rank=0``) and task ``worker``
    (nodes - 1 pods, node rank = task index + 1). Volcano's ``svc`` plugin gives every pod a stable
    name, ``<job>-leader-0.<job>``, which is the rendezvous address (``VC_LEADER_HOSTS``); its ``env``
    plugin exports ``VC_TASK_INDEX``. The launcher derives node rank and count from them at run time
    (``trainium_cdk.runtime.launcher``). A failed or evicted pod restarts the whole job, up to ``job.retries`` times.

    :param job: the job (``nodes`` at least 2).
    :param queue: the Volcano queue. Default: ``training``.
    :param claim_name: the FSx PersistentVolumeClaim mounted at /fsx. Default: ``fsx-lustre``.
    :param namespace: Default: ``default``.
    """

    def __init__(
        self, scope: Construct, id: str, *, job: JobSpec, queue: str = DEFAULT_QUEUE,
        claim_name: str = DEFAULT_CLAIM, namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        if not job.distributed:
            raise ConfigError("DistributedTrainingJob.job.nodes", job.nodes, "at least 2; use SingleNodeTrainingJob")
        check_name("DistributedTrainingJob.queue", queue)
        super().__init__(scope, id, labels=CHART_LABELS)
        # The svc plugin's stable name of the leader pod; the launcher reads it from VC_LEADER_HOSTS.
        self.master_addr = f"{job.name}-{LEADER_TASK}-0.{job.name}"
        tasks = [
            self._task(job, LEADER_TASK, 1, "0", 0, claim_name),
            self._task(job, WORKER_TASK, job.nodes - 1, "worker", 1, claim_name),
        ]
        self.volcano_job = api_object(
            self, "Job", api_version="batch.volcano.sh/v1alpha1", kind="Job", name=job.name, namespace=namespace,
            labels={JOB_LABEL: job.name, **_team_label(job)},
            spec={
                "schedulerName": VOLCANO_SCHEDULER,
                "queue": team_queue(job.team) if job.team else queue,
                "minAvailable": job.nodes,  # the gang: all nodes start together or none does
                "maxRetry": job.retries,
                "policies": [
                    {"event": "PodEvicted", "action": "RestartJob"},
                    {"event": "PodFailed", "action": "RestartJob"},
                ],
                "plugins": {"svc": [], "env": []},
                "tasks": tasks,
            },
        )

    @staticmethod
    def _task(job: JobSpec, name: str, replicas: int, rank: str, rank_offset: int, claim_name: str) -> dict[str, Any]:
        # Node rank = offset + the env plugin's VC_TASK_INDEX: 0 for the leader, 1.. for the workers.
        env = {**job.environment(), RANK_OFFSET_VARIABLE: str(rank_offset)}
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {JOB_LABEL: job.name, RANK_LABEL: rank, **_team_label(job)},
                             "annotations": dict(DO_NOT_DISRUPT)},
                "spec": training_pod_spec(job, env=env, claim_name=claim_name),
            },
        }


class ServiceAccountChart(Chart):
    """A service account of the training namespace that a stack binds to an IAM role (EKS Pod Identity), for the
    jobs that name it (``TrainingJobSettings.service_account``).

    :param name: its name.
    :param namespace: Default: ``training``.
    """

    def __init__(self, scope: Construct, id: str, *, name: str, namespace: str = DEFAULT_NAMESPACE) -> None:
        check_name("ServiceAccountChart.name", name)
        super().__init__(scope, id, labels=CHART_LABELS)
        self.service_account = service_account(self, "ServiceAccount", name=name, namespace=namespace)


class VolcanoQueue(Chart):
    """The Volcano queue training jobs are submitted to, and one per team (``team-<team>``, weighted by its share:
    Volcano's proportion plugin gives each queue the part of the cluster its weight deserves).

    :param name: Default: ``training``.
    :param weight: share of the cluster against other queues. Default: 1.
    :param teams: each team's share. Default: none.
    """

    def __init__(self, scope: Construct, id: str, *, name: str = DEFAULT_QUEUE, weight: int = 1,
                 teams: Mapping[str, int] | None = None) -> None:
        check_name("VolcanoQueue.name", name)
        super().__init__(scope, id, labels=CHART_LABELS)
        for queue, share, team in ((name, weight, None), *((team_queue(t), s, t) for t, s in (teams or {}).items())):
            if share < 1:
                raise ConfigError("VolcanoQueue.weight", share, "at least 1")
            self.queue = api_object(
                self, f"Queue-{team}" if team else "Queue", api_version="scheduling.volcano.sh/v1beta1", kind="Queue",
                name=queue, labels={TEAM_TAG: team} if team else None, spec={"weight": share, "reclaimable": False},
            )


class DataLoaderJob(Chart):
    """A Job that syncs an S3 prefix into the FSx volume, for file systems without a data repository
    association. Its service account gets S3 read through EKS Pod Identity (the stack binds a role), and an
    admission policy (:func:`loader_admission`) keeps every other pod of the namespace from running as it.

    :param s3_uri: ``s3://bucket/prefix``.
    :param path: directory under /fsx. Default: ``datasets``.
    :param service_account: the service account the Job runs as. Default: ``data-loader``.
    :param claim_name: the FSx PersistentVolumeClaim mounted at /fsx. Default: ``fsx-lustre``.
    :param namespace: the Job's namespace. Default: ``training``.
    :param image: the AWS CLI image that copies. Default: ``versions.AWS_CLI_IMAGE``.
    """

    def __init__(
        self, scope: Construct, id: str, *, s3_uri: str, path: str = "datasets",
        service_account: str = DATA_LOADER_SERVICE_ACCOUNT, claim_name: str = DEFAULT_CLAIM,
        namespace: str = DEFAULT_NAMESPACE, image: str = versions.AWS_CLI_IMAGE,
    ) -> None:
        if not s3_uri.startswith("s3://") and not s3_uri.startswith("${"):
            raise ConfigError("DataLoaderJob.s3_uri", s3_uri, "an S3 URI such as s3://my-bucket/datasets/")
        _check_path("DataLoaderJob.path", path)
        check_name("DataLoaderJob.service_account", service_account)
        super().__init__(scope, id, labels=CHART_LABELS)
        self.service_account = api_object(
            self, "ServiceAccount", api_version="v1", kind="ServiceAccount", name=service_account, namespace=namespace
        )
        self.job = api_object(
            self, "Job", api_version="batch/v1", kind="Job", name=DATA_LOADER_JOB, namespace=namespace,
            spec={
                "backoffLimit": 3,
                "template": {
                    "spec": {
                        "serviceAccountName": service_account,
                        "restartPolicy": "OnFailure",
                        "securityContext": POD_SECURITY,
                        "containers": [
                            {
                                "name": "sync",
                                "image": image,
                                "args": ["s3", "sync", "--only-show-errors", s3_uri, f"{SHARED_MOUNT}/{path}"],
                                "resources": DATA_LOADER_RESOURCES,
                                # Root (the file system's root directory is root's), without capabilities.
                                "securityContext": container_security(),
                                "volumeMounts": [{"name": DATA_VOLUME, "mountPath": SHARED_MOUNT}],
                            }
                        ],
                        "volumes": [{"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim_name}}],
                    }
                },
            },
        )
        self.admission_policy, self.admission_binding = loader_admission(
            self, service_account=service_account, job=DATA_LOADER_JOB, namespace=namespace
        )


class ArchiveLoaderJob(Chart):
    """A Job that copies one tar archive from S3 into the FSx volume and unpacks it there, as dataset
    tutorials do by hand (`aws s3 cp`, `tar -xf`, `rm`): an init container downloads it beside its
    destination with the AWS CLI, then a BusyBox container unpacks it and removes it (the AWS CLI image
    has no tar). On the system nodes, like the data loader.

    :param s3_uri: ``s3://bucket/key.tar``.
    :param path: directory under /fsx it unpacks into. Default: ``datasets``.
    :param name: the Job's name. Default: ``archive-loader``.
    :param service_account: whose credentials read the archive (EKS Pod Identity, as the data loader's; one of
        its own: the data loader's admits only the data loader's Job), or None for an anonymous request, which
        public buckets (Neuron's datasets) answer. Default: None.
    """

    def __init__(
        self, scope: Construct, id: str, *, s3_uri: str, path: str = "datasets", name: str = "archive-loader",
        service_account: str | None = None, claim_name: str = DEFAULT_CLAIM, namespace: str = DEFAULT_NAMESPACE,
        aws_cli_image: str = versions.AWS_CLI_IMAGE, unpack_image: str = versions.BUSYBOX_IMAGE,
    ) -> None:
        if not re.fullmatch(r"s3://[^/]+/.+\.tar", s3_uri):
            raise ConfigError(
                "ArchiveLoaderJob.s3_uri", s3_uri, "the S3 URI of one .tar archive, such as s3://my-bucket/wiki.tar"
            )
        _check_path("ArchiveLoaderJob.path", path)
        check_name("ArchiveLoaderJob.name", name)
        if service_account is not None:
            check_name("ArchiveLoaderJob.service_account", service_account)
        super().__init__(scope, id, labels=CHART_LABELS)
        self.destination = f"{SHARED_MOUNT}/{path}".rstrip("/")
        # Beside its destination, on the file system: an archive of tens of GB fits no node's disk.
        self.archive = f"{self.destination}/.{s3_uri.rsplit('/', 1)[1]}"
        mounts = [{"name": DATA_VOLUME, "mountPath": SHARED_MOUNT}]
        download = ["s3", "cp", "--no-progress", *(["--no-sign-request"] if service_account is None else [])]
        identity: dict[str, Any] = (
            {"automountServiceAccountToken": False} if service_account is None
            else {"serviceAccountName": service_account}
        )
        self.job = api_object(
            self, "Job", api_version="batch/v1", kind="Job", name=name, namespace=namespace,
            spec={
                "backoffLimit": 3,
                "template": {
                    "spec": {
                        **identity,
                        # A failed unpack restarts only its container: the archive stays downloaded.
                        "restartPolicy": "OnFailure",
                        "securityContext": POD_SECURITY,
                        "initContainers": [
                            {
                                "name": "download",
                                "image": aws_cli_image,
                                "args": [*download, s3_uri, self.archive],
                                "resources": DATA_LOADER_RESOURCES,
                                "securityContext": container_security(),
                                "volumeMounts": mounts,
                            }
                        ],
                        "containers": [
                            {
                                "name": "unpack",
                                "image": unpack_image,
                                # Root without capabilities (see DataLoaderJob): -o keeps the archive's
                                # owners out, which only CAP_CHOWN could set.
                                "command": ["sh", "-c", UNPACK_SCRIPT, "unpack", self.archive, self.destination],
                                "resources": DATA_LOADER_RESOURCES,
                                "securityContext": container_security(),
                                "volumeMounts": mounts,
                            }
                        ],
                        "volumes": [{"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim_name}}],
                    }
                },
            },
        )


class ShellPod(Chart):
    """An interactive pod with the FSx volume at /fsx: `kubectl exec -it data-shell -- bash`.

    Runs on the system nodes (no Neuron devices), in the training image so its tools match.

    :param image: the training image.
    :param claim_name: the FSx PersistentVolumeClaim mounted at /fsx. Default: ``fsx-lustre``.
    :param namespace: the pod's namespace. Default: ``training``.
    """

    def __init__(
        self, scope: Construct, id: str, *, image: str, claim_name: str = DEFAULT_CLAIM,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        super().__init__(scope, id, labels=CHART_LABELS)
        self.pod = api_object(
            self, "Pod", api_version="v1", kind="Pod", name="data-shell", namespace=namespace,
            spec={
                "securityContext": POD_SECURITY,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "shell",
                        "image": image,
                        "command": ["sleep", "infinity"],
                        "resources": SHELL_RESOURCES,
                        # The training image's user (root), as in a job, so that files it writes match.
                        "securityContext": TRAINING_SECURITY,
                        "volumeMounts": [{"name": DATA_VOLUME, "mountPath": SHARED_MOUNT}],
                    }
                ],
                "volumes": [{"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim_name}}],
            },
        )


class TensorBoard(Chart):
    """TensorBoard reading runs on the FSx volume, behind a ClusterIP Service (no public load balancer,
    no password baked into an image): `kubectl port-forward svc/tensorboard 6006`.

    :param log_dir: directory under /fsx with the event files. Default: ``runs``.
    :param claim_name: the FSx PersistentVolumeClaim mounted at /fsx. Default: ``fsx-lustre``.
    :param namespace: its namespace. Default: ``training``.
    :param image: the TensorBoard image. Default: ``versions.TENSORBOARD_IMAGE``.
    """

    PORT = 6006

    def __init__(
        self, scope: Construct, id: str, *, log_dir: str = "runs", claim_name: str = DEFAULT_CLAIM,
        namespace: str = DEFAULT_NAMESPACE, image: str = versions.TENSORBOARD_IMAGE,
    ) -> None:
        if log_dir.startswith("/") or ".." in log_dir.split("/"):
            raise ConfigError("TensorBoard.log_dir", log_dir, "a relative directory under /fsx, such as runs")
        super().__init__(scope, id, labels=CHART_LABELS)
        labels = {"app.kubernetes.io/name": "tensorboard"}
        self.deployment = workload(
            self, "Deployment", kind="Deployment", name="tensorboard", namespace=namespace, labels=labels,
            replicas=1,
            pod_spec={
                "securityContext": POD_SECURITY,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "tensorboard",
                        "image": image,
                        "resources": TENSORBOARD_RESOURCES,
                        "securityContext": container_security(run_as_user=NOBODY),
                        "command": [
                            "tensorboard", f"--logdir={SHARED_MOUNT}/{log_dir}", "--host=0.0.0.0", f"--port={self.PORT}",
                        ],
                        "ports": [{"name": "http", "containerPort": self.PORT}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": self.PORT}},
                        "volumeMounts": [{"name": DATA_VOLUME, "mountPath": SHARED_MOUNT, "readOnly": True}],
                    }
                ],
                "volumes": [{"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim_name}}],
            },
        )
        self.service = api_object(
            self, "Service", api_version="v1", kind="Service", name="tensorboard", namespace=namespace,
            labels=labels,
            spec={"type": "ClusterIP", "selector": labels, "ports": [{"name": "http", "port": self.PORT, "targetPort": self.PORT}]},
        )


def _team_label(job: JobSpec) -> dict[str, str]:
    return {TEAM_TAG: job.team} if job.team else {}


def training_job(scope: Construct, id: str, *, job: JobSpec, **kwargs: Any) -> Chart:
    """The chart that runs ``job``: a Volcano job across nodes, a plain Job on one."""
    if job.distributed:
        return DistributedTrainingJob(scope, id, job=job, **kwargs)
    kwargs.pop("queue", None)
    return SingleNodeTrainingJob(scope, id, job=job, **kwargs)
