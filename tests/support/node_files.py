"""Run a node program (trainium_cdk/node/) as a generated text carries it: the file itself, from disk, with
its header's values as environment variables (where a stand-in needs another path, the test adds a variable
the program reads, or overrides a value), never an edited copy of the text."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainium_cdk import node


def shell_part(user_data: str) -> str:
    """The shell script part of MIME multi-part user data (node.multipart's last part)."""
    part = user_data.split('Content-Type: text/x-shellscript; charset="us-ascii"\n\n', 1)[1]
    return part.rsplit("\n\n--", 1)[0] + "\n"


def split(text: str, *names: str) -> dict[str, str]:
    """The header values of a generated program, checked to be followed by the files ``names`` byte for byte
    (before the header, a ``#!`` line and what the generator runs first, such as the Lustre client's tuning in
    user data; after the files, what the generator adds, such as the Batch user data's neuron_metrics.py)."""
    body = "".join(node.source(name) for name in names)
    assert body in text, f"the generated text does not carry {names} as they are"
    head = text[: text.index(body)].splitlines()
    if node.HEADER in head:
        head = head[head.index(node.HEADER):]
    elif head and head[0].startswith("#!"):
        head = head[1:]
    if not head:
        return {}
    assert head[0] == node.HEADER, head[0]
    values = {}
    for line in head[1:]:
        name, _, value = line.partition("=")
        (values[name],) = shlex.split(value)
    return values


def header_value(user_data: Any, name: str) -> list[Any]:
    """A header value (``NAME=...`` line) of a synthesized user data (``{"Fn::Base64": {"Fn::Join": ...}}``), as its
    text and CloudFormation expressions in order, quotes included: what the node gets at deploy."""
    body = user_data.get("Fn::Base64", user_data)
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    found: list[Any] | None = None
    for part in parts:
        if found is None:
            if not (isinstance(part, str) and f"\n{name}=" in part):
                continue
            found, part = [], part.split(f"\n{name}=", 1)[1]
        if isinstance(part, str) and "\n" in part:
            found.append(part.split("\n", 1)[0])
            break
        found.append(part)
    assert found is not None, f"no {name}= line in the user data"
    return [p for p in found if p != ""]


def run(name: str | tuple[str, ...], values: Mapping[str, str], env: Mapping[str, str], *, shell: str = "bash",
        args: tuple[str, ...] = (), timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run node file ``name`` (or files, one program as node.program joins them) with ``values`` (a header's,
    possibly overridden) in its environment."""
    command = ([shell, str(node.FOLDER / name)] if isinstance(name, str)
               else [shell, "-c", "".join(node.source(n) for n in name), name[0]])
    return subprocess.run([*command, *args], env={**env, **values}, capture_output=True, text=True, timeout=timeout,
                          check=False)


def fetched_setup(user_data: str, outdir: Path) -> tuple[dict[str, str], str]:
    """A Batch node's user data (its shell part) or the development instance's (node/batch_bootstrap.sh after the
    header) -> the header's values and the setup program it fetches: the one file asset of the cloud assembly ``outdir`` (``asset.<key>.sh``, uploaded
    as ``<key>.sh``) whose sha256 is NODE_SETUP_SHA256, as the node checks it."""
    values = split(user_data, "batch_bootstrap.sh")
    (program,) = [text for path in outdir.glob("asset.*.sh")
                  if hashlib.sha256((text := path.read_text()).encode()).hexdigest() == values["NODE_SETUP_SHA256"]]
    return values, program


def rpm_stand_in(driver: str, runtime: str, collectives: str) -> str:
    """The body of an ``rpm`` stand-in for a Batch host whose AMI has this Neuron driver, runtime and collectives
    (``rpm -q --qf %{VERSION}`` of each package) and no python3-boto3."""
    return (f'case "$*" in *aws-neuronx-dkms*) printf "{driver}" ;; *python3-boto3*) exit 1 ;;\n'
            f'  *aws-neuronx-runtime-lib*) printf "{runtime}" ;; *aws-neuronx-collectives*) printf "{collectives}" ;;\n'
            f'esac\n')
