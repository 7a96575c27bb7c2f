"""What every subcommand shares: the error type, config loading, AWS clients, output.

Nothing here calls AWS at import time; boto3 clients are made when a command runs.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from trainium_cdk.app.config import BUILTIN_DEFAULTS, OVERRIDES, PROJECT_CONFIG_PATH, Config, load_config
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


# What tools/synth.py records of the last `make synth`, in the project directory: {"args": [cdk synth arguments]}.
SYNTH_RECORD = Path("cdk.out", "trainium-cdk-synth.json")


@dataclass(frozen=True)
class SynthContext:
    """The `-c` context of the last `make synth` in a project directory: its config and its overrides."""

    config: str | None
    overrides: dict[str, str]
    pairs: tuple[str, ...]


def _context_pairs(args: Sequence[str]) -> list[str]:
    """The `-c key=value` pairs of a CDK command line (-c, --context, -c=..., --context=...), in order."""
    found, rest = [], list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("-c", "--context") and rest:
            found.append(rest.pop(0))
        elif arg.startswith(("-c=", "--context=")):
            found.append(arg.split("=", 1)[1])
    return found


def last_synth(cwd: Path | None = None) -> SynthContext | None:
    """The context of the last `make synth` of ``cwd`` (a project directory: its cdk.json and cdk.out), when it
    had `-c config=PATH` or overrides; None otherwise."""
    cwd = cwd or Path.cwd()
    if not (cwd / "cdk.json").is_file():
        return None
    try:
        args = json.loads((cwd / SYNTH_RECORD).read_text(encoding="utf-8"))["args"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(args, list):
        return None
    config, overrides, pairs = None, {}, []
    for pair in _context_pairs([str(a) for a in args]):
        key, _, value = pair.partition("=")
        if key == "config":
            config = value if value == BUILTIN_DEFAULTS or Path(value).is_absolute() else str(cwd / value)
        elif key in OVERRIDES:
            overrides[key] = value
        else:
            continue  # pipeline=true, CDK feature flags: not a setting of the deployment
        pairs.append(pair)
    return SynthContext(config, overrides, tuple(pairs)) if pairs else None


class _Notices:
    """Lines `trn` says once a run, on the stream main() gives it (stderr)."""

    stream: TextIO | None = None
    said: set[str] = set()

    @classmethod
    def reset(cls, stream: TextIO) -> None:
        cls.stream, cls.said = stream, set()

    @classmethod
    def once(cls, line: str) -> None:
        if line not in cls.said:
            cls.said.add(line)
            stream = cls.stream or sys.stderr
            stream.write(line + "\n")
            stream.flush()


def notices_to(stream: TextIO) -> None:
    """Where this run's notices go (main(): its stderr), each said once."""
    _Notices.reset(stream)


def read_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> Config:
    """The config ``path`` with ``overrides``. Given neither (nor $TRN_CONFIG), in a project directory: the
    config and `-c` overrides of its last `make synth`, said in one line, so that `trn submit` after
    `make synth ARGS="-c backends=batch"` targets what that synth (and `make deploy`) made."""
    synth = synth_context(path, overrides)
    if synth is not None:
        return load_config(synth.config or default_config_path(), synth.overrides)
    return load_config(path or default_config_path(), overrides)


def synth_context(path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> SynthContext | None:
    """The last `make synth`'s context when the user gave no --config, no -c and no $TRN_CONFIG (said once)."""
    if path is not None or overrides or os.environ.get(CONFIG_ENV):
        return None
    synth = last_synth()
    if synth is not None:
        given = " ".join(f"-c {shlex.quote(pair)}" for pair in synth.pairs)
        _Notices.once(f"{PROG}: using the context of the last `make synth` ({SYNTH_RECORD}): {given}; "
                      "-c or --config of your own replace it")
    return synth


def session(region: str | None):
    """A boto3 session for ``region`` (AWS_PROFILE and the usual credential chain apply)."""
    import boto3

    return boto3.session.Session(region_name=region)


def has_credentials(sess: Any) -> bool:
    """Whether the credential chain finds credentials (nothing is sent to AWS): a dry run without them stays offline."""
    try:
        return sess.get_credentials() is not None
    except Exception:  # noqa: BLE001 - a broken profile or SSO cache: no usable credentials, as for the dry run
        return False


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


def stack_outputs(
    cfn: Any, stack: str, region: str, *, backend: str, own: bool = False, deploy: str | None = None
) -> dict[str, str]:
    """The outputs of a deployed stack by key; a stack that is missing or broken is the user's to fix.
    ``own``: a stack of the user's own CDK app (not this project's `make deploy`); ``deploy`` says how to deploy a
    stack that is not a backend's (default: the backend's `make synth`, `make plan`, `make deploy`)."""
    from botocore.exceptions import ClientError

    try:
        stacks = cfn.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as error:
        if error_code(error) == "ValidationError" and "does not exist" in str(error) and own:
            raise CliError(f"stack {stack} does not exist in {region}: deploy your app first, or pass --region") from None
        if error_code(error) == "ValidationError" and "does not exist" in str(error):
            deploy = deploy or (
                f"deploy the {backend} backend first (`make synth` with it in backends, e.g. "
                f"ARGS=\"-c backends={backend}\", then `make plan` and `make deploy`)"
            )
            raise CliError(
                f"stack {stack} does not exist in {region}: {deploy}, or pass -c region=R / --config for another "
                "deployment"
            ) from None
        raise
    status = stacks[0].get("StackStatus", "")
    if status.endswith("_FAILED") or status.startswith("DELETE") or status == "ROLLBACK_COMPLETE":
        raise CliError(f"stack {stack} is {status}: fix and redeploy it before submitting jobs")
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", []) if "OutputKey" in o}


def deployed_output(config: Config, part: str, output_id: str) -> str:
    """One output of the deployed ``<project>-<part>`` stack (``output_id``: its names.OUTPUT_* id), or one line
    saying to redeploy a stack that lacks it."""
    from trainium_cdk.facts.names import output_key

    stack = config.stack_name(part)
    outputs = stack_outputs(client(session(config.region), "cloudformation"), stack, config.region, backend=part)
    key = output_key(output_id)
    if key not in outputs:
        raise CliError(f"stack {stack} has no {key} output: redeploy it (make deploy)")
    return outputs[key]
