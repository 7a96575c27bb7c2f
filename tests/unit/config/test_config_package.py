"""The config package: every name the project imports from it, one home for each shared check, and
one default config file for the checkout and the installed package."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import trainium_cdk.app.config as config_package
from tests.support import paths
from trainium_cdk.app.config import DEFAULT_CONFIG_PATH, PROJECT_CONFIG_PATH, ConfigError, build_config

ROOT = paths.ROOT
PIPELINE = {
    "repository": "owner/repo",
    "account": "111111111111",
    "connection_arn": "arn:aws:codeconnections:us-west-2:111111111111:connection/abc",
    "environments": [{"name": "dev", "account": "222222222222"}],
}


def _imported_from_config() -> set[str]:
    """Every name a module of the repository imports with ``from trainium_cdk.app.config import ...``."""
    names: set[str] = set()
    files = [ROOT / "app.py", *(path for d in ("trainium_cdk", "tests", "tools") for path in (ROOT / d).rglob("*.py")
                                # the site's npm packages (tools/docs-site/node_modules): katex ships Python scripts
                                if "node_modules" not in path.parts)]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "trainium_cdk.app.config":
                names.update(alias.name for alias in node.names)
    return names


def test_every_name_the_project_imports_is_exported():
    names = _imported_from_config()
    assert {"Config", "load_config", "build_config", "ComputeGroup"} <= names
    assert sorted(names - set(config_package.__all__)) == []
    for name in config_package.__all__:
        assert getattr(config_package, name) is not None, name


def test_the_packaged_default_is_the_project_file():
    """trainium_cdk/app/config/default.yaml, which the wheel carries, is a link to config/default.yaml (the
    file users edit): one file, no copy to keep in step."""
    packaged = ROOT / "trainium_cdk" / "app" / "config" / "default.yaml"
    assert packaged.is_symlink()
    assert packaged.resolve() == (ROOT / PROJECT_CONFIG_PATH).resolve() == DEFAULT_CONFIG_PATH
    assert json.loads((ROOT / "cdk.json").read_text())["context"]["config"] == PROJECT_CONFIG_PATH.as_posix()


def _error(raw: dict) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        build_config(raw)
    return caught.value


def test_names_share_one_rule():
    rule = "lower-case letters, digits and '-', starting with a letter, at most 23 characters"
    for raw, field in (
        ({"project": "Trainium"}, "project"),
        ({"compute_groups": [{"name": "a" * 24}]}, "compute_groups[0].name"),
        ({"pipeline": {**PIPELINE, "environments": [{"name": "Dev", "account": "222222222222"}]}},
         "pipeline.environments[0].name"),
    ):
        err = _error(raw)
        assert (err.field, err.allowed) == (field, rule)


def test_log_retentions_share_one_rule():
    for section, key in (("network", "flow_log_retention_days"), ("eks", "log_retention_days"),
                         ("batch", "log_retention_days")):
        err = _error({section: {key: 2}})
        assert err.field == f"{section}.{key}"
        assert err.allowed.startswith("a CloudWatch Logs retention; allowed: 1, 3, 5, 7, 14, 30")


def test_cidrs_share_one_rule():
    err = _error({"network": {"cidr": "10.0.0.1/16"}})
    assert err.field == "network.cidr"
    assert err.allowed.startswith("an IPv4 network such as 10.0.0.0/16 (")
    err = _error({"eks": {"endpoint_access": "public-and-private", "public_access_cidrs": ["office"]}})
    assert err.field == "eks.public_access_cidrs[0]"
    assert err.allowed.startswith("an IPv4 network such as 203.0.113.0/24 (")


def test_account_ids_share_one_rule():
    for pipeline, field in (
        ({**PIPELINE, "account": "1234"}, "pipeline.account"),
        ({**PIPELINE, "environments": [{"name": "dev", "account": "x"}]}, "pipeline.environments[0].account"),
    ):
        err = _error({"pipeline": pipeline})
        assert (err.field, err.allowed) == (field, "a 12-digit AWS account id")
