"""What a training job runs, independent of where: validation, the torchrun command, its environment.

Pure Python (no CDK, no cdk8s), so that the config validates jobs before anything is built and the
job charts render the same command.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trainium_cdk.catalog import InstanceSpec
from trainium_cdk.errors import ConfigError
from trainium_cdk.training_env import CACHE_DIR_NAME, MASTER_PORT, efa_environment, neuron_environment

DATA_MOUNT = "/data"
CACHE_ROOT = f"{DATA_MOUNT}/{CACHE_DIR_NAME}"
# A cache set names one directory: no slashes, nothing that climbs out of the cache root.
_CACHE_SET = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


@dataclass(frozen=True)
class JobSpec:
    """One training job.

    :param name: job name, a DNS label of at most 40 characters (pod names append to it).
    :param instance: the instance type of the nodes, from the catalog.
    :param command: the training program and its arguments; torchrun is put in front of it.
    :param image: container image.
    :param nodes: nodes of the job; above 1 it is a distributed (gang-scheduled) job.
    :param max_nodes: the compute group's maximum; nodes above it can never be scheduled.
    :param processes_per_node: default: every NeuronCore of the instance.
    :param cache_set: the Neuron compile cache directory under /data/neuron-cache: jobs that run
        at the same time must not share one.
    :param precompile: run the same command under neuron_parallel_compile first, then for real.
    :param env: extra environment.
    :param retries: restarts of the whole job after a failure.
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
    env: Mapping[str, str] = field(default_factory=dict)
    retries: int = 3
    group: str | None = None

    def __post_init__(self) -> None:
        if not _JOB_NAME.match(self.name):
            raise ConfigError(
                "name", self.name, "a lower-case DNS label of at most 40 characters (letters, digits, '-')"
            )
        if not self.command:
            raise ConfigError("command", list(self.command), "the training program and its arguments")
        maximum = self.max_nodes if self.max_nodes is not None else self.nodes
        if not 1 <= self.nodes <= maximum:
            raise ConfigError("nodes", self.nodes, f"between 1 and the group maximum ({maximum})")
        if self.nodes > 1 and not self.instance.has_efa:
            raise ConfigError(
                "nodes", self.nodes, f"1: {self.instance.name} has no EFA, so it cannot run a multi-node job"
            )
        if not 1 <= self.processes <= self.instance.neuron_cores:
            raise ConfigError(
                "processes_per_node",
                self.processes_per_node,
                f"between 1 and the {self.instance.neuron_cores} NeuronCores of {self.instance.name}",
            )
        if not _CACHE_SET.match(self.cache_set) or ".." in self.cache_set:
            raise ConfigError(
                "cache_set", self.cache_set, "one directory name: lower-case letters, digits, '.', '_', '-'; no '/'"
            )
        if self.retries < 0:
            raise ConfigError("retries", self.retries, "0 or more")

    @property
    def processes(self) -> int:
        return self.processes_per_node if self.processes_per_node is not None else self.instance.neuron_cores

    @property
    def distributed(self) -> bool:
        return self.nodes > 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes

    @property
    def cache_dir(self) -> str:
        return f"{CACHE_ROOT}/{self.cache_set}"

    def environment(self) -> dict[str, str]:
        """Neuron runtime and compile cache, EFA when the job spans nodes, and the job's shape."""
        env = neuron_environment(self.cache_dir)
        if self.distributed:
            # Pods have one interface for sockets (eth0); EFA carries the collectives.
            env.update(efa_environment(self.instance), CCOM_SOCKET_IFNAME="eth0")
        env.update(
            NNODES=str(self.nodes), NPROC_PER_NODE=str(self.processes), WORLD_SIZE=str(self.world_size)
        )
        env.update(self.env)
        return env

    def torchrun(self, *, master_addr: str = "$MASTER_ADDR", node_rank: str = "$NODE_RANK") -> str:
        """The shell command of one node: torchrun (static rendezvous, no etcd), after a precompile run
        under neuron_parallel_compile when asked."""
        program = shlex.join(list(self.command))
        if self.distributed:
            launcher = (
                f"torchrun --nnodes={self.nodes} --nproc_per_node={self.processes} --node_rank={node_rank} "
                f"--master_addr={master_addr} --master_port={MASTER_PORT}"
            )
        else:
            launcher = f"torchrun --nnodes=1 --nproc_per_node={self.processes}"
        run = f"{launcher} {program}"
        return f"neuron_parallel_compile {run} && {run}" if self.precompile else run
