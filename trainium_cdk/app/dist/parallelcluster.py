"""dist/parallelcluster/: the cluster configuration, the setup script and the batch scripts for users
of the pcluster CLI (the same cluster the ParallelCluster stack deploys)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from trainium_cdk import node
from trainium_cdk.node import neuron_metrics, prometheus_node
from trainium_cdk.app.config import Config
from trainium_cdk.app.parallelcluster.cluster_config import (
    accounting_commands, cluster_file_name, placeholder, render_cluster_yaml,
)
from trainium_cdk.app.parallelcluster.health import render_prolog
from trainium_cdk.app.parallelcluster.image import (
    COMPONENT_SCRIPT_NAME, image_file_name, render_component_script, render_image_yaml,
)
from trainium_cdk.parallelcluster.parts import (
    HEAD_NODE_SCRIPT, LUSTRE_TUNING_NAME, NEURON_METRICS_NAME, NEURON_METRICS_POLICY_NAME, PROLOG_NAME, PROMETHEUS_NODE_NAME,
    PROMETHEUS_POLICY_NAME, SETUP_SCRIPT, neuron_metrics_policy, prometheus_policy,
)
from trainium_cdk.app.parallelcluster.sbatch import head_node_files
from trainium_cdk.parallelcluster.accounting import COMMANDS_FILE_NAME
from trainium_cdk.facts.session_manager import POLICY_FILE_NAME as SESSION_MANAGER_POLICY_FILE
from trainium_cdk.facts.session_manager import session_manager_policy


def fetched_files(config: Config) -> dict[str, str]:
    """File name -> text of what the head and compute nodes' setup script fetches from the scripts bucket."""
    files = {**head_node_files(config), PROLOG_NAME: render_prolog(config),
             NEURON_METRICS_NAME: Path(neuron_metrics.__file__).read_text()}
    if config.observability.prometheus:
        files[PROMETHEUS_NODE_NAME] = Path(prometheus_node.__file__).read_text()
    commands = accounting_commands(config)
    if commands is not None:
        files[COMMANDS_FILE_NAME] = commands
    return files


def fetched_digests(config: Config) -> dict[str, str]:
    """File name -> sha256 of each of :func:`fetched_files` (the cluster configuration carries them)."""
    return {name: hashlib.sha256(text.encode()).hexdigest() for name, text in fetched_files(config).items()}


def write_dist(config: Config, outdir: Path = Path("dist")) -> list[Path]:
    """Write ``outdir/parallelcluster/{<project>-cluster.yaml, neuron_setup.sh, head_node_setup.sh,
    train-<group>.sbatch, the health prolog, lustre_tuning.sh, neuron_metrics.py and its policy document, <project>-image.yaml
    and its component script; with observability.prometheus, prometheus_node.py and its remote-write policy's document}``
    (the ParallelCluster backend's ``dist`` in trainium_cdk/app/backends.py);
    return the paths written."""
    out = outdir / "parallelcluster"
    out.mkdir(parents=True, exist_ok=True)
    cluster = out / cluster_file_name(config)
    cluster.write_text(render_cluster_yaml(config, fetched_digests(config)))
    written = [cluster]
    for source in (SETUP_SCRIPT, HEAD_NODE_SCRIPT, node.FOLDER / LUSTRE_TUNING_NAME):
        script = out / source.name
        shutil.copyfile(source, script)
        script.chmod(0o755)
        written.append(script)
    files = {
        **fetched_files(config),
        NEURON_METRICS_POLICY_NAME: json.dumps(neuron_metrics_policy(), indent=2) + "\n",
        SESSION_MANAGER_POLICY_FILE: json.dumps(session_manager_policy(run_command=True), indent=2) + "\n",
        image_file_name(config): render_image_yaml(config),
        COMPONENT_SCRIPT_NAME: render_component_script(config),
    }
    if config.observability.prometheus:
        # The workspace's ARN is known after the network stack's deploy: the document carries its placeholder.
        files[PROMETHEUS_POLICY_NAME] = json.dumps(prometheus_policy(placeholder("PROMETHEUS_WORKSPACE_ARN")), indent=2) + "\n"
    for name, text in files.items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written
