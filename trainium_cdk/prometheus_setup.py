"""The lines of a host's setup (AWS Batch user data, the ParallelCluster compute setup) that install the
Prometheus-format exporters and agent: trainium_cdk/node/prometheus_node.py, written onto the node, run with the
releases versions.py pins."""

from __future__ import annotations

import base64
import gzip
import shlex
from pathlib import Path, PurePosixPath

from trainium_cdk import versions
from trainium_cdk.node import prometheus_node
from trainium_cdk.node.prometheus_node import NODE_PATH, install_command

# The setup's header names the remote-write URL (a deploy-time value: the program text holds none).
REMOTE_WRITE_VARIABLE = "PROMETHEUS_REMOTE_WRITE"


def setup_lines(*, deployment: str) -> list[str]:
    """Write the program to :data:`NODE_PATH` and install, into the workspace named by the header's
    ``PROMETHEUS_REMOTE_WRITE`` (its region, the one the URL names). A failed install
    leaves the node without these metrics, never without work: the line reports and goes on (CloudWatch still has
    the node's Neuron metrics, neuron_metrics.py)."""
    packed = base64.b64encode(gzip.compress(Path(prometheus_node.__file__).read_bytes(), mtime=0)).decode()
    argv = install_command(
        remote_write_url=f"${{{REMOTE_WRITE_VARIABLE}:?}}",
        deployment=deployment,
        downloads=[(versions.NODE_EXPORTER_URL, versions.NODE_EXPORTER_SHA256),
                   (versions.PROMETHEUS_URL, versions.PROMETHEUS_SHA256)],
        prometheus_client=versions.PROMETHEUS_CLIENT_VERSION,
    )
    command = " ".join(f'"{word}"' if word.startswith("${") else shlex.quote(word) for word in argv)
    return [
        f"mkdir -p {shlex.quote(str(PurePosixPath(NODE_PATH).parent))}",
        f"echo {packed} | base64 -d | gunzip > {NODE_PATH}",
        f"{command} || echo 'trainium-cdk: Prometheus exporters not installed; see above' >&2",
    ]
