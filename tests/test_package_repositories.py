"""Every package repository a generated program writes on a node checks signatures explicitly (issue 33, item 4):
a yum/dnf repository says ``gpgcheck=1`` (dnf's own default is off, dnf.conf(5): only the AMI's dnf.conf turns it
on), an apt source names its keyring with ``signed-by`` (without it apt trusts every key in its global keyring).

Over everything the four-backend app synthesizes (templates, user data, assets: the Batch node setup, the
ParallelCluster setup script) and everything ``make synth`` writes to dist/ (the pcluster CLI's files, the image component).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import synth, template_text
from tests.test_hostile_inputs import FULL
from trainium_cdk.config import build_config
from trainium_cdk.dist import write_dist

# A dnf repository section: from its [id] line to the next section, heredoc end or blank line.
YUM_SECTION = re.compile(r"^\[[\w.-]+\]\n(?:(?!\n\n|\n\[|\nEOF)[\s\S])*?\bbaseurl=.*(?:\n(?!\[|EOF)[^\n]+)*", re.M)
# An apt one-line source: "deb [options] URI suite component...".
APT_SOURCE = re.compile(r"\bdeb (\[[^\]]*\] )?(https?|s3)://\S+")


def _strings(value: Any) -> Iterator[str]:
    """Every string of a template, an Fn::Join's pieces also joined (helpers.template_text)."""
    if isinstance(value, dict):
        if set(value) == {"Fn::Join"}:
            yield template_text(value)
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)
    elif isinstance(value, str):
        yield value


def _texts(folder: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        yield str(path.relative_to(folder)), text
        if path.suffix == ".json":
            try:
                document = json.loads(text)
            except ValueError:
                continue
            for i, string in enumerate(_strings(document)):
                yield f"{path.relative_to(folder)}#{i}", string


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[tuple[str, str]]:
    config = build_config(FULL)
    dist = tmp_path_factory.mktemp("dist")
    write_dist(config, dist)
    return [*_texts(synth(config, nag=False).outdir), *_texts(dist)]


def test_every_yum_repository_checks_signatures(generated):
    sections = [(where, section) for where, text in generated for section in YUM_SECTION.findall(text)]
    assert any("neuron" in section for _, section in sections), "the Batch node's Neuron repository was not seen"
    unchecked = [(where, section) for where, section in sections if not re.search(r"^gpgcheck=1$", section, re.M)]
    assert unchecked == []


def test_every_apt_source_names_its_keyring(generated):
    sources = [(where, m.group(0)) for where, text in generated for m in APT_SOURCE.finditer(text)]
    assert any("apt.repos.neuron.amazonaws.com" in source for _, source in sources), "no Neuron apt source seen"
    assert [(w, s) for w, s in sources if not re.match(r"deb \[[^\]]*\bsigned-by=/", s)] == []
