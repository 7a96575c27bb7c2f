"""A Slurm job as `trn` submits it: the sbatch command on the head node, and the scripts `trn` runs there.

Pure Python: `trn submit --backend parallelcluster` sends :meth:`SlurmSubmission.head_node_script` through SSM
Run Command, `--dry-run` prints it, and `trn rehearse` runs the same batch script with the same arguments
and environment (:meth:`SlurmSubmission.sbatch_environment`). Every script runs as the cluster's OS user in a
login shell (Slurm's commands are on its PATH there), from its home directory, where the batch scripts are
(``~/trainium``) and where sbatch writes each job's output file.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from trainium_cdk.app.parallelcluster.sbatch import EXIT_RECORD_SUFFIX, JOB_ENV_VARIABLE
from trainium_cdk.node import heredoc_end
from trainium_cdk.parallelcluster.configuration import OS_USER

# The folder of the batch scripts in the OS user's home (cluster_config.SCRIPTS_PREFIX on the head node).
SCRIPTS_DIR = "trainium"
# Ends the heredoc that carries a script to the OS user's shell (another word when a user's word, quoted but
# holding newlines, has a line of that word: node.heredoc_end).
_END = "TRAINIUM_SLURM"
# What `sbatch --parsable` prints: the job id, then ";cluster" on a multi-cluster setup.
PARSABLE_SEPARATOR = ";"


def as_os_user(body: str) -> str:
    """A Run Command script (run as root) that runs ``body`` in a login shell of the cluster's OS user."""
    end = heredoc_end(_END, body)
    return f"sudo -iu {OS_USER} bash -s <<'{end}'\nset -euo pipefail\n{body.rstrip()}\n{end}\n"


def _word(word: str) -> str:
    """One shell word: ``~/x`` is the OS user's home on the head node (not the workstation's), the rest quoted."""
    if word.startswith("~/"):
        return '"$HOME"/' + shlex.quote(word[2:])
    return shlex.quote(word)


@dataclass(frozen=True)
class SlurmSubmission:
    """``sbatch`` of a group's batch script: ``nodes`` nodes, the user's command and environment, and the Slurm
    account of its team (a cluster with teams: `trn submit --team`), whose fair share it runs in."""

    script: str  # the batch script's file name in ~/trainium
    name: str
    nodes: int
    program: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    account: str | None = None

    def sbatch_environment(self) -> dict[str, str]:
        """What sbatch must find in the submitter's environment: the job's own variables, as lines."""
        if not self.env:
            return {}
        return {JOB_ENV_VARIABLE: "\n".join(f"{k}={v}" for k, v in self.env.items())}

    def sbatch_argv(self) -> list[str]:
        account = [f"--account={self.account}"] if self.account else []
        return ["sbatch", "--parsable", f"--nodes={self.nodes}", f"--job-name={self.name}", *account,
                f"~/{SCRIPTS_DIR}/{self.script}", *self.program]

    def head_node_script(self) -> str:
        exports = [f"export {k}={shlex.quote(v)}" for k, v in self.sbatch_environment().items()]
        return as_os_user("\n".join(["cd ~", *exports, " ".join(_word(w) for w in self.sbatch_argv())]))


def _first(pattern: str) -> list[str]:
    """Lines setting ``f`` to the first file of the home directory matching ``pattern`` (empty: none)."""
    return ['f=""', f'for candidate in ~/{pattern}; do if [[ -e "$candidate" ]]; then f="$candidate"; break; fi; done']


def status_script(job_id: str) -> str:
    """The job as Slurm knows it (one line of key=value), and its exit record once it has ended."""
    job = shlex.quote(job_id)
    return as_os_user("\n".join([
        f"scontrol show job -o {job} 2>/dev/null || echo 'scontrol: unknown job'",
        *_first(f"*-{job}{EXIT_RECORD_SUFFIX}"),
        'if [[ -n "$f" ]]; then echo "exit=$(cat "$f")"; fi',
    ]))


def log_script(job_id: str, *, offset: int, size: int) -> str:
    """``size`` bytes of the job's output file from ``offset`` (a negative offset: the last ``size`` bytes),
    after a line naming the file and its length."""
    read = (f'tail -c {int(size)} "$f"' if offset < 0 else f'tail -c +{int(offset) + 1} "$f" | head -c {int(size)}')
    return as_os_user("\n".join([
        *_first(f"*-{shlex.quote(job_id)}.out"),
        'if [[ -z "$f" ]]; then echo "file= size=-1"; exit 0; fi',
        'echo "file=$f size=$(stat -c %s "$f")"',
        read,
    ]))


def cancel_script(job_id: str) -> str:
    return as_os_user(f"scancel {shlex.quote(job_id)}")


# squeue's fields for `trn jobs`: id, name, state, nodes, submit time (one job per line, '|' between).
SQUEUE_FORMAT = "%i|%j|%T|%D|%V"


def jobs_script(partition: str, *, limit: int) -> str:
    """The partition's queued and running jobs (squeue), then the newest ended ones (their exit records)."""
    return as_os_user("\n".join([
        f"squeue -h -p {shlex.quote(partition)} -o {shlex.quote(SQUEUE_FORMAT)} || true",
        "echo '--- ended'",
        f"{{ ls -1t ~/*{EXIT_RECORD_SUFFIX} 2>/dev/null || true; }} | head -n {int(limit)} | while read -r f; do "
        'echo "$(basename "$f")|$(cat "$f")|$(date -u -r "$f" +%Y-%m-%dT%H:%M:%S)"; done',
    ]))


# sacct's fields for `trn usage` (one job allocation a line, '|' between): what it prices, in this order.
SACCT_FIELDS = ("JobID", "JobName", "Account", "Partition", "State", "NNodes", "ElapsedRaw", "Start")


def usage_script(since: str) -> str:
    """Every user's jobs (their allocations, not their steps) from ``since`` (``YYYY-MM-DDTHH:MM:SS``, UTC) until now,
    from Slurm's accounting."""
    return as_os_user(
        f"TZ=UTC sacct --allusers --allocations --noheader --parsable2 --starttime {shlex.quote(since)} "
        f"--endtime now --format {','.join(SACCT_FIELDS)}"
    )
