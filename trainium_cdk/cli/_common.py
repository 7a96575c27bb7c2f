"""What every subcommand shares: the error type, config loading, AWS clients, output.

Nothing here calls AWS at import time; boto3 clients are made when a command runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from trainium_cdk.config import BUILTIN_DEFAULTS, OVERRIDES, PROJECT_CONFIG_PATH, Config, load_config
from trainium_cdk.errors import ConfigError, one_of

PROG = "trn"
# Retries inside botocore before a throttling error reaches the user.
BOTO_RETRIES = {"mode": "standard", "max_attempts": 6}
# Quota codes of the EC2 "Running On-Demand <family> instances" vCPU quotas, by family prefix.
# All Trainium families (trn1, trn1n, trn2, trn2u) share one quota, all Inferentia2 ones another.
ON_DEMAND_QUOTAS = {
    "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
    "inf": ("L-1945791B", "Running On-Demand Inf instances"),
}


class CliError(Exception):
    """A failure the user can act on: one line on stderr, then exit ``code`` (2 unless said)."""

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# Where `trn` looks for the config when --config is not given (see find_config_path).
CONFIG_ENV = "TRN_CONFIG"
NO_CONFIG = (
    "no config found: pass --config PATH (the YAML the stacks were deployed from), set TRN_CONFIG, "
    "or run trn in the project directory (its cdk.json names the config)"
)


def find_config_path(cwd: Path | None = None) -> Path | None:
    """$TRN_CONFIG, else the config cdk.json of the working directory names, else ./config/default.yaml.

    Never the copy inside the installed package: a pip-installed `trn` would read a config that
    deployed nothing of the user's."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    cwd = cwd or Path.cwd()
    try:
        named = json.loads((cwd / "cdk.json").read_text()).get("context", {}).get("config")
    except (OSError, ValueError, AttributeError):
        named = None
    if isinstance(named, str) and named and named != BUILTIN_DEFAULTS:
        return cwd / named
    local = cwd / PROJECT_CONFIG_PATH
    return local if local.is_file() else None


def default_config_path() -> Path:
    path = find_config_path()
    if path is None:
        raise CliError(NO_CONFIG)
    return path


def parse_overrides(pairs: Sequence[str] | None) -> dict[str, str]:
    """``-c key=value`` pairs, the same overrides as ``cdk synth -c``."""
    overrides: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("-c", pair, "key=value, with key one of " + ", ".join(OVERRIDES))
        if key not in OVERRIDES:
            raise ConfigError("-c", key, "unknown override; " + one_of(OVERRIDES))
        overrides[key] = value.strip()
    return overrides


def read_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> Config:
    return load_config(path or default_config_path(), overrides)


def session(region: str | None):
    """A boto3 session for ``region`` (AWS_PROFILE and the usual credential chain apply)."""
    import boto3

    return boto3.session.Session(region_name=region)


def client(sess: Any, service: str) -> Any:
    from botocore.config import Config as BotoConfig

    return sess.client(service, config=BotoConfig(retries=dict(BOTO_RETRIES)))


def error_code(err: BaseException) -> str:
    response = getattr(err, "response", None) or {}
    return str((response.get("Error") or {}).get("Code", ""))


def error_message(err: BaseException) -> str:
    response = getattr(err, "response", None) or {}
    return str((response.get("Error") or {}).get("Message", "")) or str(err)


DENIED_CODES = frozenset({
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException",
    "AuthFailure", "OptInRequired",
})
BAD_CREDENTIAL_CODES = frozenset({
    "UnrecognizedClientException", "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException",
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "RequestExpired",
})
THROTTLING_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
    "TooManyRequestsException", "RequestThrottled", "RequestThrottledException", "SlowDown",
})


def is_denied(err: BaseException) -> bool:
    return error_code(err) in DENIED_CODES


def natural_az_key(az: str) -> tuple[str, int, str]:
    """usw2-az2 before usw2-az10; AZ names sort by their letter."""
    head, _, tail = az.rpartition("-az")
    if head and tail.isdigit():
        return (head, int(tail), az)
    return (az, 0, az)


def table(rows: Iterable[Sequence[str]], headers: Sequence[str], out: TextIO) -> None:
    rows = [list(map(str, r)) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    for row in [list(headers), *rows]:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")


def is_interactive(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def stack_outputs(cfn: Any, stack: str, region: str, *, backend: str, deploy: str | None = None) -> dict[str, str]:
    """The outputs of a deployed stack by key; a stack that is missing or broken is the user's to fix.
    ``deploy`` says how to deploy a stack that is not a backend's (default: the backend's `cdk deploy`)."""
    from botocore.exceptions import ClientError

    try:
        stacks = cfn.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as error:
        if error_code(error) == "ValidationError" and "does not exist" in str(error):
            deploy = deploy or f"deploy the {backend} backend first (`cdk deploy {stack} -c backends={backend}`)"
            raise CliError(
                f"stack {stack} does not exist in {region}: {deploy}, or pass -c region=R / --config for another "
                "deployment"
            ) from None
        raise
    status = stacks[0].get("StackStatus", "")
    if status.endswith("_FAILED") or status.startswith("DELETE") or status == "ROLLBACK_COMPLETE":
        raise CliError(f"stack {stack} is {status}: fix and redeploy it before submitting jobs")
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", []) if "OutputKey" in o}
