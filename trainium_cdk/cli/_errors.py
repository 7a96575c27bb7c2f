"""Turn the errors a user can fix into one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

from trainium_cdk.cli._common import (
    BAD_CREDENTIAL_CODES,
    DENIED_CODES,
    THROTTLING_CODES,
    CliError,
    error_code,
    error_message,
)
from trainium_cdk.errors import ConfigError

EXIT_USAGE = 2

CREDENTIALS_HINT = "run `aws configure` or `aws sso login`, or set AWS_PROFILE, then try again"


def _one_line(text: object) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def explain(err: BaseException) -> tuple[str, int] | None:
    """(message, exit code) for an error the user can act on; None for a bug (let it raise)."""
    if isinstance(err, CliError):
        return _one_line(str(err)), err.code
    if isinstance(err, ConfigError):
        # A command-line argument: a flag ("--nodes"), what follows "--", or a positional one by its metavar ("JOB").
        if str(err.field).startswith("-") or str(err.field).isupper():
            return f"invalid argument: {_one_line(str(err))}", EXIT_USAGE
        return f"configuration error: {_one_line(str(err))} (fix the config file or the -c override)", EXIT_USAGE
    line = _explain_botocore(err)
    if line is None:
        line = _explain_kubernetes(err)
    return (line, EXIT_USAGE) if line is not None else None


def _explain_botocore(err: BaseException) -> str | None:
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - boto3 is a dependency
        return None
    if isinstance(err, bx.NoCredentialsError | bx.PartialCredentialsError | bx.CredentialRetrievalError):
        return f"no usable AWS credentials ({_one_line(err)}): {CREDENTIALS_HINT}"
    if isinstance(err, bx.TokenRetrievalError | bx.SSOTokenLoadError | bx.UnauthorizedSSOTokenError):
        return f"the AWS SSO session has expired ({_one_line(err)}): run `aws sso login` and try again"
    if isinstance(err, bx.ProfileNotFound):
        return f"{_one_line(err)}: set AWS_PROFILE to a profile of ~/.aws/config (`aws configure list-profiles`)"
    if isinstance(err, bx.NoRegionError):
        return "no AWS region: pass --region, use -c region=R, or set AWS_DEFAULT_REGION"
    if isinstance(err, bx.EndpointConnectionError | bx.ConnectTimeoutError | bx.ProxyConnectionError):
        return (
            f"cannot reach AWS ({_one_line(err)}): check the network, proxy settings (HTTPS_PROXY) "
            "and that the region name is right"
        )
    if isinstance(err, bx.ReadTimeoutError):
        return f"AWS did not answer in time ({_one_line(err)}): try again in a minute"
    if isinstance(err, bx.ClientError):
        code = error_code(err)
        operation = getattr(err, "operation_name", "") or "the AWS call"
        message = _one_line(error_message(err))
        if code in DENIED_CODES:
            return (
                f"access denied to {operation} ({code}: {message}): use credentials whose IAM policy allows "
                "it, or switch AWS_PROFILE"
            )
        if code in BAD_CREDENTIAL_CODES:
            return f"the AWS credentials were rejected by {operation} ({code}): {CREDENTIALS_HINT}"
        if code in THROTTLING_CODES:
            return (
                f"AWS throttled {operation} ({code}) after retries: wait a minute and run again, or set "
                "AWS_RETRY_MODE=adaptive and AWS_MAX_ATTEMPTS=10"
            )
        return f"{operation} failed ({code or 'error'}: {message})"
    if isinstance(err, bx.BotoCoreError):
        return f"AWS SDK error: {_one_line(err)}"
    return None


def _explain_kubernetes(err: BaseException) -> str | None:
    module = type(err).__module__
    if not (module.startswith("kubernetes") or module.startswith("urllib3")):
        return None
    name = type(err).__name__
    if name == "ConfigException":
        return (
            f"no usable kubeconfig ({_one_line(err)}): run `trn connect` (it writes one; private endpoint "
            "included), or pass --kubeconfig/--context"
        )
    if name == "ApiException":
        status = getattr(err, "status", None)
        reason = _one_line(getattr(err, "reason", "") or "")
        if status in (401, 403):
            return (
                f"the Kubernetes API refused the request ({status} {reason}): check that your IAM identity has "
                "an EKS access entry (eks.admin_role_arns) and that the kubeconfig context is the cluster's"
            )
        return f"Kubernetes API error {status} {reason}: {_kube_message(err)}"
    if name in ("MaxRetryError", "NewConnectionError", "ConnectTimeoutError", "ProtocolError"):
        return (
            f"cannot reach the Kubernetes API server ({_one_line(err)}): run `trn connect` (a private endpoint "
            "is reached through the stack's access host; the forwarding ends with the session), or check the "
            "kubeconfig context"
        )
    return None


def _kube_message(err: BaseException) -> str:
    import json

    body = getattr(err, "body", None)
    try:
        return _one_line(json.loads(body or "").get("message", body))
    except (TypeError, ValueError, AttributeError):
        return _one_line(body or err)
