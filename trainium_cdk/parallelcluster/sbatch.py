"""A Slurm batch script per compute group: multi-node torchrun on every NeuronCore, over EFA.

Rendered from the catalog (``--nproc_per_node`` = NeuronCores per node, the EFA environment only on
EFA types) and the group (``--nodes``). Usage on the head node::

    sbatch ~/trainium/train-<group>.sbatch /fsx/code/train.py --your --args

The first run precompiles the graphs with ``neuron_parallel_compile`` into the group's compile cache
on FSx; set ``PRECOMPILE=0`` once the cache is warm.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from trainium_cdk.config import ComputeGroup, Config
from trainium_cdk.parallelcluster.cluster_config import MOUNT_DIR, VENV, batch_script_name, queue_name
from trainium_cdk.training_env import CACHE_DIR_NAME, MASTER_PORT, efa_environment, neuron_environment

CACHE_ROOT = f"{MOUNT_DIR}/{CACHE_DIR_NAME}"


def cache_dir(job_name: str) -> str:
    return f"{CACHE_ROOT}/{job_name}"


def render_sbatch(config: Config, group: ComputeGroup, *, job_name: str | None = None) -> str:
    """The batch script of ``group``: ``group.nodes`` nodes, all NeuronCores of each."""
    spec = config.spec(group)
    name = job_name or f"{config.project}-{group.name}"
    cache = cache_dir(name)
    env: Mapping[str, str] = {**efa_environment(spec), **neuron_environment(cache)}
    # Pods also set CCOM_SOCKET_IFNAME=eth0; on a host udev names the primary interface (ens5) and
    # the Neuron runtime finds it itself.
    exports = [f"export {k}={shlex.quote(v)}" for k, v in env.items() if k != "NEURON_CC_FLAGS"]
    # Extra compiler flags from the submitter's environment come after the cache directory.
    exports.append(f'export NEURON_CC_FLAGS="{env["NEURON_CC_FLAGS"]} ${{NEURON_CC_FLAGS:-}}"')
    lines = [
        "#!/bin/bash",
        f"# trainium-cdk: {group.nodes} x {spec.name} ({spec.neuron_cores} NeuronCores each), queue {queue_name(group)}.",
        "# Usage: sbatch $0 TRAIN_SCRIPT [ARGS...]; PRECOMPILE=0 skips neuron_parallel_compile (warm cache);",
        "# PRECOMPILE_ARGS are added to the precompile run only (for example fewer steps).",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --partition={queue_name(group)}",
        f"#SBATCH --nodes={group.nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        "#SBATCH --wait-all-nodes=1",
        "#SBATCH --output=%x-%j.out",
        "set -euo pipefail",
        'if [[ $# -lt 1 ]]; then echo "usage: sbatch $0 TRAIN_SCRIPT [ARGS...]" >&2; exit 2; fi',
        "",
        f"source {VENV}/bin/activate",
        *exports,
        f"mkdir -p {cache}",
        "",
        'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        "export MASTER_ADDR",
        f"export MASTER_PORT={MASTER_PORT}",
        "launcher=(",
        f"  torchrun --nnodes={group.nodes} --nproc_per_node={spec.neuron_cores}",
        '  --rdzv_backend=c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv_id="$SLURM_JOB_ID"',
        ")",
        "",
        'if [[ "${PRECOMPILE:-1}" == 1 ]]; then',
        "  # shellcheck disable=SC2086",
        '  srun --kill-on-bad-exit=1 neuron_parallel_compile "${launcher[@]}" "$@" ${PRECOMPILE_ARGS:-}',
        "fi",
        'srun --kill-on-bad-exit=1 "${launcher[@]}" "$@"',
    ]
    return "\n".join(lines) + "\n"


def render_all(config: Config) -> dict[str, str]:
    """File name -> batch script, one per compute group."""
    return {batch_script_name(g): render_sbatch(config, g) for g in config.compute_groups}
