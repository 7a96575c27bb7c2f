"""Every user data of every variant stays under 12 KiB, EC2's 16 KiB (before base64) less room for what the next
change adds: a development instance's setup once took 15,025 bytes and now ships as an S3 asset, as a Batch node's
does. Each deploy-time value (a file system's DNS name, an asset's S3 URL, a workspace's endpoint) is counted at
256 bytes, more than any of them is."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.app.test_lustre_tuning import _manifest_objects
from tests.support.apps import VARIANTS, synthesized
from tests.unit.node.test_node_programs import TOKEN_TEXT, _joined

LIMIT = 12 * 1024
DEPLOY_TIME_VALUE = 256


def _user_data(value: Any, where: str) -> list[tuple[str, Any]]:
    """(where, value) of every UserData (CloudFormation) or userData (an EC2NodeClass) below ``value``."""
    found = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("UserData", "userData"):
                found.append((where, inner))
            else:
                found += _user_data(inner, f"{where}/{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += _user_data(inner, f"{where}/{i}")
    return found


def sizes(variant: str) -> dict[str, int]:
    """Where -> bytes of each user data of a variant's templates (nested ones too) and Kubernetes manifests."""
    result = synthesized(variant)
    found = {}
    for path in result.outdir.glob("*.template.json"):
        template = json.loads(path.read_text())
        values = _user_data(template.get("Resources", {}), path.name)
        values += _user_data(_manifest_objects(template), f"{path.name}/manifests")
        for where, value in values:
            text = _joined(value)
            found[where] = len(text.encode()) + text.count(TOKEN_TEXT) * (DEPLOY_TIME_VALUE - len(TOKEN_TEXT))
    return found


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_user_data_is_under_12_kib(variant):
    found = sizes(variant)
    text = " ".join(found)
    backends = synthesized(variant).config.backends
    # Every backend that writes user data is measured: the instance, Batch's launch templates, EKS's nodes.
    assert ("instance" in backends) == ("instance.template.json" in text)
    assert ("batch" in backends) == ("LaunchTemplateData" in text and "batch" in text)
    assert ("eks" in backends) == ("eks" in text)
    assert {w: n for w, n in found.items() if n >= LIMIT} == {}
