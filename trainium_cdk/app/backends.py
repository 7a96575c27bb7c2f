"""The compute backends, one entry each: what a backend is made of, in one place.

A backend is a stack (its constructs inside), a section of the config, and optionally files it writes
to dist/, a job client for `trn submit/status/logs/cancel`, checks of the config it cannot deploy, and
the idle lines of `trn cost`. Entries name their parts as ``"module:attribute"`` strings, imported on
first use: the config and the `trn` CLI read this module without loading the CDK.

Adding a backend (README, "Adding a backend"): its constructs and ``stacks/<name>_stack.py``, its
settings model and field in ``config/models.py``, and one :func:`register` call below; the other hooks
are optional.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainium_cdk.errors import ConfigError, one_of


@dataclass(frozen=True)
class Backend:
    """One compute backend.

    :param name: what ``backends:`` in the config lists; the stack is ``<project>-<name>``.
    :param summary: one line for the README and ``--help``.
    :param stack: ``module:Class`` of its stack, constructed as
        ``Class(app, id, *, config, network, storage, alarm_topic, env)`` (``network`` a TrainingNetwork,
        ``storage`` a LustreStorage or None, ``alarm_topic`` the deployment's SNS topic that its alarms and
        EventBridge rules notify).
    :param dist: ``module:function`` writing its plain files into ``dist/<name>/``:
        ``function(config, outdir) -> list[Path]`` (no CDK). Default: none.
    :param jobs: ``module`` of its job client, with ``submit``, ``status``, ``logs``, ``cancel`` and
        ``list_jobs`` (`trn jobs`), each ``(args, config, out, err) -> int``; `trn rehearse` runs what its submit
        sends through a runner of ``trainium_cdk.cli.rehearse``. Default: none (no `trn submit` for it).
    :param check: ``module:function(config)`` raising ConfigError for what it cannot deploy. Default: none.
    :param idle_cost: ``module:function(config, region) -> list`` of `trn cost` lines billed while no job
        runs. Default: none.
    :param image_build: ``module:function(config) -> str | None``: the container image its stack builds at
        deploy (a Docker image asset: the deploying machine needs Docker or Finch), or None. `trn doctor`
        checks for a container engine when one does. Default: none (builds nothing).
    """

    name: str
    summary: str
    stack: str
    dist: str | None = None
    jobs: str | None = None
    check: str | None = None
    idle_cost: str | None = None
    image_build: str | None = None

    def load_stack(self) -> Any:
        return _load(self.stack)

    def write_dist(self, config: Any, outdir: Any) -> list[Any]:
        return list(_load(self.dist)(config, outdir)) if self.dist else []

    def job_client(self) -> Any:
        if self.jobs is None:
            raise ConfigError("--backend", self.name, "a backend with jobs; " + one_of(job_backends()))
        return importlib.import_module(self.jobs)

    def check_config(self, config: Any) -> None:
        if self.check:
            _load(self.check)(config)

    def idle_lines(self, config: Any, region: str) -> list[Any]:
        return list(_load(self.idle_cost)(config, region)) if self.idle_cost else []

    def builds_image(self, config: Any) -> str | None:
        return _load(self.image_build)(config) if self.image_build else None


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add a backend; the order of registration is the order of stacks in the app."""
    if backend.name in _REGISTRY:
        raise ValueError(f"backend {backend.name!r} is registered twice")
    _REGISTRY[backend.name] = backend
    return backend


def backend(name: str) -> Backend:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError("backend", name, one_of(_REGISTRY)) from None


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def job_backends() -> tuple[str, ...]:
    return tuple(name for name, b in _REGISTRY.items() if b.jobs)


def deployed(config: Any) -> list[Backend]:
    """The config's backends, in registration order."""
    return [b for name, b in _REGISTRY.items() if name in config.backends]


def _load(ref: str) -> Callable[..., Any]:
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


register(Backend(
    name="eks",
    summary="EKS with Trainium nodes (Karpenter or managed node groups), device plugins, FSx, Volcano",
    stack="trainium_cdk.app.stacks.eks_stack:EksStack",
    dist="trainium_cdk.app.dist:write_eks_dist",
    jobs="trainium_cdk.cli.eks_jobs",
    check="trainium_cdk.app.config.validation:check_eks",
    idle_cost="trainium_cdk.app.cost:eks_idle",
    image_build="trainium_cdk.app.workloads:eks_image_build",
))
register(Backend(
    name="batch",
    summary="AWS Batch multi-node parallel jobs, one queue per compute group",
    stack="trainium_cdk.app.stacks.batch_stack:BatchStack",
    jobs="trainium_cdk.cli.batch_jobs",
    check="trainium_cdk.app.config.validation:check_batch",
    image_build="trainium_cdk.app.workloads:batch_image_build",
))
register(Backend(
    name="parallelcluster",
    summary="AWS ParallelCluster (Slurm), one queue per compute group",
    stack="trainium_cdk.app.stacks.parallelcluster_stack:ParallelClusterStack",
    dist="trainium_cdk.app.dist.parallelcluster:write_dist",
    jobs="trainium_cdk.cli.slurm_jobs",
    check="trainium_cdk.app.config.validation:check_parallelcluster",
    idle_cost="trainium_cdk.app.cost:parallelcluster_idle",
))
register(Backend(
    name="instance",
    summary="one Trainium development instance on a Neuron DLAMI",
    stack="trainium_cdk.app.stacks.instance_stack:InstanceStack",
    jobs="trainium_cdk.cli.instance_jobs",
    check="trainium_cdk.app.config.validation:check_instance",
    idle_cost="trainium_cdk.app.cost:instance_idle",
))
