"""The app: the config, its stacks, the backend registry, composition, dist/, cost, Day-2 and docs.

What this repository's ``app.py`` (and ``trn``) builds from a config; the library (constructs, charts, their
props, the public facts) is the package root's, and reads no config. Importable from here::

    from trainium_cdk.app import TrainingApp, compose, load_config, register_backend

Names resolve on first use, so that ``trainium_cdk.app.config`` (which the ``trn`` CLI reads) loads no stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> module that defines it
_PUBLIC = {
    # configuration
    "Config": "trainium_cdk.app.config",
    "load_config": "trainium_cdk.app.config",
    "build_config": "trainium_cdk.app.config",
    # backends
    "Backend": "trainium_cdk.app.backends",
    "register_backend": "trainium_cdk.app.backends",
    # stacks
    "compose": "trainium_cdk.app.stacks.composition",
    "TrainingApp": "trainium_cdk.app.stacks.composition",
    "NetworkStack": "trainium_cdk.app.stacks.network_stack",
    "StorageStack": "trainium_cdk.app.stacks.storage_stack",
    "EksStack": "trainium_cdk.app.stacks.eks_stack",
    "BatchStack": "trainium_cdk.app.stacks.batch_stack",
    "ParallelClusterStack": "trainium_cdk.app.stacks.parallelcluster_stack",
    "InstanceStack": "trainium_cdk.app.stacks.instance_stack",
    "PipelineStack": "trainium_cdk.app.stacks.pipeline_stack",
}

__all__ = sorted(_PUBLIC)

# Exported under another name than the module's.
_ALIASES = {"register_backend": "register"}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'trainium_cdk.app' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _ALIASES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*globals(), *__all__]


if TYPE_CHECKING:  # static type checkers see the real names
    from trainium_cdk.app.backends import Backend
    from trainium_cdk.app.backends import register as register_backend
    from trainium_cdk.app.config import Config, build_config, load_config
    from trainium_cdk.app.stacks.batch_stack import BatchStack
    from trainium_cdk.app.stacks.composition import TrainingApp, compose
    from trainium_cdk.app.stacks.eks_stack import EksStack
    from trainium_cdk.app.stacks.instance_stack import InstanceStack
    from trainium_cdk.app.stacks.network_stack import NetworkStack
    from trainium_cdk.app.stacks.parallelcluster_stack import ParallelClusterStack
    from trainium_cdk.app.stacks.pipeline_stack import PipelineStack
    from trainium_cdk.app.stacks.storage_stack import StorageStack
