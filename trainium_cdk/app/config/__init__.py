"""The typed configuration of a deployment: one model, loaded only by ``app.py``.

- :mod:`.models`: a model per section of the YAML file, and :class:`Config`, the whole deployment
  with the facts derived from it (the VPC's AZs, the catalog with custom types, a job's spec).
- :mod:`.validation`: the checks across sections that :class:`Config`'s validators run.
- :mod:`.fields`: the checks several fields share (names, log retentions, IPv4 networks).
- :mod:`.loading`: the YAML file, the ``-c`` context overrides, one-line errors.

The AWS facts the checks use (Lustre sizes, log retentions, AZ IDs) live in :mod:`trainium_cdk.facts.catalog`.
"""

from __future__ import annotations

from trainium_cdk.app.config.loading import (
    BUILTIN_DEFAULTS,
    DEFAULT_CONFIG_PATH,
    OVERRIDES,
    PROJECT_CONFIG_PATH,
    build_config,
    format_validation_error,
    load_config,
    parse_yaml,
    read_config_file,
)
from trainium_cdk.app.config.models import (
    BACKENDS,
    REMOVAL_POLICIES,
    BatchSettings,
    Capacity,
    ComputeGroup,
    Config,
    CustomInstanceType,
    DataRepository,
    EksSettings,
    HuggingFaceSettings,
    InstanceSettings,
    NetworkSettings,
    NeuronSettings,
    NotificationSettings,
    ObservabilitySettings,
    ParallelClusterSettings,
    PipelineSettings,
    StorageSettings,
    TrainingJobSettings,
    WorkloadSettings,
)
from trainium_cdk.app.config.team_settings import TeamSettings
from trainium_cdk.app.config.validation import OFFERINGS_SHAPE
from trainium_cdk.app.config.workload_settings import EXAMPLE_COMMAND, DataLoaderSettings, PipelineEnvironment
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import (
    LOG_RETENTION_DAYS,
    LUSTRE_THROUGHPUT_MB_PER_TIB,
    SLURM_RESERVED_QUEUE_NAMES,
    az_id_prefix,
)

__all__ = [
    "TeamSettings",
    "BACKENDS",
    "BUILTIN_DEFAULTS",
    "DEFAULT_CONFIG_PATH",
    "EXAMPLE_COMMAND",
    "LOG_RETENTION_DAYS",
    "LUSTRE_THROUGHPUT_MB_PER_TIB",
    "OFFERINGS_SHAPE",
    "OVERRIDES",
    "PROJECT_CONFIG_PATH",
    "REMOVAL_POLICIES",
    "SLURM_RESERVED_QUEUE_NAMES",
    "BatchSettings",
    "Capacity",
    "ComputeGroup",
    "Config",
    "ConfigError",
    "CustomInstanceType",
    "DataLoaderSettings",
    "DataRepository",
    "EksSettings",
    "HuggingFaceSettings",
    "InstanceSettings",
    "NetworkSettings",
    "NeuronSettings",
    "NotificationSettings",
    "ObservabilitySettings",
    "ParallelClusterSettings",
    "PipelineEnvironment",
    "PipelineSettings",
    "StorageSettings",
    "TrainingJobSettings",
    "WorkloadSettings",
    "az_id_prefix",
    "build_config",
    "format_validation_error",
    "load_config",
    "parse_yaml",
    "read_config_file",
]
