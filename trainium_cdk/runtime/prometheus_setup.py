"""The lines of a host's setup (AWS Batch user data, the development instance's) that install the
Prometheus-format exporters and agent: trainium_cdk/node/prometheus_node.py, written onto the node, run with the
releases versions.py pins."""

from __future__ import annotations

import base64
import gzip
import hashlib
import shlex
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from trainium_cdk.facts import versions
from trainium_cdk.node import prometheus_node
from trainium_cdk.node.prometheus_node import NODE_PATH, install_command

# The setup's header names the remote-write URL (a deploy-time value: the program text holds none).
REMOTE_WRITE_VARIABLE = "PROMETHEUS_REMOTE_WRITE"
NOT_INSTALLED = "trainium-cdk: Prometheus exporters not installed; see above"


def _install_line(deployment: str) -> str:
    """The install of :data:`NODE_PATH`, which reports and goes on when it fails (see :func:`setup_lines`)."""
    argv = install_command(
        remote_write_url=f"${{{REMOTE_WRITE_VARIABLE}:?}}",
        deployment=deployment,
        downloads=[(versions.NODE_EXPORTER_URL, versions.NODE_EXPORTER_SHA256),
                   (versions.PROMETHEUS_URL, versions.PROMETHEUS_SHA256)],
        prometheus_client=versions.PROMETHEUS_CLIENT_VERSION,
    )
    return " ".join(f'"{word}"' if word.startswith("${") else shlex.quote(word) for word in argv)


def setup_lines(*, deployment: str) -> list[str]:
    """Write the program to :data:`NODE_PATH` and install, into the workspace named by the header's
    ``PROMETHEUS_REMOTE_WRITE`` (its region, the one the URL names). A failed install
    leaves the node without these metrics, never without work: the line reports and goes on (CloudWatch still has
    the node's Neuron metrics, neuron_metrics.py)."""
    packed = base64.b64encode(gzip.compress(program_bytes(), mtime=0)).decode()
    return [
        f"mkdir -p {shlex.quote(str(PurePosixPath(NODE_PATH).parent))}",
        f"echo {packed} | base64 -d | gunzip > {NODE_PATH}",
        f"{_install_line(deployment)} || echo '{NOT_INSTALLED}' >&2",
    ]


SETUP_PATH = str(PurePosixPath(NODE_PATH).parent / "prometheus_setup.sh")


def setup_script(*, deployment: str, first: Sequence[str] = ()) -> str:
    """:func:`setup_lines` (after the lines ``first``) as a script of its own, for a host whose user data has no room
    for the program (EC2 holds 16 KB): :func:`fetched_setup_lines` fetch and run it."""
    return "\n".join(["#!/bin/bash", "# trainium-cdk: the Prometheus-format exporters and agent (prometheus_setup.py)",
                      *first, *setup_lines(deployment=deployment)]) + "\n"


def fetched_setup_lines(*, script: str, object_url: str, region: str, remote_write_url: str) -> list[str]:
    """Fetch :func:`setup_script`'s text ``script`` from ``object_url`` (an S3 asset of it) and run it, into the
    workspace at ``remote_write_url``, only if its sha256 is that text's (the Batch bootstrap's rule,
    node/batch_bootstrap.sh): nothing runs otherwise, and the host goes on."""
    digest = hashlib.sha256(script.encode()).hexdigest()
    return [
        f"mkdir -p {shlex.quote(str(PurePosixPath(SETUP_PATH).parent))}",
        f"{{ aws s3 cp --region {shlex.quote(region)} {object_url} {SETUP_PATH}"
        f" && echo '{digest}  {SETUP_PATH}' | sha256sum --check --status"
        f" && {REMOTE_WRITE_VARIABLE}='{remote_write_url}' bash {SETUP_PATH}; }} || echo '{NOT_INSTALLED}' >&2",
    ]


def program_bytes() -> bytes:
    return Path(prometheus_node.__file__).read_bytes()
