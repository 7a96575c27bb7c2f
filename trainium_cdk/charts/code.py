"""A ConfigMap of program files that training jobs mount as their code (JobSpec.code): the MLP example's train.py on
EKS when the deploy builds no example image (eks.example_images: false)."""

from __future__ import annotations

from collections.abc import Mapping

from cdk8s import Chart
from constructs import Construct

from trainium_cdk.charts._k8s import CHART_LABELS, api_object, check_name
from trainium_cdk.charts.training import DEFAULT_NAMESPACE
from trainium_cdk.errors import ConfigError

# What a ConfigMap holds at most (Kubernetes: 1 MiB of data).
CONFIG_MAP_BYTES = 1024 * 1024


class CodeConfigMap(Chart):
    """A ConfigMap of program files (file name -> text) that jobs mount as their code (JobSpec.code): the MLP
    example's train.py, when the deploy builds no example image.

    :param name: the ConfigMap's name.
    :param files: file name -> text (a ConfigMap holds 1 MiB in all).
    :param namespace: Default: ``default``.
    """

    def __init__(self, scope: Construct, id: str, *, name: str, files: Mapping[str, str],
                 namespace: str = DEFAULT_NAMESPACE) -> None:
        check_name("CodeConfigMap.name", name)
        size = sum(len(text.encode()) for text in files.values())
        if size > CONFIG_MAP_BYTES:
            raise ConfigError("CodeConfigMap.files", f"{size} bytes", f"at most {CONFIG_MAP_BYTES} (a ConfigMap's limit)")
        super().__init__(scope, id, labels=CHART_LABELS)
        self.config_map = api_object(self, "ConfigMap", api_version="v1", kind="ConfigMap", name=name,
                                     namespace=namespace, data=dict(files))
