"""`trn doctor`'s answer to an API error a check did not expect: that check's line, never the end of the run.

ListServiceQuotas answering HTTP 500 used to end `trn doctor` with one line on stderr, and the checks after
it never printed. Now the check that made the call becomes a FAIL (a WARN where the check is advisory)
naming the API, the error code and what to do, and the others run.
"""

from __future__ import annotations

from trainium_cdk.cli._common import BAD_CREDENTIAL_CODES, THROTTLING_CODES, error_code, is_denied
from trainium_cdk.cli._errors import CREDENTIALS_HINT, explain
from trainium_cdk.cli.doctor_local import FAIL, WARN, Check

# Error codes of a failure on AWS's side, besides any HTTP 5xx answer.
SERVER_CODES = frozenset({
    "InternalError", "InternalFailure", "InternalServerError", "InternalServerException", "ServiceUnavailable",
    "ServiceUnavailableException", "ServiceException", "Unavailable",
})
AGAIN = "run `trn doctor` again"


def is_api_error(error: BaseException) -> bool:
    """An error of an AWS call (an answer, or none: network, timeout; or an answer that is not AWS's, such as a
    proxy's HTML page, which botocore cannot parse), which a check turns into its line."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    return isinstance(error, ClientError | BotoCoreError | ResponseParserError)


def unexpected(name: str, action: str, error: BaseException, *, advisory: bool = False) -> Check:
    """The line of check ``name`` whose call (IAM ``action``) failed with ``error``."""
    from botocore.exceptions import ClientError

    code = error_code(error) or type(error).__name__
    operation = getattr(error, "operation_name", "") or action
    if is_denied(error):  # doctor should work with read-only permissions: say which one is missing
        return Check(WARN, name, f"could not check: {operation} was denied ({code})",
                     f"allow {action} (read-only) for this identity, or ask an administrator to run `trn doctor`")
    explained = explain(error)
    detail = f"could not check: {explained[0] if explained else f'{operation} failed ({code})'}"
    status = (getattr(error, "response", None) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code in THROTTLING_CODES:
        fix = f"AWS throttled {operation} after retries: {AGAIN} in a minute"
    elif code in SERVER_CODES or (isinstance(status, int) and status >= 500):
        fix = (f"{operation} failed on AWS's side (HTTP {status or '5xx'}): {AGAIN} in a few minutes; if it persists, "
               "look for an event of the service in the AWS Health Dashboard")
    elif code in BAD_CREDENTIAL_CODES:
        fix = CREDENTIALS_HINT
    elif not isinstance(error, ClientError):
        fix = f"check the network and proxy settings (HTTPS_PROXY) to AWS, then {AGAIN}"
    else:
        fix = (f"check that {action} works for this identity and region with the AWS CLI, then {AGAIN}; "
               "if it does, report this line")
    return Check(WARN if advisory else FAIL, name, detail, fix)
