"""Training recipes the project ships: a job a team runs as it is (`--job NAME` of `trn submit` and `trn rehearse`)
on every backend its Neuron track runs on, or copies as the start of its own.

A recipe is a folder beside this file (``trainium_cdk/recipes/<name>/``: its code, its Dockerfile, its data
preparation) and one :func:`register` call. Its code reaches the nodes in its image, which ``trn image push
--recipe NAME`` builds from that folder on the track's Neuron image (EKS, Batch), or in the files the Slurm
head node copies to ``~/trainium/recipes/<name>/`` (ParallelCluster, the xla track), or on /fsx through
``trn sync`` (the development instance). :func:`job` gives the job of a recipe on a compute group, as every
backend's job client and the launch rehearsal take it: the command, its environment, the node count, the
compile cache set and the precompile step cap.

Pure Python: the `trn` CLI and the Slurm batch scripts read it without the CDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainium_cdk.errors import ConfigError, one_of

if TYPE_CHECKING:
    from trainium_cdk.app.config import ComputeGroup, Config, TrainingJobSettings
    from trainium_cdk.facts.catalog import InstanceSpec

FOLDER = Path(__file__).resolve().parent
# Where a recipe's folder is on the nodes: in its image, and on the Slurm head node (its home, shared with every
# compute node; cluster_config's OS user's).
IMAGE_ROOT = "/opt/trainium-cdk/recipes"
HEAD_NODE_ROOT = "/home/ubuntu/trainium/recipes"
# The tag prefix of a recipe's image in a stack's training image repository (`trn image push --recipe NAME`).
IMAGE_TAG_PREFIX = "recipe-"
# Where a recipe runs unless it says more: the backends whose jobs run in its image. Slurm (the xla track) needs
# its code in the head node's files; the development instance, on /fsx.
IMAGE_BACKENDS = ("eks", "batch")


@dataclass(frozen=True)
class RecipeContext:
    """What a recipe's job depends on: the deployment, the compute group it runs on, the node count asked for
    (None: the recipe's own default), and where the recipe's folder is on those nodes."""

    config: Config
    group: ComputeGroup
    nodes: int | None
    code: str


@dataclass(frozen=True)
class FitReport:
    """What `trn fit` says of a recipe's job: one rank's device memory by part and the host memory of a node, each
    against its limit (bytes), or what it cannot know.

    :param summary: the job as planned (model, nodes, layout), one line.
    :param device: (part, bytes) of one rank on one NeuronCore.
    :param device_limit: the memory of that NeuronCore, and ``device_label`` what it is.
    :param host: (part, bytes) of one node's host memory while the job loads, against ``host_limit``.
    :param suggestion: when it does not fit, the change that would (flags of `trn submit`), or why none does.
    :param assumptions: what the plan took as given (a tokenizer's vocabulary, a margin).
    """

    summary: str
    device: tuple[tuple[str, float], ...]
    device_limit: float
    device_label: str
    host: tuple[tuple[str, float], ...]
    host_limit: float
    suggestion: str | None = None
    assumptions: tuple[str, ...] = ()

    @property
    def device_total(self) -> float:
        return sum(value for _, value in self.device)

    @property
    def host_total(self) -> float:
        return sum(value for _, value in self.host)

    @property
    def fits(self) -> bool:
        return self.device_total <= self.device_limit and self.host_total <= self.host_limit

    def totals(self) -> str:
        """The two totals against their limits, in GiB, for a line."""
        return (f"{gib(self.device_total)} of {gib(self.device_limit)} GiB a NeuronCore, {gib(self.host_total)} of "
                f"{gib(self.host_limit)} GiB a node")


class FitUnknown(Exception):
    """A recipe's plan cannot be made here (what it needs is not on this machine): the reason, and how to give it."""


def core_memory_gib(spec: InstanceSpec) -> float:
    """The memory of one NeuronCore of ``spec`` at its default logical NeuronCore size, which a plan checks against;
    one line when the type's is unknown (a custom type without it)."""
    if spec.core_memory_gib is None:
        raise ConfigError("instance_type", spec.name, "a type whose Neuron device memory is known: set "
                          "custom_instance_types[].device_memory_gib for `trn fit` to check it")
    return spec.core_memory_gib


def core_label(spec: InstanceSpec) -> str:
    """What a plan's device limit is, for `trn fit`'s lines."""
    return (f"one NeuronCore of {spec.name} ({spec.neuron_cores} a node at the default LNC: "
            f"{spec.device_memory_gib} GiB x {spec.neuron_devices} devices / {spec.neuron_cores})")


def gib(value: float) -> str:
    """Bytes as GiB, as `trn fit` prints them."""
    return f"{value / 2**30:.2f}"


@dataclass(frozen=True)
class Recipe:
    """A shipped workload.

    :param name: what ``--job`` takes; a DNS label (it names jobs, cache sets and image tags).
    :param summary: one line for the README and ``trn rehearse --help``.
    :param tracks: the Neuron tracks (versions.NEURON_TRACKS) whose images and nodes run it.
    :param job: the job on a group (a TrainingJobSettings: command, env, nodes, cache set, precompile steps).
    :param backends: where it runs (a Slurm recipe needs the xla track: the config refuses native with Slurm).
    :param data_prep: the recipe that prepares its data (tokenizer and dataset onto /fsx), if any.
    :param folder: its code and Dockerfile; default: ``trainium_cdk/recipes/<name with _ for ->``.
    :param image_from: the recipe whose image it runs in (a data preparation in its training recipe's image, from
        the same folder: one `trn image push --recipe`); default: its own.
    :param shares: files of other recipes' folders its code imports (one home for each, not a copy): its image is
        then built with this package's recipes folder as the context, and its Dockerfile copies them.
    :param cpu_only: its job is CPU work on one node (a data preparation): on EKS a pod on the system nodes, not a
        Trainium node; on the other backends a node of its group. Default: False.
    :param fit: its memory plan on a group with the job's ``--env`` (`trn fit`, and the check of `trn submit` and
        `trn rehearse`), raising FitUnknown when what it needs is not here; default: none, and `trn fit` says it
        cannot know.
    """

    name: str
    summary: str
    tracks: tuple[str, ...]
    job: Callable[[RecipeContext], TrainingJobSettings]
    backends: tuple[str, ...] = IMAGE_BACKENDS
    data_prep: str | None = None
    image_from: str | None = None
    shares: tuple[Path, ...] = ()
    fit: Callable[[RecipeContext, Mapping[str, str]], FitReport] | None = None
    cpu_only: bool = False
    folder: Path = field(default=None)  # type: ignore[assignment]  # set in __post_init__

    def __post_init__(self) -> None:
        if self.folder is None:  # a recipe of this package: its folder beside this file
            object.__setattr__(self, "folder", FOLDER / self.name.replace("-", "_"))

    def context(self, config: Config, *, group: ComputeGroup, backend: str, nodes: int | None) -> RecipeContext:
        """What its job (and its plan) on ``group`` depends on, with its code where ``backend`` has it."""
        return RecipeContext(config=config, group=group, nodes=nodes, code=self.code_on(backend))

    def code_on(self, backend: str) -> str:
        """The recipe's folder on the nodes of ``backend`` (named as in the package)."""
        root = HEAD_NODE_ROOT if backend == "parallelcluster" else IMAGE_ROOT
        return f"{root}/{self.folder.name}"

    @property
    def build_context(self) -> Path:
        """What `trn image push --recipe` sends to the build: its folder, or all recipes' where it shares files."""
        return FOLDER if self.shares else self.folder

    @property
    def image_tag_prefix(self) -> str:
        return f"{IMAGE_TAG_PREFIX}{self.image_from or self.name}-"


_REGISTRY: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    if recipe.name in _REGISTRY:
        raise ValueError(f"recipe {recipe.name!r} is registered twice")
    _REGISTRY[recipe.name] = recipe
    return recipe


def unregister(name: str) -> None:
    """(Tests register toy recipes and take them away again.)"""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def all_recipes() -> tuple[Recipe, ...]:
    return tuple(_REGISTRY.values())


def find(name: str) -> Recipe | None:
    return _REGISTRY.get(name)


def available(config: Config, backend: str) -> list[Recipe]:
    """The recipes the config's track and ``backend`` run."""
    return [r for r in _REGISTRY.values() if config.neuron.track in r.tracks and backend in r.backends]


def recipe_for(config: Config, name: str, backend: str, *, field_name: str = "--job") -> Recipe:
    """The recipe ``name`` where it runs; one line naming what is offered otherwise."""
    recipe = _REGISTRY.get(name)
    offered = [r.name for r in available(config, backend)]
    if recipe is None:
        runs = one_of(offered) if offered else f"none runs on {backend} with neuron.track {config.neuron.track}"
        raise ConfigError(field_name, name, f"a recipe ({runs}); for your own script, give your command after --")
    if config.neuron.track not in recipe.tracks:
        raise ConfigError(field_name, name, f"a recipe of neuron.track {config.neuron.track}: {name} runs on "
                          f"{' or '.join(recipe.tracks)}" + (f"; {one_of(offered)}" if offered else ""))
    if backend not in recipe.backends:
        raise ConfigError(field_name, name, f"a recipe that runs on {backend}: {name} runs on "
                          f"{', '.join(recipe.backends)}")
    return recipe


def job(config: Config, name: str, *, group: ComputeGroup, backend: str, nodes: int | None = None) -> TrainingJobSettings:
    """The job of recipe ``name`` on ``group``, with its code where ``backend`` has it."""
    recipe = recipe_for(config, name, backend)
    settings = recipe.job(recipe.context(config, group=group, backend=backend, nodes=nodes))
    return settings.model_copy(update={"cpu_only": True}) if recipe.cpu_only else settings


def fit_of(config: Config, name: str, *, group: ComputeGroup, backend: str, nodes: int | None,
           env: Mapping[str, str]) -> FitReport | None:
    """The memory plan of the job of ``name`` on ``group`` with ``env`` (`--env`), or None: ``name`` is no recipe (an
    example or a configured workload) or a recipe without a plan. FitUnknown: the recipe's plan needs what is not
    on this machine."""
    if name not in _REGISTRY:
        return None
    recipe = recipe_for(config, name, backend)
    if recipe.fit is None:
        return None
    return recipe.fit(recipe.context(config, group=group, backend=backend, nodes=nodes), env)


def _load_builtin() -> None:
    """The recipes this package ships register themselves on import (each a module of this package)."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules([str(FOLDER)]):
        if module.ispkg:
            importlib.import_module(f"{__name__}.{module.name}")


_load_builtin()
