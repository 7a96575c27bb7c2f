"""An instance that SSM Run Command reaches, on this machine: the scripts `trn` sends run in ``sh`` as root would run
them there, under stand-ins for what only the instance has (the edge of what is real here).

==============================  ==========================================================================
on the instance                 here
==============================  ==========================================================================
Run Command (AWS-RunShellScript)  :func:`serve_run_command`: SendCommand runs its ``commands`` on the host,
                                GetCommandInvocation returns the output, capped as Run Command caps it
``sudo -iu USER CMD``            CMD in USER's home (a folder of the host), HOME and USER set
``id -un 1000``, ``getent``      the AMI's default user and its home
``install -d -o U``, ``chown``   folders made, owners not changed (one user here)
``systemd-run``, ``systemctl``   the rehearsal's systemd-run (the unit's command in the foreground, recorded);
                                ``systemctl show/stop`` answer from that record and the job's exit record
Slurm's commands                tests/support/slurm_standin.py; :func:`tests.support.slurm_standin.run_spooled` runs the jobs
/fsx, NeuronCores, ports, hosts  the launch rehearsal's stage (trainium_cdk.rehearsal), substituted in the script
==============================  ==========================================================================
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import paths
from tests.support.rehearsal import Stage

ROOT = paths.ROOT
OUTPUT_LIMIT = 24_000  # Run Command's cap on StandardOutputContent
ERROR_LIMIT = 8_000
TRUNCATED = "--output truncated--"

_SUDO = """#!/bin/sh
# sudo stand-in: `sudo -iu USER CMD...` runs CMD in USER's home with HOME and USER set (a login shell's start).
[ "$1" = -iu ] || { echo "sudo stand-in: only -iu USER CMD, not $*" >&2; exit 2; }
user="$2"; shift 2
export HOME="{homes}/$user" USER="$user"
cd "$HOME" || exit 1
exec "$@"
"""
_ID = """#!/bin/sh
# id stand-in: `id -un 1000` is the AMI's default user.
[ "$*" = "-un 1000" ] && { echo {user}; exit 0; }
exec /usr/bin/id "$@"
"""
_GETENT = """#!/bin/sh
[ "$1" = passwd ] && [ "$2" = {user} ] && { echo "{user}:x:1000:1000::{homes}/{user}:/bin/bash"; exit 0; }
exit 2
"""
_INSTALL = """#!/bin/sh
# install stand-in: `install -d [-o U] [-m M] DIR...` makes the folders (one user here: owners unchanged).
mode=""
[ "$1" = -d ] || { echo "install stand-in: only -d" >&2; exit 2; }
shift
while [ $# -gt 0 ]; do
  case "$1" in
    -o) shift 2 ;;
    -m) mode="$2"; shift 2 ;;
    *) mkdir -p "$1"; [ -z "$mode" ] || chmod "$mode" "$1"; shift ;;
  esac
done
"""
_CHOWN = "#!/bin/sh\n# chown stand-in: one user here.\nexit 0\n"
_SYSTEMCTL = f"""#!{sys.executable}
# systemctl stand-in: `show UNIT -p ActiveState --value` from the systemd-run record and the job's exit record;
# `stop UNIT` records the stop.
import json, os, pathlib, sys
args = sys.argv[1:]
log = pathlib.Path(os.environ["REHEARSAL_LOG"] + ".units")
units = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
stopped = pathlib.Path(os.environ["REHEARSAL_LOG"] + ".stopped")
if args[0] == "stop":
    with stopped.open("a") as f:
        f.write(args[1] + "\\n")
    sys.exit(0)
assert args[0] == "show" and args[2:] == ["-p", "ActiveState", "--value"], args
unit = args[1]
ran = [u for u in units if u.get("unit") == unit]
if not ran or (stopped.exists() and unit in stopped.read_text().split()):
    print("inactive")
    sys.exit(0)
record = pathlib.Path(ran[-1]["argv"][-1]).parent / "exit"
print("active" if record.exists() and record.read_text().strip() == "0" else "failed" if record.exists() else "active")
"""


@dataclass
class Host:
    """One instance: a root folder with the user's home, the stand-ins, a Slurm spool, and the stage jobs run on."""

    root: Path
    stage: Stage
    user: str = "ubuntu"
    ran: list[str] = field(default_factory=list)  # every script it was sent, as sent

    def __post_init__(self) -> None:
        self.homes = self.root / "home"
        self.home = self.homes / self.user
        self.home.mkdir(parents=True, exist_ok=True)
        self.bin = self.root / "bin"
        self.bin.mkdir(exist_ok=True)
        self.spool = self.root / "spool"
        self.spool.mkdir(exist_ok=True)
        values = {"homes": str(self.homes), "user": self.user}
        for name, text in (("sudo", _SUDO), ("id", _ID), ("getent", _GETENT), ("install", _INSTALL),
                           ("chown", _CHOWN), ("systemctl", _SYSTEMCTL)):
            path = self.bin / name
            path.write_text(text.replace("{homes}", values["homes"]).replace("{user}", values["user"]))
            path.chmod(0o755)
        for tool in ("sbatch", "squeue", "sinfo", "scontrol", "scancel"):
            path = self.bin / tool
            path.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m tests.support.slurm_standin {tool} "$@"\n')
            path.chmod(0o755)

    @property
    def environment(self) -> dict[str, str]:
        env = self.stage.environment({})
        env.update({
            "PATH": f"{self.bin}:{env['PATH']}", "HOME": str(self.root), "USER": "root",
            "HARNESS_SLURM_SPOOL": str(self.spool), "REHEARSAL_LOG": str(self.root / "systemd"),
        })
        return env

    def run(self, script: str) -> tuple[int, str, str]:
        self.ran.append(script)
        done = subprocess.run(["sh", "-c", self.stage.substitute_script(script)], env=self.environment, cwd=self.root,
                              capture_output=True, text=True, timeout=600, check=False)
        return done.returncode, done.stdout, done.stderr

    def run_slurm_jobs(self) -> list[dict[str, Any]]:
        from tests.support.slurm_standin import run_spooled

        return run_spooled(self.spool, self.stage)


def _capped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def serve_run_command(aws: Any, hosts: dict[str, Host]) -> dict[str, dict[str, Any]]:
    """SendCommand and GetCommandInvocation, answered by running each command on its host (tests.support.cli_support's
    AwsCalls records the requests, which the tests assert in full). Returns the invocations by command id."""
    from tests.support.cli_support import client_error

    invocations: dict[str, dict[str, Any]] = {}

    def send(params: dict[str, Any]) -> Any:
        assert params["DocumentName"] == "AWS-RunShellScript", params
        (instance,) = params["InstanceIds"]
        if instance not in hosts:
            return client_error("InvalidInstanceId", "SendCommand", f"Instances [[{instance}]] not in a valid state")
        code, out, err = hosts[instance].run("\n".join(params["Parameters"]["commands"]))
        command_id = str(uuid.uuid4())
        invocations[command_id] = {
            "CommandId": command_id, "InstanceId": instance, "DocumentName": params["DocumentName"],
            "Status": "Success" if code == 0 else "Failed", "ResponseCode": code,
            "StandardOutputContent": _capped(out, OUTPUT_LIMIT), "StandardErrorContent": _capped(err, ERROR_LIMIT),
        }
        return {"Command": {"CommandId": command_id, "DocumentName": params["DocumentName"],
                            "InstanceIds": [instance], "Status": "Pending"}}

    def invocation(params: dict[str, Any]) -> Any:
        found = invocations.get(params["CommandId"])
        if found is None or found["InstanceId"] != params["InstanceId"]:
            return client_error("InvocationDoesNotExist", "GetCommandInvocation")
        return found

    aws.fake("SendCommand", send)
    aws.fake("GetCommandInvocation", invocation)
    return invocations


def run_command_requests(aws: Any) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(p)) for p in aws.of("SendCommand")]


def host_from(spec: dict[str, str]) -> Host:
    """A host from its JSON description (the README walkthroughs' moto server runs commands in a process of its own)."""
    return Host(Path(spec["root"]), Stage(Path(spec["stage"]), fsx=Path(spec["fsx"])), user=spec["user"])


def describe(host: Host) -> dict[str, str]:
    return {"root": str(host.root), "stage": str(host.stage.root), "fsx": str(host.stage.fsx), "user": host.user}


if __name__ == "__main__":  # python -m tests.support.ssm_host HOST_JSON < script: run it there, print {code, out, err}
    code, out, err = host_from(json.loads(sys.argv[1])).run(sys.stdin.read())
    print(json.dumps({"code": code, "out": out, "err": err}))
