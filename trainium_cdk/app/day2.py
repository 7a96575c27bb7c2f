"""The Day-2 table (docs/reference/day-2.md): what `make deploy` does after each change, per backend, and to running jobs.

One row per change a user makes once the deployment runs. ``stops`` names where running jobs are stopped
and how (``eks-managed``: EKS with ``eks.capacity: managed``; ``eks-karpenter``: Karpenter, the default, which
waits for the job when it replaces a drifted node);
``tests/app/test_day2.py`` checks it, change by change, against what each service's own rules make of the
synthesized templates (tests/support/lifecycle.py, ParallelCluster's update policies), and `make docs` writes the
table from here. Pure data: no CDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Where a running job can be stopped: the backends, EKS split by capacity mode.
STOPPER_NAMES = {
    "eks-karpenter": "EKS with Karpenter", "eks-managed": "EKS with `eks.capacity: managed`", "batch": "Batch", "parallelcluster": "ParallelCluster",
    "instance": "the development instance",
}
BEGIN = "<!-- day2:begin (generated from trainium_cdk/app/day2.py by `make docs`; tests/app/test_day2.py checks it) -->"
END = "<!-- day2:end -->"


@dataclass(frozen=True)
class Change:
    key: str  # tests/app/test_day2.py CHANGES
    label: str
    eks: str
    batch: str
    parallelcluster: str
    instance: str = "unchanged"  # the development instance
    stops: Mapping[str, str] = field(default_factory=dict)  # stopper -> how its running jobs are stopped
    running: str = "keep running"  # what happens to the jobs that are not stopped


BATCH_UPDATE = (
    "compute environment infrastructure update (a new launch template version): Batch replaces the instances"
)
BATCH_STOPS = ("go on for `batch.update_timeout_minutes` (default: `batch.job_timeout_minutes`, at most 5 days: the "
               "compute environment's UpdatePolicy), then stop and are retried from their checkpoint")

CHANGES: tuple[Change, ...] = (
    Change(
        "nodes", "`nodes`",
        eks="the default node count of jobs (`trn submit`, `workloads.jobs`); Karpenter's NodePool and the cluster "
        "template do not change",
        batch="new job definition revision (`numNodes`)",
        parallelcluster="the head node copies the new batch scripts to `~/trainium` (OnNodeUpdated); compute nodes "
        "untouched",
    ),
    Change(
        "max_nodes", "`max_nodes`",
        eks="NodePool limits (managed: node group maximum), in place",
        batch="compute environment `maxvCpus`, in place (not an infrastructure update)",
        parallelcluster="queue `MaxCount`, in place (lowering it needs the compute fleet stopped)",
    ),
    Change(
        "image", "image (`workloads.image`, `batch.image_uri`)",
        eks="manifests of `workloads.jobs` re-applied with the new image",
        batch="new job definition revision",
        parallelcluster="batch scripts re-copied; compute nodes untouched",
        running="keep running on their image; a job in `workloads.jobs` whose pod template changes is rejected by "
        "Kubernetes (immutable): delete it first",
    ),
    Change(
        "neuron_pin", "Neuron pin (`versions.py`)",
        eks="the example image is rebuilt on the new training image. The Neuron driver of EKS nodes is the EKS AMI "
        "release's (`eks_ami_release`), so a Neuron release moves it too, as the next row says: managed node groups "
        "(system nodes too) roll, Karpenter's nodes drift and are replaced once their job ends. Where that AMI "
        "release predates the track's Neuron release, the Trainium nodes install the pinned driver at boot (their "
        "user data): a pin change then rolls their node groups and drifts Karpenter's nodes the same way; the "
        "launcher's preflight still stops a node whose driver is older than the pin",
        batch=f"new job definition revision (default image); the driver pin and the ECS Neuron AMI are in the launch "
        f"template: {BATCH_UPDATE}",
        parallelcluster="the queues' setup arguments change: with `DRAIN`, each compute node is replaced with the new "
        "Neuron packages once its jobs end; the head node builds the new pins' venv beside the one in use "
        "(`/home/trainium-cdk/neuron-venv-<release>-<hash>`), then switches the link `/home/trainium-cdk/neuron-venv` "
        "that batch scripts activate; "
        "an old venv is removed once no job Slurm knows started from it",
        instance="replaced: the DLAMI lookup runs again for the new release and answers another AMI, which a new "
        "instance boots (the root volume goes with the old one; /fsx stays)",
        stops={"eks-managed": "drained with their nodes", "batch": BATCH_STOPS, "instance": "ended with the instance"},
        running="keep running (on ParallelCluster in the venv they started with); let them end before starting new "
        "ones (a node not yet replaced has the old driver, a new job the new venv)",
    ),
    Change(
        "cpu_queue_added", "Batch CPU queue added (`batch.cpu_instance_type`, on by default from this release)",
        eks="unchanged (the data jobs run on the system nodes)", parallelcluster="unchanged",
        batch="new nested stack `CpuQueue`: a compute environment of 0 to 4 general-purpose nodes, its job queue "
        "`<stack>_cpu` and job definition; the file system's Lustre rules for its security group; no group changes",
        running="keep running; from then on `trn submit --job <recipe>-data` sends the data jobs to the CPU queue",
    ),
    Change(
        "group_added", "compute group added",
        eks="new NodePool (managed: node group) and launch template",
        batch="new compute environment, job queue, job definition",
        parallelcluster="new Slurm queue",
    ),
    Change(
        "backend_added", "backend added",
        eks="new stack; existing stacks unchanged", batch="", parallelcluster="", instance="",
    ),
    Change(
        "instance_type", "instance type changed",
        eks="Karpenter: the NodePool and EC2NodeClass change, so nodes drift and are replaced once their job ends "
        "(training pods are `karpenter.sh/do-not-disrupt`). Managed: a new launch template version, and EKS rolls "
        "the node group, draining every node",
        batch=BATCH_UPDATE,
        parallelcluster="new compute resource; ParallelCluster removes the old one only with the compute fleet "
        "stopped: `pcluster update-compute-fleet --status STOP_REQUESTED`, deploy, then `START_REQUESTED` "
        "(otherwise the update fails and the stack rolls back)",
        stops={"eks-managed": "drained with their nodes", "batch": BATCH_STOPS,
               "parallelcluster": "stopped with the fleet"},
        running="EKS with Karpenter: keep running; resume the others from a checkpoint",
    ),
    Change(
        "group_removed", "compute group removed",
        eks="its NodePool and EC2NodeClass are deleted, and its nodes with them (managed: its node group and launch "
        "template); other groups unchanged",
        batch="its compute environment, job queue and job definition are deleted",
        parallelcluster="its Slurm queue is removed, which ParallelCluster does only with the compute fleet stopped: "
        "`pcluster update-compute-fleet --status STOP_REQUESTED`, deploy, then `START_REQUESTED` (otherwise the "
        "update fails and the stack rolls back)",
        stops={"eks-karpenter": "the group's, with its nodes", "eks-managed": "the group's, with its node group",
               "batch": "the group's, with its compute environment", "parallelcluster": "every job, with the fleet"},
        running="the other groups' keep running; end or checkpoint the group's jobs first (`trn jobs`)",
    ),
    Change(
        "kubernetes_version",
        "Kubernetes version (`versions.KUBERNETES_VERSION`; [Upgrading EKS](../concepts/upgrading-eks.md))",
        eks="the control plane moves one minor, in place; then each add-on to its version for the new minor "
        "(`versions.EKS_ADDON_VERSIONS`: EKS moves none by itself, and one without a pinned version keeps the old "
        "minor's build); then the nodes to the AMI release's build for the new minor: managed node groups (system "
        "nodes too) get the new `releaseVersion` and roll, and Karpenter's AMI alias resolves for the new minor, so "
        "its nodes drift and are replaced once their job ends. Karpenter, Volcano and CoreDNS move with the system "
        "nodes",
        batch="unchanged", parallelcluster="unchanged",
        stops={"eks-managed": "drained with their nodes"},
        running="EKS with Karpenter: keep running, their nodes replaced after them",
    ),
    Change(
        "eks_ami_release", "EKS AMI release (`NeuronTrack.eks_ami_release`)",
        eks="managed node groups (system nodes too) get the new `releaseVersion` and roll, draining each node; "
        "Karpenter's EC2NodeClass names the new alias, so its nodes drift and are replaced once their job ends. "
        "Karpenter, Volcano and CoreDNS move with the system nodes; the Neuron driver moves with the AMI",
        batch="unchanged", parallelcluster="unchanged",
        stops={"eks-managed": "drained with their nodes"},
        running="EKS with Karpenter: keep running, their nodes replaced after them",
    ),
    Change(
        "karpenter", "Karpenter upgrade (`versions.KARPENTER_VERSION`)",
        eks="the `karpenter-crd` chart upgrades the CRDs, then the `karpenter` chart the controller (on the system "
        "nodes); NodePools and EC2NodeClasses do not change, so no node is replaced. Managed: not installed",
        batch="unchanged", parallelcluster="unchanged",
    ),
    Change(
        "device_plugin", "Neuron device plugin (`versions.NEURON_DEVICE_PLUGIN_IMAGE`, the Neuron Helm chart's tags)",
        eks="the device plugin DaemonSet is re-applied and rolls its pods (RollingUpdate), one Trainium node at a "
        "time; nodes, node groups and NodePools do not change",
        batch="unchanged", parallelcluster="unchanged",
    ),
    Change(
        "teams_added", "`teams` added ([Sharing between teams](../guide/teams.md))",
        eks="unchanged (teams share Batch only so far)",
        batch="each group's FIFO job queue, and the CPU queue's, is replaced by a fair-share queue, `<queue>-teams`, with a scheduling "
        "policy of a share per team (Batch gives a queue its policy when it creates it); later share changes update "
        "the policy in place",
        parallelcluster="Slurm accounting: the stack adds an Aurora Serverless (MySQL) database, and the cluster "
        "`SlurmSettings.Database`, fair-share priority and an account per team (the head node's OnNodeUpdated). "
        "ParallelCluster adds a database only with the compute fleet stopped: `pcluster update-compute-fleet --status "
        "STOP_REQUESTED`, deploy, then `START_REQUESTED` (otherwise the update fails and the stack rolls back); later "
        "share and member changes apply in place",
        stops={"batch": "the old queue's jobs, running or waiting, are terminated with it (Batch terminates a "
               "deleted queue's jobs): let it drain first (`trn jobs`)",
               "parallelcluster": "every job, with the fleet"},
    ),
)


def running_cell(change: Change) -> str:
    if not change.stops:
        return change.running
    stopped = "; ".join(f"{STOPPER_NAMES[s]}: {how}" for s, how in change.stops.items())
    return f"stopped, {stopped}. Elsewhere: {change.running}"


def table() -> str:
    rows = ["| Change | EKS | AWS Batch | ParallelCluster | Development instance | Running jobs |",
            "|---|---|---|---|---|---|"]
    for c in CHANGES:
        rows.append(f"| {c.label} | {c.eks} | {c.batch} | {c.parallelcluster} | {c.instance} | {running_cell(c)} |")
    return "\n".join(rows)


def block() -> str:
    return f"{BEGIN}\n{table()}\n{END}"
