"""Run the README's shell commands as a user types them, against what can exist here.

A :class:`Walkthrough` is one README session (tests/support/readme.py): a sandbox that looks like a fresh clone,
one bash for the workstation (and one per remote host the session opens), an AWS account (moto's server
on loopback), and, once the session reaches the cluster, a Kubernetes API server on loopback that runs
the jobs it receives (tests/support/fake_kube.py). Each command runs exactly as the README prints it; a command
that exits non-zero fails the session, unless tests/support/readme_exemptions.py lists it, in which case its
substitute runs instead. Every substitution the harness makes is in that module, and nowhere else.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import paths
from tests.support import readme_exemptions as exemptions
from tests.support.readme import Block, Command

ROOT = paths.ROOT
# Left as links to the checkout: installed environments, not the project's files.
LINKED = (".venv", "node_modules", ".venv-pcluster", ".venv-checkov")
COMMAND_TIMEOUT_S = 900
ACCOUNT = "123456789012"
REGION = "us-west-2"
# An old, fixed time for every file of the sandbox: make's stamps in the linked .venv and node_modules
# are newer, so `make` installs nothing (as after a clone whose environments are already set up).
SANDBOX_MTIME = 1_600_000_000


def free_port() -> int:
    from trainium_cdk.rehearsal.stage import free_port as below_ephemeral  # its comment says why

    return below_ephemeral()


def make_sandbox(into: Path) -> Path:
    """A copy of the working tree as a fresh clone has it: tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    root = into / "trainium-cdk"
    for name in filter(None, listed):
        source = ROOT / name
        if name.split("/", 1)[0] in LINKED or not source.exists() or source.is_dir():
            continue
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copyfile(source, target)
            shutil.copymode(source, target)
            os.utime(target, (SANDBOX_MTIME, SANDBOX_MTIME))
    for name in LINKED:
        if name == "node_modules" and (ROOT / name).is_dir():
            # A folder of links with a stamp of its own: were `npm ci` to run in the sandbox, it would empty
            # this folder, not the checkout's node_modules.
            (root / name).mkdir()
            for entry in (ROOT / name).iterdir():
                if entry.name != ".installed":
                    (root / name / entry.name).symlink_to(entry)
            (root / name / ".installed").touch()
        elif (ROOT / name).exists():
            (root / name).symlink_to(ROOT / name)
    return root


class Shell:
    """One bash, fed one command at a time; its state (variables, functions, cwd) carries over."""

    def __init__(self, *, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True,
        )
        code, out = self.run("set -o pipefail")
        assert code == 0, out

    def run(self, text: str, timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str]:
        token = uuid.uuid4().hex
        encoded = base64.b64encode(text.encode()).decode()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # stdin of the command is /dev/null (a command that waits for input would wait forever here).
        self.proc.stdin.write(
            f'eval "$(printf %s {encoded} | base64 -d)" </dev/null; printf "\\n{token} %s\\n" "$?"\n'.encode()
        )
        self.proc.stdin.flush()
        output = b""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        marker = f"\n{token} ".encode()
        while marker not in output:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                return 124, output.decode(errors="replace") + f"\n[harness: no end after {timeout:.0f} s]"
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                output += chunk
        head, _, tail = output.partition(marker)
        code = int(tail.split(b"\n", 1)[0] or b"1")
        return code, head.decode(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()


@dataclass
class Ran:
    command: Command
    host: str
    code: int
    output: str
    exempt: str | None = None  # the substitute's name when the command is exempt


@dataclass
class Walkthrough:
    """One README session, run command by command."""

    name: str
    tmp: Path
    ran: list[Ran] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sandbox = make_sandbox(self.tmp)
        self.home = self.tmp / "home"
        self.home.mkdir()
        self.bin = self.tmp / "bin"  # the workstation's tools: the AWS CLI, envsubst, the kubectl stand-in
        self.bin.mkdir()
        self.stacks: dict[str, Any] = {}
        self.shells: dict[str, Shell] = {}
        self.hosts: dict[str, dict[str, str]] = {}  # host -> what opened it (for the on: blocks)
        self._moto: subprocess.Popen | None = None
        self.moto_port = 0
        self.cluster = None  # tests.support.fake_kube.FakeCluster, once the session reaches the cluster
        self.sessions_log: Path | None = None  # the Session Manager requests moto received (JSON lines)
        self.batch_jobs_seen: set[str] = set()
        self.rehearsals: list[dict[str, Any]] = []
        self.account: Any = None  # tests.support.deployed.Account, once `make deploy` ran
        self.outputs: dict[str, dict[str, str]] = {}  # stack -> its outputs, as each deploy left them
        self.destroyed: list[list[str]] = []  # the stacks each `make destroy` deleted
        # host -> how a command typed there is rewritten (paths that stand for the host's own; exemptions)
        self.typed_on: dict[str, Any] = {}
        self.hosts_made: dict[str, Any] = {}  # host -> tests.support.ssm_host.Host (the head node, the dev instance)
        self.ssm_hosts = self.tmp / "ssm-hosts.json"
        self.batch_submits = self.tmp / "batch-submits.jsonl"
        self._stage: Any = None
        exemptions.install_tools(self)

    def stage(self) -> Any:
        """The machine every job of the walkthrough runs on (one /fsx for the whole walkthrough)."""
        from tests.support.rehearsal import Stage

        if self._stage is None:
            self._stage = Stage(self.tmp / "nodes")
        return self._stage

    # -- the AWS account -----------------------------------------------------------------------------

    @property
    def aws_env(self) -> dict[str, str]:
        return exemptions.aws_environment(self)

    def start_aws(self) -> None:
        if self._moto is not None:
            return
        from tests.support.fake_kube import FakeCluster

        self.cluster = FakeCluster(runner=lambda job: exemptions.rehearse_kubernetes_job(self, job),
                                   host_names=exemptions.API_SERVER_NAMES)
        api_port = self.cluster.start()
        ca_file = self.tmp / "cluster-ca.pem"
        ca_file.write_bytes(self.cluster.ca_pem)
        self.sessions_log = self.tmp / "ssm-sessions.jsonl"
        self.sessions_log.touch()
        exemptions.install_session_manager_plugin(self, api_port)
        self.moto_port = free_port()
        self.batch_submits.touch()  # every SubmitJob request, as sent (ssm_hosts: instance id -> host stand-in)
        self._moto = subprocess.Popen(
            [sys.executable, "-m", "tests.support.moto_server", str(self.moto_port), str(ca_file),
             f"https://{exemptions.PRIVATE_ENDPOINT_HOST}", str(self.sessions_log), str(self.ssm_hosts),
             str(self.batch_submits)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        assert self._moto.stdout is not None
        seen = []
        while not (line := self._moto.stdout.readline()).startswith("moto listening"):
            seen.append(line)
            assert line, "moto's server did not start:\n" + "".join(seen)

    def boto3(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service, region_name=REGION, endpoint_url=f"http://localhost:{self.moto_port}",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )

    # -- running ---------------------------------------------------------------------------------------

    def shell(self, host: str) -> Shell:
        if host not in self.shells:
            cwd, env = exemptions.host_environment(self, host)
            self.shells[host] = Shell(cwd=cwd, env=env)
        return self.shells[host]

    def run_blocks(self, blocks: list[Block]) -> Iterator[Ran]:
        self.start_aws()
        for block in blocks:
            host = block.host or "workstation"
            for command in block.commands:
                ran = self.run_command(command, host)
                yield ran

    def run_command(self, command: Command, host: str) -> Ran:
        exemption = exemptions.exemption_for(command.text)
        if exemption is not None:
            output = exemption.substitute(self, command)
            ran = Ran(command, host, 0, output, exempt=exemption.substitute.__name__)
        else:
            shell = self.shell(host)
            code, output = shell.run(self.typed_on.get(host, lambda text: text)(command.text))
            ran = Ran(command, host, code, output)
        self.ran.append(ran)
        if ran.code == 0:
            exemptions.after_command(self, ran)
        return ran

    def sessions(self) -> list[dict[str, Any]]:
        """The StartSession and TerminateSession requests the account received, in order."""
        if self.sessions_log is None:
            return []
        return [json.loads(line) for line in self.sessions_log.read_text().splitlines()]

    def job_logs(self, limit: int = 4000) -> str:
        """The tail of every job log the session's instance stand-ins hold (a unit's output goes to its log, not to
        the Run Command that started it): what a failed command's message adds."""
        logs = sorted(self.tmp.glob("**/.trainium/jobs/*/output.log"))
        return "".join(f"--- {log.relative_to(self.tmp)}:\n{log.read_text(errors='replace')[-limit:]}\n" for log in logs)

    def close(self) -> None:
        exemptions.stop_background(self)
        for shell in self.shells.values():
            shell.close()
        if self.cluster is not None:
            self.cluster.stop()
        if self._moto is not None:
            with contextlib.suppress(Exception):
                assert self._moto.stdin is not None
                self._moto.stdin.close()
            self._moto.terminate()
            self._moto.wait(timeout=30)


def stable_id(*parts: str, length: int = 17) -> str:
    """A deterministic hex id (physical ids of what a deploy would create)."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def outputs_of(walk: Walkthrough, stack: str) -> dict[str, str]:
    answer = walk.boto3("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in answer.get("Outputs", [])}


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())



