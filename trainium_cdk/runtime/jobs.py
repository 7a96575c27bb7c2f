"""What a training job runs, independent of where: validation, the launch command, its environment.

Pure Python (no CDK, no cdk8s), so that the config validates jobs before anything is built and the
job charts and the CLI render the same command.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import defaults
from trainium_cdk.facts.catalog import InstanceSpec
from trainium_cdk.facts.teams import TEAM_NAME
from trainium_cdk.facts.versions import NeuronTrack
from trainium_cdk.runtime.launcher import launch_command
from trainium_cdk.runtime.training_env import HF_HOME, cache_dir, job_environment  # noqa: F401 (HF_HOME: its old home)

# A cache set names one directory: no slashes, nothing that climbs out of the cache root.
_CACHE_SET = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
# The Neuron docs: with autocast, XLA_USE_BF16 / XLA_DOWNCAST_BF16 override its per-operator precision.
_AUTOCAST_FLAG = "--enable_pt_autocast"
_BF16_VARIABLES = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")
JOB_NAME_VARIABLE = "TRN_JOB_NAME"


def check_node_count(field_name: str, nodes: int, *, maximum: int, instance: InstanceSpec, group: str | None) -> int:
    """The one rule for a job's node count, wherever it is set (config, job, ``trn submit --nodes``)."""
    where = f" of group {group}" if group else ""
    if not 1 <= nodes <= maximum:
        raise ConfigError(field_name, nodes, f"between 1 and max_nodes{where} ({maximum})")
    if nodes > 1 and not instance.has_efa:
        raise ConfigError(field_name, nodes, f"1: {instance.name} has no EFA, so it cannot run a multi-node job")
    return nodes


def check_precompile_steps(field_name: str, steps: int) -> int:
    """The one rule for precompile's step cap, wherever it is set (the neuron section, a job)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(field_name, steps, "a whole number of training steps, 1 or more (Neuron's guide: a few, such as 10)")
    return steps


@dataclass(frozen=True)
class JobSpec:
    """One training job.

    :param name: job name, a DNS label of at most 40 characters (pod names append to it).
    :param instance: the instance type of the nodes, from the catalog.
    :param command: the training program and its arguments, as one process runs it (``train.py ...``
        or ``python3 train.py ...``); the launcher runs it under torchrun on every node.
    :param image: container image.
    :param nodes: nodes of the job; above 1 it is a distributed (gang-scheduled) job. Default: 1.
    :param max_nodes: the compute group's maximum; nodes above it can never be scheduled. Default: none (no
        check).
    :param processes_per_node: Default: every NeuronCore of the instance.
    :param cache_set: the Neuron compile cache directory (``/fsx/neuron-cache/<cache_set>``): jobs that
        run at the same time must not share one. Default: ``default``.
    :param precompile: first extract the command's graphs with neuron_parallel_compile over a few steps and
        compile them into the cache, then run it for real (see :mod:`trainium_cdk.runtime.launcher`). Default:
        False.
    :param precompile_steps: the steps of that trial run (``TRN_PRECOMPILE_STEPS``, for the script to read).
        Default: 10 (``defaults.PRECOMPILE_STEPS``).
    :param env: extra environment. Default: none.
    :param retries: restarts of the whole job after a failure. Default: 3.
    :param group: the compute group whose nodes run it. Default: none (any node of the instance type).
    :param shared_storage: mount the shared file system at /fsx (and keep the compile cache there);
        without it the cache stays on the node. Default: True.
    :param neuron_track: the Neuron track the image and nodes are on: its pins (``TRN_NEURON_*``) go
        into the environment, and the launcher's preflight prints them beside the node's versions.
        Default: none.
    :param service_account: EKS: the service account its pods run as (AWS permissions through EKS Pod Identity).
        Default: none (the pods get no credentials and no Kubernetes API token).
    :param metrics_push_url: the Pushgateway its launcher pushes the job's metrics to (``TRN_METRICS_PUSH_URL``):
        EKS with observability.prometheus. Default: none.
    :param team: the team whose job it is (the config's ``teams:``): on EKS its pods carry the label ``team`` and
        are scheduled in the team's Volcano queue (``team-<team>``), a one-node job too. Default: none.
    :param cpu_only: CPU work on one node (a data preparation): on EKS its pod asks for no Neuron device, tolerates
        no Trainium node's taint and so runs on the system nodes. Default: False.
    :param code: EKS: a ConfigMap of the job's namespace mounted read-only at a directory, (name, directory):
        the MLP example's train.py when no example image is built. Default: none.
    """

    name: str
    instance: InstanceSpec
    command: Sequence[str]
    image: str
    nodes: int = 1
    max_nodes: int | None = None
    processes_per_node: int | None = None
    cache_set: str = "default"
    precompile: bool = False
    precompile_steps: int = defaults.PRECOMPILE_STEPS
    env: Mapping[str, str] = field(default_factory=dict)
    retries: int = 3
    group: str | None = None
    shared_storage: bool = True
    neuron_track: NeuronTrack | None = None
    service_account: str | None = None
    metrics_push_url: str | None = None
    code: tuple[str, str] | None = None
    cpu_only: bool = False
    team: str | None = None

    def __post_init__(self) -> None:
        if not _JOB_NAME.fullmatch(self.name):
            raise ConfigError(
                "name", self.name, "a lower-case DNS label of at most 40 characters (letters, digits, '-')"
            )
        if not self.command:
            raise ConfigError("command", list(self.command), "the training program and its arguments")
        if self.team is not None and not TEAM_NAME.fullmatch(self.team):
            raise ConfigError("team", self.team, "a team's name: a lower-case DNS label of at most 32 characters")
        if self.cpu_only and self.nodes != 1:
            raise ConfigError("nodes", self.nodes, "1 for a CPU-only job (cpu_only: one process of CPU work)")
        maximum = self.max_nodes if self.max_nodes is not None else self.nodes
        check_node_count("nodes", self.nodes, maximum=maximum, instance=self.instance, group=self.group)
        if not 1 <= self.processes <= self.instance.neuron_cores:
            raise ConfigError(
                "processes_per_node",
                self.processes_per_node,
                f"between 1 and the {self.instance.neuron_cores} NeuronCores of {self.instance.name}",
            )
        if not _CACHE_SET.fullmatch(self.cache_set) or ".." in self.cache_set:
            raise ConfigError(
                "cache_set", self.cache_set, "one directory name: lower-case letters, digits, '.', '_', '-'; no '/'"
            )
        if self.retries < 0:
            raise ConfigError("retries", self.retries, "0 or more")
        check_precompile_steps("precompile_steps", self.precompile_steps)
        if _AUTOCAST_FLAG in self.command:
            for variable in _BF16_VARIABLES:
                if self.env.get(variable, "0") not in ("", "0"):
                    raise ConfigError(
                        f"env.{variable}", self.env[variable],
                        f"unset (or 0) with {_AUTOCAST_FLAG}: it overrides autocast's per-operator precision",
                    )

    @property
    def processes(self) -> int:
        return self.processes_per_node if self.processes_per_node is not None else self.instance.neuron_cores

    @property
    def distributed(self) -> bool:
        return self.nodes > 1

    @property
    def cache_dir(self) -> str:
        return cache_dir(self.cache_set, shared=self.shared_storage)

    def launch(self) -> list[str]:
        """The container command of every node of the job: the launcher, then the training command."""
        return launch_command(self.command)

    def environment(self) -> dict[str, str]:
        """Every backend's job environment (training_env.job_environment), the job's name, and its own."""
        env = job_environment(
            self.instance, processes=self.processes, cache_dir=self.cache_dir, multi_node=self.distributed,
            container=True, shared_storage=self.shared_storage, track=self.neuron_track, precompile=self.precompile,
            precompile_steps=self.precompile_steps, metrics_push_url=self.metrics_push_url,
        )
        # The checkpoint directory's name: a restarted (or resubmitted) job of this name resumes. EKS only:
        # Batch and Slurm give the job an id that outlives a retry (AWS_BATCH_JOB_ID, SLURM_JOB_ID), Kubernetes none.
        env[JOB_NAME_VARIABLE] = self.name
        env.update(self.env)
        return env
