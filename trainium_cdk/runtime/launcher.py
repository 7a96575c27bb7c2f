"""One launcher for every scheduler: torchrun on every node of a job, wired at run time.

Every backend runs the same POSIX shell program (``trainium_cdk/node/launcher.sh``, as :data:`LAUNCHER`
with its one synth-time value in a header) in front of the training command:
the EKS Job and Volcano Job containers, the Batch job definition, and the Slurm batch script (under
``srun``). It derives the node rank, the node count and the rendezvous address from the scheduler's own
variables, never from a count fixed at synth, so a submit-time node count works on every backend:

=========  ==================================  ================================  ====================================
scheduler  node rank                           node count                        rendezvous host (node rank 0)
=========  ==================================  ================================  ====================================
Batch      ``AWS_BATCH_JOB_NODE_INDEX``        ``AWS_BATCH_JOB_NUM_NODES``       ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4
                                                                                 _ADDRESS``; the main node's own address
Slurm      ``SLURM_NODEID``                    ``SLURM_JOB_NUM_NODES``           first host of ``SLURM_JOB_NODELIST``
Volcano    ``TRN_NODE_RANK_OFFSET`` +          ``VC_LEADER_NUM`` +               first host of ``VC_LEADER_HOSTS``
           ``VC_TASK_INDEX`` (env plugin)      ``VC_WORKER_NUM`` (svc plugin)    (svc plugin)
none       0                                   1                                 127.0.0.1
=========  ==================================  ================================  ====================================

What the job definition sets at synth: ``NPROC_PER_NODE`` (NeuronCores of the instance type),
``MASTER_PORT``, ``TRN_CACHE_DIR`` (the Neuron compile cache, created if missing; the launcher puts
``--cache_dir=<it>`` before the job's own ``NEURON_CC_FLAGS`` unless those name a cache already),
``TRN_PRECOMPILE_STEPS`` and optionally ``TRN_PRECOMPILE=1`` (see below), and with shared storage
``TRN_CHECKPOINT_ROOT``: the launcher exports ``TRN_CHECKPOINT_DIR=<root>/<job>``, the job being
``TRN_JOB_NAME`` (EKS), the Slurm job id or the Batch job id, which a retry or requeue keeps.

Open files: every node raises its soft ``RLIMIT_NOFILE`` to ``TRN_OPEN_FILES`` (default
:data:`~trainium_cdk.facts.defaults.OPEN_FILES`, Neuron's ``ulimit -n 65535``), or to the hard limit when that is
lower (a process may not pass it: a warning names it), before torchrun; never lower.

Precompile (``TRN_PRECOMPILE=1``), xla track: first ``neuron_parallel_compile torchrun <the same command>``, Neuron's
graph extraction: it runs the command with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` (outputs are not real), then
compiles every graph it saw into the cache. During it ``TRN_CHECKPOINT_DIR`` is unset, so nothing reaches
the run's checkpoints, and ``TRN_PRECOMPILE_STEPS`` (default :data:`~trainium_cdk.facts.defaults.PRECOMPILE_STEPS`)
is the number of steps after which the script should stop: Neuron's guide limits the trial run to a few
steps, and only the script knows its steps. Then the real run, with the checkpoint directory. Native track
(``TRN_NEURON_TRACK=native``): graph extraction and ``neuron_parallel_compile`` are PyTorch/XLA's, so the first run is
a warm-up of the same command that trains ``TRN_PRECOMPILE_STEPS`` real steps (TorchNeuron compiles each graph into
the NEFF cache, ``TORCH_NEURONX_NEFF_CACHE_DIR``, as it first runs it), with ``TRN_WARMUP_STEPS`` set to that count
for the script to stop at and no checkpoint directory; then the real run.

Optionally the track's pins (``TRN_NEURON_RELEASE``, ``_DRIVER``, ``_RUNTIME``, ``_FRAMEWORK``): before
torchrun, every node prints the Neuron driver it has loaded and the image's runtime next to them (one
line; skipped where no Neuron driver is loaded). A driver older than the pinned one (its major.minor) stops the
node before torchrun in one line: the release's runtime needs its driver or newer and would fail later, in
nrt_init, on every rank (``TRN_NEURON_DRIVER_CHECK=warn``: a warning instead). Any other difference (newer, another
patch) is a warning. (Under
stand-ins, ``TRN_NEURON_VERSION_FILE`` names another file than ``/sys/module/neuron/version``.)

A Batch multi-node job is retried when the main node's host fails, not a child's: then torchrun on the main node
fails like the program's own error would. So on Batch every node beats on shared storage
(``<checkpoint dir>/.nodes/attempt-<n>``) and leaves its exit code when torchrun ends; a peer whose beat stopped
(older than 4 intervals) without an exit code lost its host, and the main node ends with ``PEER_LOST_EXIT``, which
the job definition retries. A peer's beats count from its own start: Batch starts the children only once the main
node runs, each when its host is ready (a fresh one pulls the image first), so a peer that has not beaten yet is
lost only ``TRN_PEER_START_S`` (default 1800) after the main node's start. Batch ends a multi-node job when its
main node exits, not when a child fails: so the main node also ends the job, with the child's exit code, once a
peer leaves a non-zero exit code of this attempt (newer than its own start). Otherwise its ranks would wait for the
failed one in their next collective, or in the rendezvous of the process group, until its timeout (30 minutes).

The Neuron compile cache's hits and misses (issue 34): a recompile of a large graph costs tens of minutes, and
nothing else says whether a job found its graphs in the cache. The launcher reads them from what Neuron's compiler
wrapper prints, as torchrun's output passes through it to the log unchanged (line by line): on the XLA track,
torch-neuronx's ``neuron_cc_wrapper`` logs ``Using a cached neff at <cache>/neuronxcc-<version>/MODULE_<hash>+<flags>/
model.neff`` for a graph it found, and ``Call compiler with cmd: [... model.MODULE_<hash>+<flags>.hlo_module.pb ...]``
for one it compiles (Neuron, "Neuron Persistent Cache", aws-neuron-sdk about-neuron/arch/neuron-features/
neuron-caching.rst; the same lines in aws-neuron/aws-neuron-sdk#825, huggingface/optimum-neuron#129). Why the log and
not the cache folder: a compile shows in the folder (a new ``MODULE_`` folder with ``model.done``), but a hit does not
(the wrapper only reads ``model.neff``; access times on Lustre and relatime mounts do not say it), and an
``s3://`` cache (``NEURON_COMPILE_CACHE_URL``) has no folder to look at. Counted per node, as distinct graphs
(``MODULE_`` names): misses, the graphs this node's processes compiled; hits, the graphs they loaded and did not
compile here (32 data-parallel ranks waiting for one rank's compile of their common graph count 1 miss, not 31
hits). Per job, the nodes' counts add up (a graph one node compiles and another loads counts once as each): the
readers sum them (Prometheus by ``job``). When torchrun ends, every node prints one JSON line
(``trainium-launch: {"compile_cache": {"job": ..., "node": N, "hits": H, "misses": M}}``), which `trn logs` reads,
writes it to ``<checkpoint dir>/.compile_cache/node-<N>.json`` (with shared storage; hidden, as ``.nodes``, so that
a script that takes the last name in its checkpoint directory never takes it), and with ``TRN_METRICS_DIR``
(:data:`~trainium_cdk.facts.names.METRICS_DIR_VARIABLE`) writes ``<dir>/<job>.prom``, counters
:data:`~trainium_cdk.facts.names.COMPILE_CACHE_HITS_METRIC` and ``_MISSES_METRIC`` labelled ``job`` and ``node``, under
another name first and then renamed (node_exporter's textfile collector reads ``*.prom`` files whole); with
``TRN_METRICS_PUSH_URL`` (:data:`~trainium_cdk.facts.names.METRICS_PUSH_URL_VARIABLE`, EKS, whose Pod Security refuses the
node's folder) it pushes the same text to that Prometheus Pushgateway, ``PUT <url>/metrics/job/<job>/node/<N>`` (one
group per node, which a rerun replaces: the Pushgateway's README), with curl or else python3's urllib; a push that
fails prints a warning and leaves the exit code torchrun's. Not counted:
precompile's ``neuron_parallel_compile`` run (the run after it is), a graph whose compile failed before (``Got a cached
failed neff``). The launcher stays in front of torchrun to do this: it forwards SIGTERM and SIGINT to it, and exits
with its code.

The native track (TorchNeuron, ``TRN_NEURON_TRACK=native`` from :func:`neuron_pins`) has another cache. TorchNeuron
hands ``NEURON_CC_FLAGS`` to ``neuronx-cc`` as they are (torch-neuronx ``csrc/core/KernelExecution.cpp``,
``GetXLAAdditionalArgs``: the flags are appended to the compiler's arguments and to the graph's cache key), where
``--cache_dir`` is the XLA track's compiler wrapper's own option ("Neuron Persistent Cache"), not the compiler's; its
persistent NEFF cache is ``TORCH_NEURONX_NEFF_CACHE_DIR`` (default ``/tmp/neff_cache``: node-local, so every node
compiled every graph again on every run; torch-neuronx ``csrc/core/cache/PersistentCacheBackend.h``, and Neuron
Explorer's profiling guide, "NEFF cache and artifact control"; TorchNeuron's environment variable reference,
awsdocs-neuron torch/reference/env-vars of 2026-10-14, lists compilation caching among its sections). So on the
native track the launcher
sets ``TORCH_NEURONX_NEFF_CACHE_DIR`` to ``TRN_CACHE_DIR`` (a value the job sets wins) and leaves ``NEURON_CC_FLAGS``
alone. The two layouts share the folder without meeting: ``neuronxcc-<version>/MODULE_*`` and TorchNeuron's
``<key[0:2]>/<key[2:4]>/<key>.neff`` (PersistentCacheBackend.h: "2-level directory sharding", written to a temporary
file and renamed). TorchNeuron says what its cache did only at debug level (``TORCH_NEURONX_LOG_LEVEL=3``, on stdout:
``csrc/core/NeuronLogging.h``): ``[Neuron] [DEBUG] [<file>:<line>] Persistent cache hit key= <key> persistent_key=
<hash> size= <bytes>`` (also ``... hit after lock acquisition ...``, once another process of the node compiled it) and
``Stored to persistent cache key= ... persistent_key= <hash> ...`` after a compile (``csrc/core/compilation/
CompilationCache.cpp``); its hit and miss counters (``CompilationCache.PersistentHits``) live inside each process
(``torch_neuronx.metrics``). With those lines in the log the launcher counts them as on the XLA track (graphs by
``persistent_key``). Without them (the default level, WARNING: every operation's debug lines would flood the log) a
hit leaves no trace and the launcher counts what the folder shows: misses are the NEFFs new in the cache since this
node's torchrun started (any node's compiles of the job, on a cache shared between nodes), and hits are ``null`` (in
the JSON line; no hits series in the textfile).

``launcher.sh`` keeps its comments short and points here: every Batch group's job definition carries the whole
program, and 25 groups share one template of at most 1 MB (stacks/batch_stack.py).

The training command follows the launcher's name. torchrun runs ``python -u <first word>``: a command
that starts with a ``.py`` script is handed over as it is; any other command (``python3 train.py``,
a shell script) gets ``--no-python`` so that torchrun executes it as written.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainium_cdk import node
from trainium_cdk.facts import defaults
from trainium_cdk.facts.names import (
    COMPILE_CACHE_HITS_METRIC,
    COMPILE_CACHE_MISSES_METRIC,
    METRICS_DIR_VARIABLE,
    METRICS_PUSH_URL_VARIABLE,
)
from trainium_cdk.facts.versions import NeuronTrack

LAUNCHER_NAME = "trainium-launch"
SHELL = "/bin/sh"
# Pod and task names of a Volcano job of the training chart; the launcher reads the svc plugin's
# variables of these two tasks (VC_<TASK>_NUM, VC_<TASK>_HOSTS: the task name upper-cased).
LEADER_TASK = "leader"
WORKER_TASK = "worker"
RANK_OFFSET_VARIABLE = "TRN_NODE_RANK_OFFSET"
# The job's code directory: the launcher changes into it before torchrun (`trn submit --workdir`).
WORKDIR_VARIABLE = "TRN_WORKDIR"
# The main node of a Batch multi-node job exits with this when a peer's host is gone (EX_TEMPFAIL): the job
# definition retries it (constructs/batch.py), where the program's own errors are not retried.
PEER_LOST_EXIT_CODE = 75

# The compile cache's summary: the key of the launcher's JSON line, and (with a dot) the folder of the checkpoint
# directory that holds each node's copy of it (node-<rank>.json).
COMPILE_CACHE_SUMMARY = "compile_cache"

LAUNCHER = node.program(
    "launcher.sh",
    {
        "PEER_LOST_EXIT": PEER_LOST_EXIT_CODE,
        "DEFAULT_OPEN_FILES": defaults.OPEN_FILES,
        "DEFAULT_PRECOMPILE_STEPS": defaults.PRECOMPILE_STEPS,
        "CACHE_SUMMARY": COMPILE_CACHE_SUMMARY,
        "HITS_METRIC": COMPILE_CACHE_HITS_METRIC,
        "MISSES_METRIC": COMPILE_CACHE_MISSES_METRIC,
    },
)
# The variables a job (or its config) sets to change what the launcher does.
PRECOMPILE_VARIABLE = "TRN_PRECOMPILE"
PRECOMPILE_STEPS_VARIABLE = "TRN_PRECOMPILE_STEPS"
# Set by the launcher in a native-track warm-up run only: the steps after which the script stops.
WARMUP_STEPS_VARIABLE = "TRN_WARMUP_STEPS"


# The job's own packages where no image carries them (a requirements.txt where the job starts): a bash function,
# job_venv, that the Slurm batch script and the development instance's run script define and call before the launcher
# (node/job_venv.sh); `trn rehearse` runs it for EKS and Batch, in place of the image that installed them.
JOB_VENV = node.source("job_venv.sh")


def launch_command(program: Sequence[str]) -> list[str]:
    """The argv of a container or task: the launcher, then the training command."""
    return [SHELL, "-c", LAUNCHER, LAUNCHER_NAME, *program]


def launch_environment(
    *, processes: int, master_port: int, cache_dir: str, precompile: bool = False,
    precompile_steps: int = defaults.PRECOMPILE_STEPS, checkpoint_root: str | None = None,
    track: NeuronTrack | None = None, metrics_dir: str | None = None, metrics_push_url: str | None = None,
) -> dict[str, str]:
    """What the launcher reads from the job definition (everything else comes from the scheduler).
    ``precompile_steps``: the step cap of precompile's graph extraction, for the script to read.
    ``track``: the Neuron track whose pins the preflight prints beside the node's versions; default none.
    ``metrics_dir``: where the launcher writes the job's Prometheus textfile (``TRN_METRICS_DIR``); default none.
    ``metrics_push_url``: the Pushgateway the launcher pushes the same text to (``TRN_METRICS_PUSH_URL``, EKS);
    default none."""
    env = {"NPROC_PER_NODE": str(processes), "MASTER_PORT": str(master_port), "TRN_CACHE_DIR": cache_dir}
    if precompile:
        env[PRECOMPILE_VARIABLE] = "1"
    env[PRECOMPILE_STEPS_VARIABLE] = str(precompile_steps)
    if checkpoint_root is not None:
        env["TRN_CHECKPOINT_ROOT"] = checkpoint_root
    if track is not None:
        env.update(neuron_pins(track))
    if metrics_dir is not None:
        env[METRICS_DIR_VARIABLE] = metrics_dir
    if metrics_push_url is not None:
        env[METRICS_PUSH_URL_VARIABLE] = metrics_push_url
    return env


def neuron_pins(track: NeuronTrack) -> dict[str, str]:
    """The ``TRN_NEURON_*`` variables of ``track``, read by the launcher's preflight and the example."""
    return {
        "TRN_NEURON_RELEASE": track.neuron_release,
        "TRN_NEURON_DRIVER": track.driver,
        "TRN_NEURON_RUNTIME": track.runtime,
        "TRN_NEURON_FRAMEWORK": track.framework,
        # Which compile cache the launcher sets (the module's docstring): the track's name, not guessed from versions.
        "TRN_NEURON_TRACK": track.name,
    }
