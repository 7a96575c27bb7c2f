"""A Batch job as AWS Batch runs it: the deployed job definition's container, and a submit's overrides on it.

Pure Python (no CDK): the TrainiumBatch construct writes the job definition from the same names and
environment, `trn submit --backend batch` builds its SubmitJob request here, and `trn rehearse --backend
batch` runs the container this module says Batch runs (the definition's, with the overrides applied as
Batch applies them). tests/test_batch_job.py checks it against the synthesized job definitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainium_cdk.facts.names import BATCH_CPU_SUFFIX, SHARED_MOUNT
from trainium_cdk.facts.teams import TEAM_TAG, share_identifier
from trainium_cdk.runtime.launcher import launch_command
from trainium_cdk.runtime.training_env import cache_dir, job_environment

if TYPE_CHECKING:  # the construct imports this module's names; it reads no config
    from trainium_cdk.app.config import ComputeGroup, Config

# Job definition parameter naming the training script when no command is configured.
SCRIPT_PARAMETER = "script"
DEFAULT_SCRIPT = f"{SHARED_MOUNT}/code/train.py"
DEFAULT_SCRIPT_WITHOUT_STORAGE = "train.py"
# The MLP example's script in the example image (examples/mlp/Dockerfile).
EXAMPLE_SCRIPT = "/opt/trainium-cdk/examples/mlp/train.py"
# Every node of a multi-node job: an open range, so a submit-time numNodes reaches every node.
ALL_NODES = "0:"
# The tag on a job definition revision `trn submit --image` registers: the deployed revision it copies.
BASED_ON_TAG = "trainium-cdk:based-on"


def resource_name(config: Config, group: ComputeGroup) -> str:
    """The job queue's and the job definition's name: ``<project>-batch-<group>``."""
    return f"{config.stack_name('batch')}-{group.name}"


def cpu_resource_name(config: Config) -> str:
    """The CPU queue's job queue and job definition name: ``<project>-batch_cpu``."""
    return f"{config.stack_name('batch')}{BATCH_CPU_SUFFIX}"


def default_script(*, example_image: bool, shared_storage: bool) -> str:
    """The job definition's script parameter when the config names no command."""
    if example_image:
        return EXAMPLE_SCRIPT
    return DEFAULT_SCRIPT if shared_storage else DEFAULT_SCRIPT_WITHOUT_STORAGE


@dataclass(frozen=True)
class BatchContainer:
    """What a Batch job's container runs: its command (``Ref::`` parameters unresolved), its environment and
    the parameters that fill them. ``multinode``: a multi-node parallel job (what the stack deploys for every type,
    one node without EFA), else a container job (a job definition of an older deployment)."""

    command: tuple[str, ...]
    environment: Mapping[str, str]
    parameters: Mapping[str, str] = field(default_factory=dict)
    multinode: bool = True

    def resolved_command(self) -> list[str]:
        return [self.parameters[a.removeprefix("Ref::")] if a.startswith("Ref::") else a for a in self.command]


# The CPU queue's job definition (constructs/batch_cpu.py): nothing runs unless a submit says what, and how.
CPU_DEFINITION_COMMAND = ("true",)


def definition_container(config: Config, group: ComputeGroup, *, cpu: bool = False) -> BatchContainer:
    """The container of the job definition the Batch stack deploys for ``group`` (``cpu``: the CPU queue's, which
    every submit gives its command and whole environment)."""
    if cpu:
        return BatchContainer(command=CPU_DEFINITION_COMMAND, environment={}, parameters={}, multinode=True)
    spec = config.spec(group)
    shared = config.storage.enabled
    command = config.batch.command
    environment = job_environment(
        spec, processes=spec.neuron_cores, cache_dir=cache_dir(group.name, shared=shared), multi_node=spec.has_efa,
        container=True, shared_storage=shared, track=config.neuron_track, node_metrics=True,
    )
    parameters = {} if command else {
        SCRIPT_PARAMETER: default_script(example_image=config.batch.image_uri is None, shared_storage=shared)
    }
    return BatchContainer(
        command=tuple(launch_command(command or [f"Ref::{SCRIPT_PARAMETER}"])), environment=environment,
        parameters=parameters, multinode=True,
    )


@dataclass(frozen=True)
class BatchSubmission:
    """One `trn submit` to a group's queue: the node count, and the user's command and environment as
    overrides of the job definition's (none: the definition's own)."""

    name: str
    nodes: int
    multinode: bool
    program: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    team: str | None = None  # a fair-share queue's: its share identifier, its scheduling priority, the team tag
    priority: int = 0

    def container_overrides(self) -> dict[str, Any]:
        overrides: dict[str, Any] = {}
        if self.program:
            overrides["command"] = launch_command(self.program)
        if self.env:
            overrides["environment"] = [{"name": k, "value": v} for k, v in self.env.items()]
        return overrides

    def request(self, *, queue: str, definition: str) -> dict[str, Any]:
        """The SubmitJob request."""
        request: dict[str, Any] = {"jobName": self.name, "jobQueue": queue, "jobDefinition": definition}
        overrides = self.container_overrides()
        if self.multinode:
            request["nodeOverrides"] = {"numNodes": self.nodes}
            if overrides:
                request["nodeOverrides"]["nodePropertyOverrides"] = [
                    {"targetNodes": ALL_NODES, "containerOverrides": overrides}
                ]
        elif overrides:
            request["containerOverrides"] = overrides
        if self.team is not None:
            request.update(shareIdentifier=share_identifier(self.team), schedulingPriorityOverride=self.priority,
                           tags={TEAM_TAG: self.team}, propagateTags=True)
        return request

    def applied_to(self, container: BatchContainer) -> BatchContainer:
        """The container Batch runs: the command replaced, the environment merged by name (an override
        replaces the definition's variable of the same name, AWS Batch ContainerOverrides)."""
        return BatchContainer(
            command=tuple(launch_command(self.program)) if self.program else container.command,
            environment={**container.environment, **self.env},
            parameters=container.parameters, multinode=container.multinode,
        )


def register_request(definition: Mapping[str, Any], *, image: str) -> dict[str, Any]:
    """RegisterJobDefinition of a new revision of a described job definition with ``image`` on every
    container, tagged with the revision it copies (so a later submit of the same image reuses it)."""
    fields = ("jobDefinitionName", "type", "parameters", "schedulingPriority", "retryStrategy", "propagateTags",
              "timeout", "platformCapabilities", "tags")
    request = {k: definition[k] for k in fields if definition.get(k) is not None}
    if definition.get("containerProperties"):
        request["containerProperties"] = {**definition["containerProperties"], "image": image}
    if definition.get("nodeProperties"):
        node = definition["nodeProperties"]
        request["nodeProperties"] = {
            **node,
            "nodeRangeProperties": [
                {**r, "container": {**r["container"], "image": image}} for r in node["nodeRangeProperties"]
            ],
        }
    request["tags"] = {**request.get("tags", {}), BASED_ON_TAG: definition["jobDefinitionArn"]}
    return request


def images_of(definition: Mapping[str, Any]) -> set[str]:
    """The images of a described job definition's containers."""
    if definition.get("containerProperties"):
        return {definition["containerProperties"].get("image", "")}
    return {r["container"].get("image", "") for r in (definition.get("nodeProperties") or {}).get("nodeRangeProperties", [])}


def same_but_image(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two described job definitions differ in nothing but their images (and revision bookkeeping)."""

    def without_images(d: Mapping[str, Any]) -> dict[str, Any]:
        strip = ("jobDefinitionArn", "revision", "status", "tags", "containerOrchestrationType")
        out = {k: v for k, v in d.items() if k not in strip}
        if out.get("containerProperties"):
            out["containerProperties"] = {k: v for k, v in out["containerProperties"].items() if k != "image"}
        if out.get("nodeProperties"):
            out["nodeProperties"] = {**out["nodeProperties"], "nodeRangeProperties": [
                {**r, "container": {k: v for k, v in r["container"].items() if k != "image"}}
                for r in out["nodeProperties"]["nodeRangeProperties"]
            ]}
        return out

    return without_images(a) == without_images(b)
