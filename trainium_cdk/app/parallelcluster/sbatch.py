"""A Slurm batch script per compute group: the project's launcher on every node, under ``srun``.

The launcher (``trainium_cdk.runtime.launcher``) reads the node rank, the node count and the first host from
Slurm's variables, so ``sbatch -N 4`` runs on 4 nodes whatever the script's default. Usage on the head
node::

    sbatch ~/trainium/train-<group>.sbatch ~/trainium/mlp_train.py --your --args   # the MLP example
    sbatch -N 4 ~/trainium/train-<group>.sbatch /fsx/code/your_train.py
    sbatch -N 4 /home/trainium-cdk/trainium/train-<group>.sbatch /fsx/code/your_train.py   # any other user

``PRECOMPILE=1 sbatch ...`` first extracts the command's graphs with ``neuron_parallel_compile`` over
``TRN_PRECOMPILE_STEPS`` steps (no checkpoint directory) and compiles them into the group's cache on FSx
(``/fsx/neuron-cache/<group>``, as on every backend), then trains. Neuron's large-model settings and the
step cap are defaults: a variable given to sbatch (``MALLOC_ARENA_MAX=128 sbatch ...``; sbatch passes the
caller's environment on) keeps its value.

Each group with EFA also gets the fabric check (``trainium_cdk.runtime.fabric``) through the same launcher, one
process per node::

    sbatch -N 2 ~/trainium/fabric-<group>.sbatch
    trn check fabric --report fabric-<job id>.out
"""

from __future__ import annotations

import shlex
from pathlib import Path

from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.app.parallelcluster.cluster_config import EXAMPLE_SCRIPT_NAME, VENV, batch_script_name, queue_name
from trainium_cdk.facts.names import NEURON_BIN
from trainium_cdk.runtime.fabric import fabric_command
from trainium_cdk.runtime.launcher import JOB_VENV, LAUNCHER, LAUNCHER_NAME, PRECOMPILE_STEPS_VARIABLE, SHELL
from trainium_cdk.runtime.training_env import cache_dir, job_environment, large_model_environment

# Heredoc delimiter of the launcher inside the script (quoted: nothing in it is expanded).
_LAUNCHER_END = "TRAINIUM_LAUNCHER"
_FABRIC_END = "TRAINIUM_FABRIC"
# The fabric check: one process per node (node 0's nccom-test starts the workers on every NeuronCore).
FABRIC_PROCESSES_PER_NODE = 1
FABRIC_MIN_NODES = 2


# The compute node's Neuron tools, then the venv the link names when the job starts. A job runs with the PATH
# of the sbatch caller on the head node (which has no Neuron tools), and no login shell reads the compute node's
# /etc/profile.d/neuron.sh: the script sets it, and srun passes it on to every node. The batch step resolves the
# link once, so every node of the job uses that venv even if the head node switches the link meanwhile, and
# leaves the job id in it: the head node removes an old venv only when no job Slurm knows left its id there.
# The venv is root's; its .jobs is sticky and writable by every user (neuron_setup.sh): a marker that exists
# (a requeued job's own, or one another user left under this id) marks the venv as well as a new one would.
_ENVIRONMENT = [
    f'export PATH="{NEURON_BIN}:$PATH"',
    f'venv="$(readlink -f {VENV})"',
    'source "$venv/bin/activate"',
    'marker="$venv/.jobs/$SLURM_JOB_ID"',
    '[[ -e "$marker" ]] || touch "$marker" || { echo "trainium-cdk: cannot mark $venv in use by job $SLURM_JOB_ID:'
    ' its .jobs must be a sticky directory every user may write (the head node\'s setup makes it)" >&2; exit 1; }',
]


# The submitter's environment of the job (`trn submit --env`): lines KEY=VALUE in JOB_ENV_VARIABLE, which sbatch
# passes on with the rest of the submitter's environment (its default, --export=ALL). They come after the
# script's own exports, so they win; `export "$line"` assigns without evaluating anything in the value.
JOB_ENV_VARIABLE = "TRN_JOB_ENV"
_JOB_ENVIRONMENT = [
    f'if [[ -n "${{{JOB_ENV_VARIABLE}:-}}" ]]; then',
    f'  while IFS= read -r assignment; do [[ -z "$assignment" ]] || export "$assignment"; done <<< "${JOB_ENV_VARIABLE}"',
    "fi",
]
# Every node's lines in the output file carry its node rank (srun --label: the task id, one task per node), so
# `trn logs --rank N` can pick one node. The job's exit code and partition go beside its output file
# (<name>-<id>.exit): `trn status` and `trn jobs` read it once Slurm has forgotten the job (MinJobAge, 300 s by
# default; ParallelCluster keeps no accounting database unless configured with one).
EXIT_RECORD_SUFFIX = ".exit"
_RUN_AND_RECORD = [
    "code=0",
    # The job's own packages (a requirements.txt where it starts), once, before any node starts (node/job_venv.sh).
    "job_venv || code=$?",
    f'[[ $code != 0 ]] || srun --kill-on-bad-exit=1 --label {SHELL} -c "$TRN_LAUNCHER" {LAUNCHER_NAME} "$@" || code=$?',
    f'echo "$code ${{SLURM_JOB_PARTITION:-}}" > "${{SLURM_SUBMIT_DIR:-.}}/${{SLURM_JOB_NAME}}-${{SLURM_JOB_ID}}{EXIT_RECORD_SUFFIX}"',
    'exit "$code"',
]
# A batch script's default for a variable the job may set itself: sbatch passes the caller's environment on
# (--export=ALL), so `NAME=value sbatch ...` reaches the batch step, which keeps it.
_DEFAULT = "default"
_DEFAULT_FUNCTION = f'{_DEFAULT}() {{ [[ -v "$1" ]] || export "$1=$2"; }}'


def fabric_script_name(group: ComputeGroup) -> str:
    return f"fabric-{group.name}.sbatch"


def render_sbatch(config: Config, group: ComputeGroup, *, job_name: str | None = None) -> str:
    """The batch script of ``group``: by default ``group.nodes`` nodes, all NeuronCores of each."""
    spec = config.spec(group)
    name = job_name or f"{config.project}-{group.name}"
    # Every backend's job environment: on a host (no CCOM_SOCKET_IFNAME), with /fsx always mounted (the
    # cluster's SharedStorage), across nodes on an EFA type (sbatch -N chooses the count).
    track = config.neuron_track
    env = job_environment(
        spec, processes=spec.neuron_cores, cache_dir=cache_dir(group.name), multi_node=spec.has_efa,
        container=False, shared_storage=True, track=track, precompile_steps=config.neuron.precompile_steps,
        node_metrics=True,
    )
    # A job's own value of these wins, as a job's env does on EKS and Batch.
    own = {*large_model_environment(track), PRECOMPILE_STEPS_VARIABLE}
    exports = [f"export {k}={shlex.quote(v)}" for k, v in env.items() if k not in own]
    exports += [_DEFAULT_FUNCTION] + [f"{_DEFAULT} {k} {shlex.quote(v)}" for k, v in env.items() if k in own]
    lines = [
        "#!/bin/bash",
        f"# trainium-cdk: {group.nodes} x {spec.name} ({spec.neuron_cores} NeuronCores each), queue {queue_name(group)}.",
        "# Usage: sbatch [-N NODES] $0 TRAIN_SCRIPT [ARGS...]; PRECOMPILE=1 extracts and compiles the graphs of",
        "# TRN_PRECOMPILE_STEPS steps first (neuron_parallel_compile). A variable below set with `default` keeps",
        "# the value given to sbatch (MALLOC_ARENA_MAX=128 sbatch ...).",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --partition={queue_name(group)}",
        f"#SBATCH --nodes={group.nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        "#SBATCH --wait-all-nodes=1",
        # A node failure requeues the job under the same id, so it resumes from /fsx/checkpoints/<id>.
        "#SBATCH --requeue",
        "#SBATCH --output=%x-%j.out",
        "set -euo pipefail",
        'if [[ $# -lt 1 ]]; then echo "usage: sbatch $0 TRAIN_SCRIPT [ARGS...]" >&2; exit 2; fi',
        "",
        *_ENVIRONMENT,
        *exports,
        'export TRN_PRECOMPILE="${PRECOMPILE:-0}"',
        *_JOB_ENVIRONMENT,
        "",
        f"TRN_LAUNCHER=$(cat <<'{_LAUNCHER_END}'",
        LAUNCHER.rstrip("\n"),
        _LAUNCHER_END,
        ")",
        JOB_VENV.rstrip("\n"),
        *_RUN_AND_RECORD,
    ]
    return "\n".join(lines) + "\n"


def render_fabric_sbatch(config: Config, group: ComputeGroup) -> str:
    """The fabric check of ``group`` (an EFA type): neuron-ls on every node, then nccom-test across them."""
    spec = config.spec(group)
    program, *program_args = fabric_command(spec)
    flag, code, *args = program_args
    # Not a training job: no checkpoints, no Hugging Face caches, no track pins to compare.
    env = job_environment(
        spec, processes=FABRIC_PROCESSES_PER_NODE, cache_dir=cache_dir(group.name), multi_node=True,
        container=False, shared_storage=False,
    )
    nodes = max(group.nodes, FABRIC_MIN_NODES)
    lines = [
        "#!/bin/bash",
        f"# trainium-cdk: fabric check of {spec.name} nodes, queue {queue_name(group)}: neuron-ls on every node, then an",
        "# nccom-test bf16 all-reduce, all-gather, reduce-scatter across them. Usage: sbatch [-N NODES] $0; then: trn check fabric --report fabric-<job id>.out",
        f"#SBATCH --job-name=fabric-{group.name}",
        f"#SBATCH --partition={queue_name(group)}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        "#SBATCH --wait-all-nodes=1",
        "#SBATCH --output=fabric-%j.out",
        "set -euo pipefail",
        "",
        *_ENVIRONMENT,
        *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
        "",
        f"TRN_LAUNCHER=$(cat <<'{_LAUNCHER_END}'",
        LAUNCHER.rstrip("\n"),
        _LAUNCHER_END,
        ")",
        f"TRN_FABRIC=$(cat <<'{_FABRIC_END}'",
        code.strip("\n"),
        _FABRIC_END,
        ")",
        f'srun --kill-on-bad-exit=1 {SHELL} -c "$TRN_LAUNCHER" {LAUNCHER_NAME} {program} {flag} "$TRN_FABRIC" '
        + " ".join(shlex.quote(a) for a in args),
    ]
    return "\n".join(lines) + "\n"


# The MLP example's script, put beside the batch scripts in the head node's ~/trainium (/home is shared with
# every compute node): the first job needs nothing copied to the cluster.
EXAMPLE_SCRIPT = Path(__file__).resolve().parent.parent.parent / "examples" / "mlp" / "train.py"


def head_node_files(config: Config) -> dict[str, str]:
    """File name -> text of what the head node copies to ~/trainium: the batch scripts and the MLP example."""
    return {**render_all(config), EXAMPLE_SCRIPT_NAME: EXAMPLE_SCRIPT.read_text()}


def render_all(config: Config) -> dict[str, str]:
    """File name -> batch script: the training script of every compute group, and the fabric check of
    every group whose type has EFA (a type without cannot run across nodes)."""
    scripts = {batch_script_name(g): render_sbatch(config, g) for g in config.compute_groups}
    scripts.update(
        {fabric_script_name(g): render_fabric_sbatch(config, g) for g in config.compute_groups if config.spec(g).has_efa}
    )
    return scripts
