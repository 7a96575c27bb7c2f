"""A job on the development instance as `trn` runs it: a transient systemd unit, started through SSM Run Command.

Pure Python. ``trn submit --backend instance`` sends :meth:`InstanceSubmission.start_script` (run as root by
Run Command): it writes the launcher and a run script into ``~/.trainium/jobs/<name>/`` of the instance's
default user (uid 1000: ``ubuntu`` on the Ubuntu DLAMI, ``ec2-user`` on Amazon Linux) and starts
``systemd-run --unit trn-<name> --uid <user>`` on it, so the job outlives the command and the session.
The run script puts the DLAMI's PyTorch venv on PATH, runs the launcher (one node, every NeuronCore) with the
job's environment, writes its output to ``output.log`` and its exit code to ``exit``, which `trn status`,
`trn logs` and `trn jobs` read. ``trn rehearse --backend instance`` runs the same run script here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainium_cdk.node import heredoc_end
from trainium_cdk.runtime.launcher import JOB_VENV, LAUNCHER
from trainium_cdk.runtime.training_env import cache_dir, job_environment

if TYPE_CHECKING:
    from trainium_cdk.app.config import Config

UNIT_PREFIX = "trn-"
JOBS_DIR = ".trainium/jobs"
RUN_SCRIPT = "run.sh"
LAUNCH_SCRIPT = "launch.sh"
OUTPUT_LOG = "output.log"
EXIT_RECORD = "exit"
# The compile cache of development jobs (one instance runs one job at a time).
CACHE_SET = "instance"
# Where the instance's first boot puts the MLP example (constructs/dev_instance.py), the default command.
EXAMPLE_SCRIPT = "/opt/trainium-cdk/examples/mlp/train.py"
# The Neuron DLAMI's PyTorch venvs (/opt/aws_neuronx_venv_pytorch_<version>...): the first, unless TRN_VENV names one.
VENV_GLOB = "/opt/aws_neuronx_venv_pytorch*"
VENV_VARIABLE = "TRN_VENV"
_USER = [
    "user=$(id -un 1000)  # the AMI's default user: ubuntu on the Ubuntu DLAMI, ec2-user on Amazon Linux",
    'home=$(getent passwd "$user" | cut -d: -f6)',
]


def _job_dir(name: str) -> list[str]:
    return [*_USER, f'job="$home/{JOBS_DIR}/{name}"']


def job_environment_of(config: Config, name: str) -> dict[str, str]:
    """The environment every development job gets: one node, every NeuronCore of the instance type."""
    spec = config.catalog.get(config.instance.instance_type, field="instance.instance_type")
    shared = config.storage.enabled
    env = job_environment(
        spec, processes=spec.neuron_cores, cache_dir=cache_dir(CACHE_SET, shared=shared), multi_node=False,
        container=False, shared_storage=shared, track=config.neuron_track, node_metrics=True,
    )
    env["TRN_JOB_NAME"] = name  # the checkpoint directory's name (the launcher's TRN_CHECKPOINT_DIR)
    return env


@dataclass(frozen=True)
class InstanceSubmission:
    name: str
    program: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return f"{UNIT_PREFIX}{self.name}"

    def run_script(self) -> str:
        """The unit's program: the job's environment, the venv, the launcher; output and exit code recorded."""
        exports = [f"export {k}={shlex.quote(v)}" for k, v in self.env.items()]
        return "\n".join([
            "#!/bin/bash",
            f"# trn submit {self.name}: the launcher on this instance's NeuronCores; output in {OUTPUT_LOG}, "
            f"exit code in {EXIT_RECORD}.",
            'dir="$(cd "$(dirname "$0")" && pwd)"',
            *exports,
            f'venv="${{{VENV_VARIABLE}:-$(ls -d {VENV_GLOB} 2>/dev/null | head -n 1)}}"',
            'if [ -n "$venv" ]; then export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"; fi',
            JOB_VENV.rstrip("\n"),
            "code=0",
            f'job_venv > "$dir/{OUTPUT_LOG}" 2>&1 || code=$?',
            f'[ "$code" != 0 ] || /bin/sh "$dir/{LAUNCH_SCRIPT}" {shlex.join(self.program)} >> "$dir/{OUTPUT_LOG}" 2>&1 '
            "|| code=$?",
            f'echo "$code" > "$dir/{EXIT_RECORD}"',
            'exit "$code"',
        ]) + "\n"

    def start_script(self) -> str:
        """What Run Command runs as root: the job's folder, its scripts, and the unit."""
        run = self.run_script()
        run_end = heredoc_end("TRAINIUM_RUN", run)
        return "\n".join([
            "set -eu",
            *_job_dir(self.name),
            f'if [ -e "$job" ]; then echo "a job named {self.name} exists on this instance: pick another --name" >&2; exit 3; fi',
            f'install -d -o "$user" -m 0755 "$home/.trainium" "$home/{JOBS_DIR}"',
            'install -d -o "$user" -m 0700 "$job"',
            f"cat > \"$job/{LAUNCH_SCRIPT}\" <<'TRAINIUM_LAUNCHER'",
            LAUNCHER.rstrip("\n"),
            "TRAINIUM_LAUNCHER",
            f"cat > \"$job/{RUN_SCRIPT}\" <<'{run_end}'",
            run.rstrip("\n"),
            run_end,
            f'chown "$user" "$job/{LAUNCH_SCRIPT}" "$job/{RUN_SCRIPT}"',
            f'systemd-run --unit {self.unit} --uid "$user" --working-directory "$home" -p RemainAfterExit=yes '
            f'/bin/bash "$job/{RUN_SCRIPT}"',
        ]) + "\n"


def status_script(name: str) -> str:
    return "\n".join([
        "set -eu", *_job_dir(name),
        'if [ ! -d "$job" ]; then echo "job=missing"; exit 0; fi',
        f'echo "unit=$(systemctl show {UNIT_PREFIX}{name} -p ActiveState --value 2>/dev/null || true)"',
        f'if [ -e "$job/{EXIT_RECORD}" ]; then echo "exit=$(cat "$job/{EXIT_RECORD}")"; fi',
        'echo "started=$(date -u -r "$job" +%Y-%m-%dT%H:%M:%S)"',
    ]) + "\n"


def log_script(name: str, *, offset: int, size: int) -> str:
    read = (f'tail -c {int(size)} "$f"' if offset < 0 else f'tail -c +{int(offset) + 1} "$f" | head -c {int(size)}')
    return "\n".join([
        "set -eu", *_job_dir(name), f'f="$job/{OUTPUT_LOG}"',
        'if [ ! -e "$f" ]; then echo "file= size=-1"; exit 0; fi',
        'echo "file=$f size=$(stat -c %s "$f")"', read,
    ]) + "\n"


def cancel_script(name: str) -> str:
    return "\n".join(["set -eu", f"systemctl stop {UNIT_PREFIX}{name}"]) + "\n"


def jobs_script(*, limit: int) -> str:
    """The newest jobs: name|unit state|exit code|started, one a line."""
    return "\n".join([
        "set -eu", *_USER,
        f'cd "$home/{JOBS_DIR}" 2>/dev/null || exit 0',
        f"for name in $(ls -1t | head -n {int(limit)}); do",
        f'  state=$(systemctl show "{UNIT_PREFIX}$name" -p ActiveState --value 2>/dev/null || true)',
        f'  code=$(cat "$name/{EXIT_RECORD}" 2>/dev/null || true)',
        '  echo "$name|$state|$code|$(date -u -r "$name" +%Y-%m-%dT%H:%M:%S)"',
        "done",
    ]) + "\n"
