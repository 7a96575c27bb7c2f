"""A shell script on one instance through SSM Run Command (document AWS-RunShellScript), and its output.

`trn` reaches the Slurm head node and the development instance this way: no inbound port, no SSH key, the
same IAM and audit trail as Session Manager. The script runs as root; the callers wrap what runs as a user.
Run Command keeps at most 24,000 characters of a command's output (GetCommandInvocation): callers read
logs in chunks below that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainium_cdk.cli._common import CliError, error_code
from trainium_cdk.cli.jobs import CLOCK, POLL_FACTOR, POLL_MAX_S, Clock

DOCUMENT = "AWS-RunShellScript"
# Seconds the command may run on the instance (the document's executionTimeout parameter).
EXECUTION_TIMEOUT_S = 300
# How long `trn` waits for a command to finish before it gives up (the instance may be busy or offline).
WAIT_S = 600.0
POLL_S = 1.0
DONE = ("Success", "Failed", "Cancelled", "TimedOut", "Undeliverable", "Terminated", "InvalidPlatform", "AccessDenied")
# Run Command's cap on StandardOutputContent, and what it appends to a cut output.
OUTPUT_LIMIT = 24_000
TRUNCATED = "--output truncated--"
COMMENT_LIMIT = 100


@dataclass(frozen=True)
class Invocation:
    status: str
    code: int
    stdout: str
    stderr: str


def send_request(instance_id: str, script: str, *, comment: str) -> dict[str, Any]:
    """The SendCommand request for ``script`` on ``instance_id``."""
    return {
        "InstanceIds": [instance_id],
        "DocumentName": DOCUMENT,
        "Comment": comment[:COMMENT_LIMIT],
        "Parameters": {"commands": script.splitlines(), "executionTimeout": [str(EXECUTION_TIMEOUT_S)]},
    }


def run(ssm: Any, instance_id: str, script: str, *, comment: str, what: str, clock: Clock = CLOCK) -> Invocation:
    """Send ``script`` and wait for its end; ``what`` names the instance in errors (``head node i-...``)."""
    from botocore.exceptions import ClientError

    try:
        command = ssm.send_command(**send_request(instance_id, script, comment=comment))["Command"]
    except ClientError as error:
        if error_code(error) in ("InvalidInstanceId", "InvalidInstanceInformationFilterValue"):
            raise CliError(
                f"{what} is not reachable with SSM Run Command: is it running, with its SSM agent online "
                f"(`aws ssm describe-instance-information --filters Key=InstanceIds,Values={instance_id}`)?"
            ) from None
        raise
    command_id = command["CommandId"]
    waited, delay = 0.0, POLL_S
    while True:
        clock.sleep(delay)
        waited += delay
        try:
            answer = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        except ClientError as error:
            if error_code(error) != "InvocationDoesNotExist":
                raise
            answer = {"Status": "Pending"}
        status = str(answer.get("Status", "Pending"))
        if status in DONE:
            return Invocation(
                status, int(answer.get("ResponseCode", -1)), str(answer.get("StandardOutputContent", "")),
                str(answer.get("StandardErrorContent", "")),
            )
        if waited >= WAIT_S:
            raise CliError(
                f"the command on {what} is still {status} after {waited:.0f}s (command {command_id}): "
                f"`aws ssm list-command-invocations --command-id {command_id} --details` shows where it is",
                code=1,
            )
        delay = min(POLL_MAX_S / 3, delay * POLL_FACTOR)


def checked(invocation: Invocation, *, what: str, doing: str) -> str:
    """The output of a command that must succeed; else one line with what the instance said."""
    if invocation.status != "Success" or invocation.code != 0:
        said = (invocation.stderr or invocation.stdout).strip().splitlines()
        last = said[-1] if said else "no output"
        raise CliError(f"{doing} on {what} failed ({invocation.status}, exit {invocation.code}): {last}", code=1)
    return invocation.stdout


# -- a job's output file on an instance, read through Run Command ------------------------------------

# A chunk of a log per Run Command, below its output cap with room for the header line.
LOG_CHUNK = OUTPUT_LIMIT - 8_000


def parse_chunk(said: str) -> tuple[str, int, str]:
    """(file, its size, the chunk) of a log script's output: a header line ``file=... size=...``, then the
    bytes read (size -1: no file yet)."""
    header, _, chunk = said.partition("\n")
    fields = dict(part.split("=", 1) for part in header.split() if "=" in part)
    return fields.get("file", ""), int(fields.get("size", "-1") or -1), chunk


class LineFilter:
    """The lines a reader wants: all, or one node's (srun --label prefixes each line with ``<rank>: ``)."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix
        self.partial = ""

    def feed(self, chunk: str, *, final: bool = False) -> str:
        if self.prefix is None:
            return chunk
        text = self.partial + chunk
        lines = text.split("\n")
        self.partial = "" if final else lines.pop()
        return "".join(f"{ln[len(self.prefix):]}\n" for ln in lines if ln.startswith(self.prefix))


def print_log(
    read: Any, ended: Any, *, follow: bool, lines: LineFilter, what: str, out: Any, err: Any, clock: Clock = CLOCK,
) -> int:
    """Print a job's log file: its last chunk, or with ``follow`` all of it until ``ended()`` names the job's
    final state (SUCCEEDED or FAILED; None while it runs). ``read(offset, size)`` returns :func:`parse_chunk`'s
    triple (a negative offset: the last ``size`` bytes)."""
    from trainium_cdk.cli.jobs import FAILED, POLL_FIRST_S

    if not follow:
        path, size, chunk = read(-1, LOG_CHUNK)
        if size < 0:
            raise CliError(f"{what} has no output yet: `--follow` waits for it", code=1)
        if size > LOG_CHUNK:
            chunk = chunk.split("\n", 1)[1] if "\n" in chunk else ""  # from the first whole line
            err.write(f"(the last {LOG_CHUNK} bytes of {path}; --follow streams it all)\n")
        out.write(lines.feed(chunk, final=True))
        return 0
    offset, delay, announced = 0, POLL_FIRST_S, False
    final: str | None = None
    while True:
        _, size, chunk = read(offset, LOG_CHUNK)
        if chunk:
            offset += len(chunk.encode())
            out.write(lines.feed(chunk))
            out.flush()
            delay = POLL_FIRST_S
            continue
        if size < 0 and not announced:
            err.write(f"waiting for {what} to start...\n")
            announced = True
        if final:
            out.write(lines.feed("", final=True))
            err.write(f"{what} {final}\n")
            return 1 if final == FAILED else 0
        final = ended()  # once it has ended, read the file once more: the last lines may land after
        if final:
            continue
        clock.sleep(delay)
        delay = min(POLL_MAX_S, delay * POLL_FACTOR)
