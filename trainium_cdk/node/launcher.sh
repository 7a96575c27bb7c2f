#!/bin/sh
# trainium-launch: torchrun on every node of a job, wired at run time (trainium_cdk/launcher.py).
set -eu
: "${PEER_LOST_EXIT:?the header sets PEER_LOST_EXIT}"
: "${DEFAULT_OPEN_FILES:?the header sets DEFAULT_OPEN_FILES}"
: "${DEFAULT_PRECOMPILE_STEPS:?the header sets DEFAULT_PRECOMPILE_STEPS}"
say() { echo "trainium-launch: $*" >&2; }
fail() { say "$*"; exit 2; }
self_address() {
  # The node's first IPv4 address that is not link-local (awsvpc's ecs-eth0 is 169.254.x; hostname -I
  # never lists loopback).
  for a in $(hostname -I); do
    case "$a" in 169.254.*|*:*) ;; *) echo "$a"; return 0 ;; esac
  done
  return 1
}
if [ -n "${AWS_BATCH_JOB_NUM_NODES:-}" ]; then
  scheduler="batch"
  NODE_RANK="${AWS_BATCH_JOB_NODE_INDEX:?}"
  NNODES="$AWS_BATCH_JOB_NUM_NODES"
  # Batch sets the main node's address on the other nodes only.
  if [ "$NODE_RANK" = "${AWS_BATCH_JOB_MAIN_NODE_INDEX:-0}" ]; then
    MASTER_ADDR="$(self_address)" || fail "no private address on the main node"
  else
    MASTER_ADDR="${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-}"
  fi
elif [ -n "${SLURM_JOB_NUM_NODES:-}" ]; then
  scheduler="slurm"
  NODE_RANK="${SLURM_NODEID:?}"
  NNODES="$SLURM_JOB_NUM_NODES"
  MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST:?}" | head -n 1)"
elif [ -n "${VC_TASK_INDEX:-}" ]; then
  scheduler="volcano"
  NODE_RANK=$(( ${TRN_NODE_RANK_OFFSET:-0} + VC_TASK_INDEX ))
  NNODES=$(( ${VC_LEADER_NUM:?} + ${VC_WORKER_NUM:-0} ))
  MASTER_ADDR="${VC_LEADER_HOSTS%%,*}"
else
  scheduler="none"
  NODE_RANK=0
  NNODES=1
  MASTER_ADDR=127.0.0.1
fi
MASTER_PORT="${MASTER_PORT:-29500}"
NPROC_PER_NODE="${NPROC_PER_NODE:?the job definition sets NPROC_PER_NODE}"
[ -n "$MASTER_ADDR" ] || fail "$scheduler: no rendezvous address"
[ "$NODE_RANK" -ge 0 ] && [ "$NODE_RANK" -lt "$NNODES" ] || fail "$scheduler: node rank $NODE_RANK of $NNODES nodes"
[ "$#" -ge 1 ] || fail "usage: $0 PROGRAM [ARGS...]"
export MASTER_ADDR MASTER_PORT NODE_RANK NNODES NPROC_PER_NODE
if [ -n "${TRN_CACHE_DIR:-}" ]; then
  mkdir -p "$TRN_CACHE_DIR"
  # The cache goes before the job's own compiler flags (the track's, or the job's env), which stay as they
  # are; flags that name a cache of their own keep it.
  case " ${NEURON_CC_FLAGS:-} " in
    *" --cache_dir="*) say "NEURON_CC_FLAGS names its own --cache_dir: TRN_CACHE_DIR ($TRN_CACHE_DIR) is not used" ;;
    *) export NEURON_CC_FLAGS="--cache_dir=$TRN_CACHE_DIR${NEURON_CC_FLAGS:+ $NEURON_CC_FLAGS}" ;;
  esac
fi
if [ -n "${TRN_CHECKPOINT_ROOT:-}" ]; then
  job="${TRN_JOB_NAME:-${SLURM_JOB_ID:-${AWS_BATCH_JOB_ID:-}}}"
  job="${job%%#*}"  # a Batch node's job id is <job id>#<node index>
  [ -n "$job" ] || fail "$scheduler: no job name or id for the checkpoint directory"
  export TRN_CHECKPOINT_DIR="${TRN_CHECKPOINT_DIR:-$TRN_CHECKPOINT_ROOT/$job}"
  mkdir -p "$TRN_CHECKPOINT_DIR"
fi
case "$1" in *.py) ;; *) set -- --no-python "$@" ;; esac
say "$scheduler: node $NODE_RANK of $NNODES, $NPROC_PER_NODE processes, rendezvous $MASTER_ADDR:$MASTER_PORT"
# Version preflight: the driver this node has loaded and the runtime the image carries, next to the
# job's pins (TRN_NEURON_*) when it has them. A runtime newer than the driver fails later in nrt_init.
version_file="${TRN_NEURON_VERSION_FILE:-/sys/module/neuron/version}"  # another only under stand-ins
if [ -r "$version_file" ]; then
  read -r driver < "$version_file" || true
  runtime="$(dpkg-query -W -f='${Version}' aws-neuronx-runtime-lib 2>/dev/null || rpm -q --qf '%{VERSION}' aws-neuronx-runtime-lib 2>/dev/null || true)"
  runtime="${runtime%%-*}"  # a Debian revision follows the version
  say "neuron driver $driver${TRN_NEURON_DRIVER:+ (pinned $TRN_NEURON_DRIVER)}, runtime ${runtime:-not installed}${TRN_NEURON_RUNTIME:+ (pinned $TRN_NEURON_RUNTIME)}"
  [ -z "${TRN_NEURON_DRIVER:-}" ] || [ "$driver" = "$TRN_NEURON_DRIVER" ] \
    || say "WARNING: the node's Neuron driver $driver is not the ${TRN_NEURON_RELEASE:-job}'s $TRN_NEURON_DRIVER"
else
  say "no Neuron driver loaded here: version preflight skipped"
fi
# Open files: the soft limit up to TRN_OPEN_FILES (Neuron's `ulimit -n 65535`), within the hard limit, which
# only the scheduler's daemon (slurmd, containerd) or the job definition (Batch's nofile ulimit) can raise.
# (ulimit -S/-H -n: dash, bash and BusyBox ash all have them.)
want="${TRN_OPEN_FILES:-$DEFAULT_OPEN_FILES}"
case "$want" in ''|*[!0-9]*) fail "TRN_OPEN_FILES=$want: a number of open files" ;; esac
# shellcheck disable=SC3045
soft="$(ulimit -Sn)" hard="$(ulimit -Hn)"
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then
  say "WARNING: the hard limit of open files here is $hard, under the $want asked for: the soft limit goes to $hard"
  want="$hard"
fi
if [ "$soft" != unlimited ] && [ "$soft" -lt "$want" ]; then
  # shellcheck disable=SC3045
  if ulimit -Sn "$want"; then soft="$want"; else say "WARNING: the soft limit of open files stays $soft"; fi
fi
say "open files: soft limit $soft, hard limit $hard"
set -- --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node="$NPROC_PER_NODE" \
  --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" "$@"
if [ "${TRN_PRECOMPILE:-0}" = 1 ]; then
  # Neuron's graph extraction: neuron_parallel_compile runs the same command with NEURON_EXTRACT_GRAPHS_ONLY=1
  # (no real execution, outputs not real), then compiles every graph it saw into the cache. The trial run
  # should be a few steps (Neuron's guide): the script stops after TRN_PRECOMPILE_STEPS. It gets no
  # checkpoint directory, so it can neither resume from the run's checkpoints nor write over them.
  steps="${TRN_PRECOMPILE_STEPS:-$DEFAULT_PRECOMPILE_STEPS}"
  case "$steps" in ''|*[!0-9]*) fail "TRN_PRECOMPILE_STEPS=$steps: the steps of the trial run, 1 or more" ;; esac
  [ "$steps" -ge 1 ] || fail "TRN_PRECOMPILE_STEPS=$steps: the steps of the trial run, 1 or more"
  command -v neuron_parallel_compile >/dev/null 2>&1 \
    || fail "TRN_PRECOMPILE=1, but there is no neuron_parallel_compile here (torch-neuronx's PyTorch/XLA training tool)"
  say "precompile: graph extraction over $steps steps (NEURON_EXTRACT_GRAPHS_ONLY=1, TRN_PRECOMPILE_STEPS=$steps, no TRN_CHECKPOINT_DIR), compiled into the cache by neuron_parallel_compile; then the run"
  ( unset TRN_CHECKPOINT_DIR; TRN_PRECOMPILE_STEPS="$steps"; export TRN_PRECOMPILE_STEPS; exec neuron_parallel_compile torchrun "$@" )
  say "precompile: done; the run starts"
fi
if [ "$scheduler" != batch ] || [ "$NNODES" -lt 2 ] || [ -z "${TRN_CHECKPOINT_DIR:-}" ]; then
  exec torchrun "$@"
fi
# Batch retries a multi-node job when the main node's host fails, not a child's: then torchrun on the main
# node fails like the program's own error would. Every node beats on shared storage and leaves its exit code
# when torchrun ends; a peer whose beat stopped without an exit code lost its host, and the main node ends
# with PEER_LOST_EXIT, which the job definition retries.
beats="$TRN_CHECKPOINT_DIR/.nodes/attempt-${AWS_BATCH_JOB_ATTEMPT:-1}"
interval="${TRN_HEARTBEAT_S:-30}"
mkdir -p "$beats"
started=$(date +%s)
( while :; do touch "$beats/node-$NODE_RANK"; sleep "$interval"; done ) &
beating=$!
peers() {
  # pending: peers that left no exit code yet; lost: those of them whose beat is older than 4 intervals
  # (or never came, 10 intervals after start).
  now=$(date +%s)
  pending=""
  lost=""
  i=0
  while [ "$i" -lt "$NNODES" ]; do
    if [ "$i" != "$NODE_RANK" ] && [ ! -e "$beats/node-$i.exit" ]; then
      pending="$pending $i"
      if [ -e "$beats/node-$i" ]; then
        [ $(( now - $(stat -c %Y "$beats/node-$i") )) -le $(( 4 * interval )) ] || lost="$lost $i"
      elif [ $(( now - started )) -gt $(( 10 * interval )) ]; then
        lost="$lost $i"
      fi
    fi
    i=$(( i + 1 ))
  done
}
peer_lost() {
  say "node(s)$lost stopped without an exit: a host is gone; exit $PEER_LOST_EXIT, which the job retries"
  kill "$beating" 2>/dev/null || true
  exit "$PEER_LOST_EXIT"
}
torchrun "$@" &
run=$!
trap 'kill -TERM "$run" 2>/dev/null' TERM INT
if [ "$NODE_RANK" = "${AWS_BATCH_JOB_MAIN_NODE_INDEX:-0}" ]; then
  while kill -0 "$run" 2>/dev/null; do
    peers
    if [ -n "$lost" ]; then kill -TERM "$run" 2>/dev/null || true; wait "$run" || true; peer_lost; fi
    sleep 1
  done
fi
code=0
wait "$run" || code=$?
echo "$code" > "$beats/node-$NODE_RANK.exit"
kill "$beating" 2>/dev/null || true
if [ "$code" != 0 ] && [ "$NODE_RANK" = "${AWS_BATCH_JOB_MAIN_NODE_INDEX:-0}" ]; then
  # torchrun failed here: a peer's error, or its host's loss, which shows once its beat is stale.
  waited=0
  while [ "$waited" -le $(( 5 * interval )) ]; do
    peers
    if [ -n "$lost" ]; then peer_lost; fi
    [ -n "$pending" ] || break
    sleep 1
    waited=$(( waited + 1 ))
  done
fi
exit "$code"
