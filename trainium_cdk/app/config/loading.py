"""Loading a config: the YAML file, the context overrides (``-c region=`` ...), one-line errors.

A YAML file (``cdk synth -c config=PATH``, default ``config/default.yaml``) plus the context overrides
``region``, ``backends``, ``instance_type``, ``nodes``, ``max_nodes`` and ``az_ids``. Every check runs
before any construct is built, and a failure raises :class:`ConfigError` naming the field, the value and
what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainium_cdk.app.config.models import ComputeGroup, Config
from trainium_cdk.errors import ConfigError, one_of, shown
from trainium_cdk.facts.catalog import BUILTIN_INSTANCE_TYPES, az_id_prefix

OVERRIDES = ("region", "backends", "instance_type", "nodes", "max_nodes", "az_ids")
# `-c config=default`: the model's built-in defaults, no file (an empty file is an error instead).
BUILTIN_DEFAULTS = "default"
# Where a project keeps its config, relative to its directory: cdk.json names it, `trn` looks for it,
# the pipeline synthesizes from it.
PROJECT_CONFIG_PATH = Path("config", "default.yaml")
# The default config shipped in the package. In a checkout it is a symbolic link to the project's
# PROJECT_CONFIG_PATH, which the wheel carries as a file: one file, in the checkout and installed.
# Resolved, so that a checkout's messages name the file a user edits.
DEFAULT_CONFIG_PATH = (Path(__file__).resolve().parent / "default.yaml").resolve()
_GROUP_OVERRIDES = ("instance_type", "nodes", "max_nodes", "az_ids")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def format_validation_error(err: ValidationError) -> ConfigError:
    """Turn pydantic's report into one ConfigError on one line: field, value, what is allowed, per problem."""
    lines = []
    first: tuple[str, Any, str] | None = None
    for item in err.errors():
        where = _loc(tuple(item["loc"]))
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):
            field = f"{where}.{cause.field}" if where else cause.field
            value, allowed = cause.value, cause.allowed
        else:
            field, value = where or "config", item.get("input")
            allowed = item["msg"].removeprefix("Value error, ")
            if item["type"] == "extra_forbidden":
                allowed = "unknown setting (a typo?)"
                value = item.get("input")
        first = first or (field, value, allowed)
        lines.append(f"{field} = {shown(value)}: {allowed}")
    assert first is not None
    error = ConfigError(*first)
    error.args = ("; ".join(" ".join(line.split()) for line in lines),)
    return error


def _int(name: str, value: Any) -> int:
    try:
        if isinstance(value, bool):  # cdk.json's "nodes": true is not one node
            raise TypeError(value)
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(name, value, "a whole number of nodes, at least 1") from None


def _offered_for(raw: Mapping[str, Any], instance_type: str, region: str) -> list[str]:
    """AZ IDs of ``region`` known to offer ``instance_type``: the catalog, custom types, instance_offerings
    (read defensively: the shapes are validated afterwards, with the whole config)."""
    found: list[str] = []
    spec = next((t for t in BUILTIN_INSTANCE_TYPES if t.name == instance_type), None)
    if spec is not None:
        found += list(spec.az_ids_in(region) or ())
    for custom in raw.get("custom_instance_types") or ():
        if isinstance(custom, Mapping) and custom.get("name") == instance_type:
            found += list((custom.get("offered_az_ids") or {}).get(region) or ())
    offerings = raw.get("instance_offerings")
    if isinstance(offerings, Mapping) and isinstance(offerings.get(instance_type), Mapping):
        extra = offerings[instance_type].get(region) or ()
        found += [extra] if isinstance(extra, str) else list(extra)
    return list(dict.fromkeys(str(a) for a in found))


def _retarget_region(data: dict[str, Any], groups: list[dict[str, Any]], region: str, pinned_azs: bool) -> None:
    """-c region=R: AZ IDs of another region can never work in R, so each group whose AZ IDs belong to
    another region gets the first AZ ID known to offer its type in R, and a VPC AZ list of another
    region is derived again. A group that names AZ IDs of R keeps them."""
    prefix = az_id_prefix(region) + "-"
    for i, group in enumerate(groups):
        current = group.get("az_ids", ComputeGroup.model_fields["az_ids"].default)
        current = [current] if isinstance(current, str) else list(current or ())
        if pinned_azs or (current and all(str(a).startswith(prefix) for a in current)):
            continue
        instance_type = str(group.get("instance_type", ComputeGroup.model_fields["instance_type"].default))
        offered = _offered_for(data, instance_type, region)
        if not offered:
            raise ConfigError(
                "region", region,
                f"a region where an AZ is known to offer {instance_type} (compute_groups[{i}]): none is in the "
                f"catalog or instance_offerings; pass -c az_ids=... (`trn azs --instance-type {instance_type} "
                f"--region {region}` lists them) or add them under instance_offerings",
            )
        group["az_ids"] = offered[:1]
    network = data.get("network")
    if isinstance(network, Mapping) and network.get("az_ids"):
        azs = network["az_ids"]
        azs = [azs] if isinstance(azs, str) else list(azs)
        if not all(str(a).startswith(prefix) for a in azs):
            data["network"] = {k: v for k, v in network.items() if k != "az_ids"}


def build_config(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> Config:
    """Validate a raw config (as read from YAML) with context overrides applied."""
    data = dict(raw)
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise ConfigError("context", unknown[0], "unknown override; " + one_of(OVERRIDES))
    if "backends" in overrides:
        data["backends"] = overrides["backends"]
    raw_groups = data.get("compute_groups")
    groups = [dict(g) if isinstance(g, Mapping) else g for g in (raw_groups or [{}])] if (
        raw_groups is None or isinstance(raw_groups, list | tuple)
    ) else None
    if groups is not None and all(isinstance(g, dict) for g in groups):
        az_ids = overrides.get("az_ids")
        if az_ids is not None:
            az_ids = [a.strip() for a in str(az_ids).split(",") if a.strip()] if isinstance(az_ids, str) else list(az_ids)
        for group in groups:
            if "instance_type" in overrides:
                group["instance_type"] = str(overrides["instance_type"])
            if "nodes" in overrides:
                group["nodes"] = _int("nodes", overrides["nodes"])
            if "max_nodes" in overrides:
                group["max_nodes"] = _int("max_nodes", overrides["max_nodes"])
            if az_ids is not None:
                group["az_ids"] = az_ids
        if "region" in overrides:
            _retarget_region(data, groups, str(overrides["region"]), az_ids is not None)
        if az_ids is not None:
            network = data.get("network")
            if isinstance(network, Mapping) and network.get("az_ids") and not set(az_ids) <= set(network["az_ids"]):
                data["network"] = {k: v for k, v in network.items() if k != "az_ids"}
        if any(k in overrides for k in _GROUP_OVERRIDES) or "region" in overrides:
            data["compute_groups"] = groups
    if "region" in overrides:
        data["region"] = str(overrides["region"])
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise format_validation_error(err) from None


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping that names one key twice: YAML itself keeps the later value without a word."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice (merge keys ``<<`` may still
    override: that is what they are for)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the safe loader's own error follows
            if first is not None:
                raise DuplicateKeyError(
                    f"key {key!r} first at line {first.line + 1}", first,
                    f"named again at line {key_node.start_mark.line + 1}", key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, path: str | Path) -> Any:
    """The YAML document of ``text`` (from ``path``, for messages); any way it is not valid YAML, or
    names a key twice, is a one-line ConfigError with the file, line and column."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader
    except DuplicateKeyError as err:
        mark = err.problem_mark
        assert mark is not None and err.context_mark is not None
        raise ConfigError(
            "config", f"{path}:{mark.line + 1}:{mark.column + 1}",
            f"each key once per mapping ({err.context}, {err.problem}; YAML would silently keep only the later one)",
        ) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(x for x in (err.context, err.problem) if x)
        raise ConfigError("config", where, f"valid YAML ({problem})") from None
    except yaml.YAMLError as err:
        raise ConfigError("config", str(path), "valid YAML (" + " ".join(str(err).split()) + ")") from None


def read_config_file(path: Path) -> dict[str, Any]:
    """The YAML mapping of a config file; every way it can be unreadable is a one-line ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("config", str(path), "a YAML file that exists") from None
    except IsADirectoryError:
        raise ConfigError("config", str(path), "a YAML file, not a directory") from None
    except (PermissionError, UnicodeDecodeError) as err:
        raise ConfigError("config", str(path), f"a readable UTF-8 YAML file ({type(err).__name__})") from None
    raw = parse_yaml(text, path)
    if raw is None:
        raise ConfigError(
            "config", str(path), "a YAML mapping of settings, not an empty file (-c config=default: the built-in defaults)"
        )
    if not isinstance(raw, dict):
        raise ConfigError("config", str(path), "a YAML mapping of settings at the top level")
    return raw


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read a YAML config file (``"default"``: the built-in defaults) and validate it with the context
    overrides. A setting's error names the file it came from."""
    if str(path) == BUILTIN_DEFAULTS:
        return build_config({}, overrides)
    path = Path(path) if path else DEFAULT_CONFIG_PATH
    raw = read_config_file(path)
    try:
        return build_config(raw, overrides)
    except ConfigError as err:
        err.args = (f"{path}: {err.args[0]}",)
        raise
