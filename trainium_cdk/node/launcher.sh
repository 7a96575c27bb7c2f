#!/bin/sh
# trainium-launch: torchrun on every node of a job, wired at run time (trainium_cdk/runtime/launcher.py).
set -eu
: "${PEER_LOST_EXIT:?the header sets PEER_LOST_EXIT}"
say() { echo "trainium-launch: $*" >&2; }
older() {  # is version $1 older than $2 in its major.minor (2.30.2.0 < 2.31.8.0)? Not numbers: no.
  a="${1%%.*}" b="${2%%.*}" r1="${1#*.}" r2="${2#*.}"
  c="${r1%%.*}" d="${r2%%.*}"
  case "$a.$b.$c.$d" in *[!0-9.]*|*..*|.*|*.) return 1 ;; esac
  [ "$a" -lt "$b" ] || { [ "$a" -eq "$b" ] && [ "$c" -lt "$d" ]; }
}
fail() { say "$*"; exit 2; }
self_address() {
  # The first IPv4 address not link-local (awsvpc's ecs-eth0); hostname -I lists no loopback.
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
native=""
if [ "${TRN_NEURON_TRACK:-}" = native ]; then native=1; fi
if [ -n "${TRN_CACHE_DIR:-}" ]; then
  mkdir -p "$TRN_CACHE_DIR"
  if [ -n "$native" ]; then
    # TorchNeuron's NEFF cache; it passes NEURON_CC_FLAGS to neuronx-cc as they are (launcher.py).
    if [ -n "${TORCH_NEURONX_NEFF_CACHE_DIR:-}" ]; then
      say "TORCH_NEURONX_NEFF_CACHE_DIR is set: TRN_CACHE_DIR unused"
    else
      export TORCH_NEURONX_NEFF_CACHE_DIR="$TRN_CACHE_DIR"
    fi
  else
    # Before the job's own compiler flags, unless they name a cache.
    case " ${NEURON_CC_FLAGS:-} " in
      *" --cache_dir="*) say "NEURON_CC_FLAGS has a --cache_dir: TRN_CACHE_DIR unused" ;;
      *) export NEURON_CC_FLAGS="--cache_dir=$TRN_CACHE_DIR${NEURON_CC_FLAGS:+ $NEURON_CC_FLAGS}" ;;
    esac
  fi
fi
job="${TRN_JOB_NAME:-${SLURM_JOB_ID:-${AWS_BATCH_JOB_ID:-}}}"
job="${job%%#*}"  # a Batch node's job id is <job id>#<node index>
# The job's metrics label (a name Prometheus and the Pushgateway take), for the launcher's series and the
# program's own (TRN_METRICS_JOB: the recipes' throughput gauges).
case "$job" in ''|*[!A-Za-z0-9_.-]*) label="" ;; *) label="$job" ;; esac
TRN_METRICS_JOB="$label"
export TRN_METRICS_JOB
if [ -n "${TRN_CHECKPOINT_ROOT:-}" ]; then
  [ -n "$job" ] || fail "$scheduler: no job name or id for the checkpoint directory"
  export TRN_CHECKPOINT_DIR="${TRN_CHECKPOINT_DIR:-$TRN_CHECKPOINT_ROOT/$job}"
  mkdir -p "$TRN_CHECKPOINT_DIR"
fi
# The job's code directory (`trn submit --workdir`): a relative script path is read from there.
if [ -n "${TRN_WORKDIR:-}" ]; then
  cd "$TRN_WORKDIR" || fail "$scheduler: no directory $TRN_WORKDIR (TRN_WORKDIR)"
fi
case "$1" in *.py) ;; *) set -- --no-python "$@" ;; esac
say "$scheduler: node $NODE_RANK of $NNODES, $NPROC_PER_NODE processes, rendezvous $MASTER_ADDR:$MASTER_PORT"
# Version preflight: a runtime newer than the driver fails later in nrt_init (launcher.py).
version_file="${TRN_NEURON_VERSION_FILE:-/sys/module/neuron/version}"  # another only under stand-ins
if [ -r "$version_file" ]; then
  read -r driver < "$version_file" || true
  runtime="$(dpkg-query -W -f='${Version}' aws-neuronx-runtime-lib 2>/dev/null || rpm -q --qf '%{VERSION}' aws-neuronx-runtime-lib 2>/dev/null || true)"
  runtime="${runtime%%-*}"  # a Debian revision follows the version
  say "neuron driver $driver${TRN_NEURON_DRIVER:+ (pinned $TRN_NEURON_DRIVER)}, runtime ${runtime:-not installed}${TRN_NEURON_RUNTIME:+ (pinned $TRN_NEURON_RUNTIME)}"
  if [ -n "${TRN_NEURON_DRIVER:-}" ] && older "$driver" "$TRN_NEURON_DRIVER" && [ "${TRN_NEURON_DRIVER_CHECK:-stop}" != warn ]; then
    # A runtime needs a driver of its release or newer (it fails later, in nrt_init): stop before torchrun.
    fail "the node's Neuron driver $driver is older than the ${TRN_NEURON_RELEASE:-job}'s $TRN_NEURON_DRIVER, which its runtime needs: a node image (AMI) with that driver or newer (TRN_NEURON_DRIVER_CHECK=warn runs anyway)"
  fi
  [ -z "${TRN_NEURON_DRIVER:-}" ] || [ "$driver" = "$TRN_NEURON_DRIVER" ] \
    || say "WARNING: the node's Neuron driver $driver is not the ${TRN_NEURON_RELEASE:-job}'s $TRN_NEURON_DRIVER"
else
  say "no Neuron driver loaded here: version preflight skipped"
fi
# Open files: Neuron's ulimit -n 65535, within the hard limit (launcher.py).
want="${TRN_OPEN_FILES:-$DEFAULT_OPEN_FILES}"
case "$want" in ''|*[!0-9]*) fail "TRN_OPEN_FILES=$want: a number" ;; esac
# shellcheck disable=SC3045
soft="$(ulimit -Sn)" hard="$(ulimit -Hn)"
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then say "WARNING: open files: hard limit $hard < $want"; want="$hard"; fi
# shellcheck disable=SC3045
if [ "$soft" != unlimited ] && [ "$soft" -lt "$want" ] && ulimit -Sn "$want"; then soft="$want"; fi
say "open files: soft limit $soft, hard limit $hard"
set -- --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node="$NPROC_PER_NODE" \
  --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" "$@"
if [ "${TRN_PRECOMPILE:-0}" = 1 ]; then
  steps="${TRN_PRECOMPILE_STEPS:-$DEFAULT_PRECOMPILE_STEPS}"
  case "$steps" in ''|0*|*[!0-9]*) fail "TRN_PRECOMPILE_STEPS=$steps: 1 or more steps" ;; esac
  if [ -n "$native" ]; then
    # TorchNeuron has no graph extraction (neuron_parallel_compile is PyTorch/XLA's): a warm-up of a few real steps
    # compiles into the NEFF cache, no checkpoint directory, the script stopping at TRN_WARMUP_STEPS (launcher.py).
    say "precompile: warm-up, $steps training step(s) into the compile cache, no TRN_CHECKPOINT_DIR"
  else
    # Neuron's graph extraction over a few steps, no checkpoint directory; then the run (launcher.py).
    command -v neuron_parallel_compile >/dev/null || fail "TRN_PRECOMPILE=1: no neuron_parallel_compile (torch-neuronx XLA)"
    say "precompile: graph extraction over $steps steps, no TRN_CHECKPOINT_DIR"
  fi
  (
    unset TRN_CHECKPOINT_DIR
    export TRN_PRECOMPILE_STEPS="$steps"
    if [ -n "$native" ]; then export TRN_WARMUP_STEPS="$steps"; exec torchrun "$@"; fi
    exec neuron_parallel_compile torchrun "$@"
  )
fi
# The compile cache's hits and misses: the graphs torch-neuronx's compiler wrapper loaded from the cache or compiled
# in this node's processes, read from torchrun's output as it passes; a summary when it ends (launcher.py).
# XLA track: neuron_cc_wrapper's lines ("Neuron Persistent Cache"). Native track, at TORCH_NEURONX_LOG_LEVEL=3 only:
# "Persistent cache hit [after lock acquisition] key= K persistent_key= H" and "Stored to persistent cache key= K
# persistent_key= H" (torch-neuronx csrc/core/compilation/CompilationCache.cpp, TORCH_NEURONX_DEBUG).
neffs() {  # TorchNeuron's cache entries: <dir>/ab/cd/<key>.neff (PersistentCacheBackend.h)
  d="${TORCH_NEURONX_NEFF_CACHE_DIR:-/tmp/neff_cache}"
  find "$d" -mindepth 3 -maxdepth 3 -path "$d/??/??/*.neff" 2>/dev/null || true
}
start() {
  counters=""
  if command -v awk >/dev/null && tally="$(mktemp -d)" && mkfifo "$tally/1" "$tally/2"; then
    # The native track's NEFFs before the run: the new ones at the end are its misses (a list, not a time: a file
    # written in the marker's clock tick would not be newer than it).
    [ -z "$native" ] || neffs > "$tally/before"
    for fd in 1 2; do
      awk -v seen="$tally/seen.$fd" '{ print; fflush(); kind = "" }
        /Using a cached neff at / { kind = "hit" }
        /Call compiler with cmd/ { kind = "miss" }
        kind && match($0, /MODULE_[0-9A-Za-z_+]+/) { print kind, substr($0, RSTART, RLENGTH) > seen; fflush(seen) }
        /\[DEBUG\].* Persistent cache hit / { kind = "hit" }
        /\[DEBUG\].* Stored to persistent cache / { kind = "miss" }
        kind && match($0, /persistent_key= [^ ]+/) { print kind, substr($0, RSTART + 16, RLENGTH - 16) > seen; fflush(seen) }
      ' < "$tally/$fd" >&"$fd" &
      counters="$counters $!"
    done
    torchrun "$@" > "$tally/1" 2> "$tally/2" &
  else
    say "WARNING: no awk, mktemp or mkfifo here: the compile cache's hits and misses are not counted"
    tally=""
    torchrun "$@" &
  fi
  run=$!
  trap 'kill -TERM "$run" 2>/dev/null' TERM INT
}
reap() {  # torchrun's exit code, after it ended (a trapped signal interrupts wait)
  code=0
  wait "$run" || code=$?
  while kill -0 "$run" 2>/dev/null; do code=0; wait "$run" || code=$?; done
}
series() { printf '# TYPE %s counter\n%s{job="%s",node="%s"} %s\n' "$1" "$1" "$label" "$NODE_RANK" "$(( $2 ))"; }
finish() {
  [ -n "$tally" ] || return 0
  # The counters end with torchrun's output: at most 10 s more if something it started still holds it. The guard
  # holds none of the launcher's output: its sleep outlives a kill of its subshell, and whatever reads the launcher's
  # output (SSM Run Command, `trn rehearse`, a pipe) would wait for it.
  # shellcheck disable=SC2086  # the counters' process ids
  ( sleep 10; kill $counters 2>/dev/null ) </dev/null >/dev/null 2>&1 &
  guard=$!
  # shellcheck disable=SC2086
  wait $counters || true
  kill "$guard" 2>/dev/null || true
  # shellcheck disable=SC2046  # three numbers: hits, misses, lines read
  set -- $(cat "$tally"/seen.* 2>/dev/null | awk '$1 == "miss" { m[$2] = 1 } $1 == "hit" { h[$2] = 1 }
    END { for (k in m) misses++; for (k in h) if (!(k in m)) hits++; print hits + 0, misses + 0, NR + 0 }')
  if [ -n "$native" ] && [ "$3" = 0 ]; then
    # No debug lines: a hit leaves no trace; misses are the NEFFs new in the cache (PersistentCacheBackend.h's
    # <dir>/ab/cd/<key>.neff, renamed into place), from any node of the job on a shared cache (launcher.py).
    set -- null "$(neffs | awk -v before="$tally/before" 'BEGIN { while ((getline f < before) > 0) old[f] = 1 }
      !($0 in old) { n++ } END { print n + 0 }')"
  fi
  rm -rf "$tally"
  line="{\"$CACHE_SUMMARY\": {\"job\": \"$label\", \"node\": $NODE_RANK, \"hits\": $1, \"misses\": $(( $2 ))}}"
  say "$line"
  summary="${TRN_CHECKPOINT_DIR:-}/.$CACHE_SUMMARY"  # hidden, as .nodes: not taken for a checkpoint
  if [ -n "${TRN_CHECKPOINT_DIR:-}" ] && ! { mkdir -p "$summary" && echo "$line" > "$summary/node-$NODE_RANK.json"; }; then
    say "WARNING: cannot write $summary/node-$NODE_RANK.json"
  fi
  # node_exporter's textfile collector reads *.prom files: write another name, then rename (its README).
  # No folder: no collector on this node (observability.prometheus off), nothing to write.
  prom="${TRN_METRICS_DIR:-}/$label.prom"
  # Hits unknown (null): no hits series, rather than a false 0.
  metrics() { { [ "$1" = null ] || series "$HITS_METRIC" "$1"; } && series "$MISSES_METRIC" "$2"; }
  if [ -d "${TRN_METRICS_DIR:-/nonexistent}" ] && [ -n "$label" ] && ! { metrics "$@" > "$prom.$$" && mv -f "$prom.$$" "$prom"; } 2>/dev/null; then
    say "WARNING: cannot write $prom (TRN_METRICS_DIR)"
  fi
  # EKS: the same text to the Pushgateway, one group per job and node (launcher.py).
  push="${TRN_METRICS_PUSH_URL:-}/metrics/job/$label/node/$NODE_RANK"
  if [ -n "${TRN_METRICS_PUSH_URL:-}" ] && [ -n "$label" ]; then
    if command -v curl >/dev/null; then
      metrics "$@" | curl -fsS -m 10 -X PUT --data-binary @- "$push" >/dev/null 2>&1 || push_failed=1
    else
      metrics "$@" | python3 -c 'import sys, urllib.request as u
u.urlopen(u.Request(sys.argv[1], sys.stdin.buffer.read(), method="PUT"), timeout=10)' "$push" 2>/dev/null || push_failed=1
    fi
    [ -z "${push_failed:-}" ] || say "WARNING: cannot push the job's metrics to $push (TRN_METRICS_PUSH_URL)"
  fi
}
if [ "$scheduler" != batch ] || [ "$NNODES" -lt 2 ] || [ -z "${TRN_CHECKPOINT_DIR:-}" ]; then
  start "$@"
  reap
  finish
  exit "$code"
fi
# Batch retries a multi-node job on the main node's host loss only: peers' heartbeats (launcher.py).
beats="$TRN_CHECKPOINT_DIR/.nodes/attempt-${AWS_BATCH_JOB_ATTEMPT:-1}"
interval="${TRN_HEARTBEAT_S:-30}"
start_limit="${TRN_PEER_START_S:-1800}"
mkdir -p "$beats"
started=$(date +%s)
# (No output: the sleep outlives the kill of its loop, and would hold the launcher's output for an interval.)
( while :; do touch "$beats/node-$NODE_RANK"; sleep "$interval"; done ) </dev/null >/dev/null 2>&1 &
beating=$!
peers() {
  # pending: no exit code yet; lost: of those, beat older than 4 intervals or none start_limit after start.
  now=$(date +%s)
  pending=""
  lost=""
  never=""
  i=0
  while [ "$i" -lt "$NNODES" ]; do
    if [ "$i" != "$NODE_RANK" ] && [ ! -e "$beats/node-$i.exit" ]; then
      pending="$pending $i"
      if [ -e "$beats/node-$i" ]; then
        [ $(( now - $(stat -c %Y "$beats/node-$i") )) -le $(( 4 * interval )) ] || lost="$lost $i"
      elif [ $(( now - started )) -gt "$start_limit" ]; then
        lost="$lost $i"
        never="$never $i"
      fi
    fi
    i=$(( i + 1 ))
  done
}
peer_lost() {
  if [ -n "$never" ]; then
    say "node(s)$never never started (no beat ${start_limit}s after this node's start): a host is gone"
  fi
  say "node(s)$lost stopped without an exit: a host is gone; exit $PEER_LOST_EXIT, which the job retries"
  kill "$beating" 2>/dev/null || true
  exit "$PEER_LOST_EXIT"
}
failed_peer() {  # (launcher.py)
  for f in "$beats"/node-*.exit; do
    peer=${f##*/node-}; peer=${peer%.exit}; peer_code=$(cat "$f") || continue
    [ "$peer" != "$NODE_RANK" ] && [ "${peer_code:-0}" != 0 ] && [ "$(stat -c %Y "$f")" -ge "$started" ] && return 0
  done
  return 1
}
start "$@"
if [ "$NODE_RANK" = "${AWS_BATCH_JOB_MAIN_NODE_INDEX:-0}" ]; then
  while kill -0 "$run" 2>/dev/null; do
    peers
    if [ -n "$lost" ]; then kill -TERM "$run" 2>/dev/null || true; wait "$run" || true; peer_lost; fi
    if [ -z "${ended:-}" ] && failed_peer; then
      say "node $peer exit $peer_code: ending the job"; ended=$peer_code; kill -TERM "$run" 2>/dev/null
    fi
    sleep 1
  done
fi
reap
code=${ended:-$code}
finish
echo "$code" > "$beats/node-$NODE_RANK.exit"
kill "$beating" 2>/dev/null || true
if [ "$code" != 0 ] && [ -z "${ended:-}" ] && [ "$NODE_RANK" = "${AWS_BATCH_JOB_MAIN_NODE_INDEX:-0}" ]; then
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
