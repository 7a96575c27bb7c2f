#!/bin/bash
# trainium-cdk: ParallelCluster OnNodeConfigured action for Trainium clusters (Ubuntu 24.04).
#
# Every version comes from the arguments (trainium_cdk/facts/versions.py renders them into the cluster
# configuration), so this file never changes when the Neuron SDK pin does:
#   --image              build a ParallelCluster image (`pcluster build-image`, trainium_cdk/parallelcluster/
#                        image.py embeds this script in its component): the compute nodes' Neuron packages only
#   --sdk VERSION        Neuron SDK release, for the log and /etc/neuron-sdk-version
#   --apt NAME=VERSION   a Neuron Debian package, pinned (repeatable)
#   --pip NAME==VERSION  a package of Neuron's pip repository, pinned exactly (repeatable): installed from that
#                        repository alone (install_neuron_pip, below)
#   --venv LINK          the stable link to the PyTorch Neuron virtual environment of the pins (in the cluster's
#                        directory on /home, which the head node shares): the venv itself is
#                        LINK-<release>-<hash of the pip pins>, owned by root, read-only to users
#   --sbatch NAME=SHA256@S3URL
#                        a batch script the head node copies to ~ubuntu/trainium/NAME and, for every user, to
#                        $(dirname LINK)/trainium/NAME (repeatable)
#   --cache-group NAME   the group that shares the compile cache /fsx/neuron-cache (head node; ubuntu joins it)
#   --prolog NAME=SHA256@S3URL
#                        a Slurm prolog the head node installs in the shared prolog.d (repeatable)
#   --accounting SHA256@S3URL
#                        head node, a cluster with teams: the teams' Slurm accounts, applied with sacctmgr once slurmdbd
#                        answers (the file: trainium_cdk/parallelcluster/accounting.py's sacctmgr commands)
#   --boot-check NAME    compute nodes: run that prolog (the node health check, trainium_cdk/parallelcluster/
#                        health.py) once, with its on-node collective, last: a failure fails the node's bootstrap
#   --metrics-program SHA256@S3URL, --metrics-namespace NS, --metrics-deployment NAME
#                        compute nodes: neuron-monitor into CloudWatch (trainium_cdk/neuron_metrics.py)
#   --prometheus-program SHA256@S3URL, --prometheus-remote-write URL, --prometheus-deployment NAME,
#   --prometheus-release SHA256@URL (repeatable), --prometheus-client VERSION
#                        compute nodes: the Prometheus-format exporters and agent (trainium_cdk/node/
#                        prometheus_node.py), from the pinned releases, into the workspace at URL
#
# Compute nodes get the driver, runtime, collectives and tools, unless their image already has them at the
# pinned versions with that driver loaded (an image built with --image: then DKMS built the driver once, at
# image build, and scale-up installs nothing); the head node builds the shared venv (one build for the
# whole cluster: /home is NFS-exported to every node). ParallelCluster installs EFA.
#
# Every file this script fetches from S3 (the batch scripts, the prolog, the metrics program) carries the sha256
# of its content, known at synth (SHA256@S3URL): it is checked before the file is installed or run, and a
# mismatch fails the script (non-zero: ParallelCluster fails the node's bootstrap). This script itself is fetched
# and run by ParallelCluster, which checks nothing (README: "What the Slurm nodes run as root").
set -euo pipefail
umask 022   # what the head node writes for every user (venv, batch scripts) is readable by every user

SDK="" VENV="/home/trainium-cdk/neuron-venv" IMAGE=0 CACHE_GROUP=""
# Where versions before issue 32 kept the venv: in the ubuntu user's home, which Ubuntu creates 750 (since 21.04),
# so that no other user's job could read it. Its link is pointed at the current venv (a job queued before the
# update runs the batch script sbatch copied then, which activates this link) and its venvs go once unused.
LEGACY_VENV="/home/ubuntu/neuron-venv"
OS_USER_SCRIPTS="/home/ubuntu/trainium"   # the OS user's copy of the batch scripts (`trn submit`, the README)
COMPILE_CACHE="/fsx/neuron-cache"
PIP_INDEX="https://pip.repos.neuron.amazonaws.com"   # Neuron's pip repository: the --pip packages, nothing else
PUBLIC_INDEX="https://pypi.org/simple"                 # everything else: their dependencies (torch, torch-xla, ...)
VENV_COMPLETE=".trainium-complete"   # written last: a venv without it is a build that did not end
APT=() PIP=() SBATCH=() PROLOG=() BOOT_CHECK="" ACCOUNTING=""
# The prologs' folder: /opt/slurm is the head node's, shared with every compute node (another only under stand-ins).
PROLOG_DIR="${TRN_PROLOG_DIR:-/opt/slurm/etc/scripts/prolog.d}"
METRICS_PROGRAM="" METRICS_NAMESPACE="" METRICS_DEPLOYMENT=""
PROMETHEUS_PROGRAM="" PROMETHEUS_REMOTE_WRITE="" PROMETHEUS_DEPLOYMENT="" PROMETHEUS_CLIENT="" PROMETHEUS_RELEASES=()
while (($#)); do
  case "$1" in
    --image) IMAGE=1; shift ;;
    --sdk) SDK="$2"; shift 2 ;;
    --apt) APT+=("$2"); shift 2 ;;
    --pip) PIP+=("$2"); shift 2 ;;
    --venv) VENV="$2"; shift 2 ;;
    --sbatch) SBATCH+=("$2"); shift 2 ;;
    --cache-group) CACHE_GROUP="$2"; shift 2 ;;
    --prolog) PROLOG+=("$2"); shift 2 ;;
    --boot-check) BOOT_CHECK="$2"; shift 2 ;;
    --accounting) ACCOUNTING="$2"; shift 2 ;;
    --metrics-program) METRICS_PROGRAM="$2"; shift 2 ;;
    --metrics-namespace) METRICS_NAMESPACE="$2"; shift 2 ;;
    --metrics-deployment) METRICS_DEPLOYMENT="$2"; shift 2 ;;
    --prometheus-program) PROMETHEUS_PROGRAM="$2"; shift 2 ;;
    --prometheus-remote-write) PROMETHEUS_REMOTE_WRITE="$2"; shift 2 ;;
    --prometheus-deployment) PROMETHEUS_DEPLOYMENT="$2"; shift 2 ;;
    --prometheus-release) PROMETHEUS_RELEASES+=("$2"); shift 2 ;;
    --prometheus-client) PROMETHEUS_CLIENT="$2"; shift 2 ;;
    *) echo "neuron_setup: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ((IMAGE)); then
  cfn_node_type="Image"   # an image build: no cluster, no node of its own yet
else
  # shellcheck disable=SC1091
  . /etc/parallelcluster/cfnconfig   # cfn_node_type: HeadNode or ComputeFleet
fi
# shellcheck disable=SC1091
. /etc/os-release
echo "neuron_setup: Neuron SDK ${SDK} on ${cfn_node_type} (${PRETTY_NAME})"
export DEBIAN_FRONTEND=noninteractive
DRIVER=""   # the pinned aws-neuronx-dkms version: the driver a node must have loaded
for spec in "${APT[@]}"; do
  if [[ "${spec%%=*}" == "aws-neuronx-dkms" ]]; then DRIVER="${spec#*=}"; fi
done
APT_FRESH=""

# fetch_checked SHA256@S3URL DEST MODE: DEST holds the object, with MODE, only if its sha256 is SHA256; otherwise
# nothing is written there and the script stops (the Batch node's user data checks its setup the same way:
# trainium_cdk/node/batch_bootstrap.sh). The object is fetched outside DEST's folder: Slurm runs whatever is in
# prolog.d, a partial or unchecked file included.
fetch_checked() {
  local spec="$1" dest="$2" mode="$3" digest url part
  digest="${spec%%@*}" url="${spec#*@}"
  if [[ ! "${digest}" =~ ^[0-9a-f]{64}$ || "${url}" != s3://* ]]; then
    echo "neuron_setup: refused ${spec}: not SHA256@s3://bucket/key" >&2
    exit 1
  fi
  part="$(mktemp)"
  aws s3 cp --only-show-errors "${url}" "${part}"
  if ! echo "${digest}  ${part}" | sha256sum --check --status; then
    rm -f "${part}"
    echo "neuron_setup: refused ${url}: its sha256 is not ${digest} (it changed after synth)" >&2
    exit 1
  fi
  install -m "${mode}" "${part}" "${dest}"
  rm -f "${part}"
}

add_neuron_apt_repo() {
  install -d -m 0755 /etc/apt/keyrings
  curl -fsSL https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB \
    | gpg --dearmor --yes -o /etc/apt/keyrings/neuron.gpg
  echo "deb [signed-by=/etc/apt/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com ${VERSION_CODENAME} main" \
    > /etc/apt/sources.list.d/neuron.list
  apt-get update -y
  APT_FRESH=1
}

# The one home of the Neuron host install: compute nodes at boot, and images at build (--image).
install_neuron_packages() {
  add_neuron_apt_repo
  apt-get install -y "linux-headers-$(uname -r)" git
  # Debian revisions follow the version (1.2.3.0-<hash>): pin the version, accept the revision.
  # Installing aws-neuronx-dkms builds the driver for the running kernel (DKMS): the slow step of a boot.
  local pinned=() spec
  for spec in "${APT[@]}"; do pinned+=("${spec}*"); done
  apt-get install -y --allow-downgrades --allow-change-held-packages "${pinned[@]}"
  apt-mark hold "${APT[@]%%=*}"
  # shellcheck disable=SC2016  # $PATH is expanded by each login shell
  echo 'export PATH=/opt/aws/neuron/bin:$PATH' > /etc/profile.d/neuron.sh
}

# True when every pinned package is installed at its version and the loaded driver is the pinned one.
neuron_packages_present() {
  local spec installed loaded=""
  for spec in "${APT[@]}"; do
    installed="$(dpkg-query -W -f='${Version}' "${spec%%=*}" 2>/dev/null || true)"
    [[ "${installed%%-*}" == "${spec#*=}" ]] || return 1
  done
  # udev loads the driver when the Neuron devices appear; load it if it has not been yet.
  [[ -e /sys/module/neuron ]] || modprobe neuron 2>/dev/null || true
  if [[ -r /sys/module/neuron/version ]]; then read -r loaded < /sys/module/neuron/version || true; fi
  [[ -n "${DRIVER}" && "${loaded}" == "${DRIVER}" ]]
}

# mv -T renames the new link over the old one in one rename(2) (without -T, mv would move it into the old venv).
relink() {
  ln -sfn "$1" "$2.new.$$"
  mv -T "$2.new.$$" "$2"
}

# The head node's shared venv: one directory per set of pins, beside the link VENV that the batch scripts
# activate. Jobs on every node import from their venv over NFS while the head node runs this again after
# an update (OnNodeUpdated), so a venv that may be in use is never modified: a new one is built beside
# it, then the link is replaced in one rename(2), and the old venv stays for the jobs that run from it
# (or are requeued: they resolve the link again). The same pins again find their venv and change nothing.
# Root builds it and owns it: every user's job reads it, none can change it. Each job marks the venv it
# started from with a file of its own in <venv>/.jobs, sticky and writable by all as /tmp is: a user can add
# a marker, never remove or replace another user's.
install_shared_venv() {
  local requirements=("${PIP[@]}" torchvision) pins target link
  pins="$(printf '%s\n' "${PIP_INDEX}" "${PUBLIC_INDEX}" "${requirements[@]}" | LC_ALL=C sort | sha256sum | cut -c1-12)"
  target="${VENV}-${SDK}-${pins}"
  link="$(readlink "${VENV}" || true)"
  install -d -m 0755 "$(dirname "${VENV}")"
  if [[ -e "${target}/${VENV_COMPLETE}" && "${link}" == "${target}" ]]; then
    echo "neuron_setup: ${VENV} -> ${target}, the venv of these pins: nothing to change"
  else
    if [[ ! -e "${target}/${VENV_COMPLETE}" ]]; then
      rm -rf "${target}"   # a build that did not end: never linked, so no job uses it
      apt-get update -y
      apt-get install -y python3-venv python3-pip git
      python3 -m venv "${target}"
      "${target}/bin/python" -m pip install --quiet --upgrade pip
      install_neuron_pip "${target}/bin/python" "${requirements[@]}"
      install -d -m 1777 "${target}/.jobs"
      touch "${target}/${VENV_COMPLETE}"
    fi
    relink "${target}" "${VENV}"
    echo "neuron_setup: ${VENV} -> ${target}${link:+ (was ${link}, kept for the jobs that use it)}"
    remove_unused_venvs "${target}"
  fi
  if [[ -L "${LEGACY_VENV}" && "$(readlink "${LEGACY_VENV}")" != "${target}" ]]; then
    relink "${target}" "${LEGACY_VENV}"
    echo "neuron_setup: ${LEGACY_VENV} -> ${target}, for jobs queued before the venv moved to ${VENV}"
  fi
}

# install_neuron_pip PYTHON REQUIREMENT...: the --pip packages from Neuron's repository only, then the requirements from
# PyPI only. pip has no index per package: with --extra-index-url it takes the highest version of a name from either
# index, so a Neuron package name published on PyPI at a higher version would win (dependency confusion; AWS holds
# the names on PyPI with 1.0 placeholders, but nothing in pip relies on that). So first the pinned Neuron packages,
# exact (==, trainium_cdk/facts/versions.py), with Neuron's repository as the only index and --no-deps (their
# dependencies are PyPI's: torch, torch-xla...); then every requirement again with PyPI as the only index: pip
# keeps an installed distribution that meets a requirement (no --upgrade), so the Neuron ones stay and only their
# dependencies are resolved, as one install with both indexes resolved them. Last, no distribution with a Neuron
# name may be other than a pin (a Neuron-only dependency missing from the pins would have come from PyPI): the
# build fails naming it, before the venv is marked complete or linked.
install_neuron_pip() {
  local python="$1" line name version pin listing stray=""
  shift
  # No pip configuration may add an index to either step (an extra-index-url in /etc/pip.conf or the environment
  # would bring the fall-through back): PIP_CONFIG_FILE=/dev/null loads no configuration file (pip's configuration docs).
  env -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null \
    "${python}" -m pip install --quiet --index-url "${PIP_INDEX}" --no-deps "${PIP[@]}"
  env -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null \
    "${python}" -m pip install --quiet --index-url "${PUBLIC_INDEX}" "$@"
  declare -A neuron_pins=()
  for pin in "${PIP[@]}"; do neuron_pins["$(pep503 "${pin%%==*}")"]="${pin#*==}"; done
  listing="$("${python}" -m pip list --format=freeze)"   # a failed listing fails the build (set -e), never passes it
  while IFS= read -r line; do
    name="$(pep503 "${line%%==*}")" version="${line#*==}"
    if [[ -n "${neuron_pins[${name}]+set}" ]]; then
      # A wheel's local label (+build) is not part of the pin (PEP 440: == ignores it).
      [[ "${version%%+*}" == "${neuron_pins[${name}]}" ]] || stray+=" ${line} (pinned ${neuron_pins[${name}]})"
    elif [[ "${name}" == *neuron* || "${name}" == nki || "${name}" == nrtpy ]]; then
      stray+=" ${line} (not pinned: from PyPI)"
    fi
  done <<<"${listing}"
  if [[ -n "${stray}" ]]; then
    echo "neuron_setup: refused the venv: Neuron packages not from the pins:${stray}; pin them in trainium_cdk/facts/versions.py" >&2
    exit 1
  fi
}

# A package name as PEP 503 compares them: lower case, runs of - _ . as one -.
pep503() {
  local name="${1,,}"
  name="${name//_/-}"
  echo "${name//./-}"
}

# An old venv goes once no job Slurm still knows (running, pending, requeued) started from it: every batch
# script leaves its job id in <venv>/.jobs (sbatch.py). Without an answer from squeue nothing is removed.
remove_unused_venvs() {
  local keep="$1" venv marker jobs used
  jobs="$(/opt/slurm/bin/squeue -h -o %A 2>/dev/null)" || return 0
  for venv in "${VENV}"-* "${LEGACY_VENV}"-*; do
    [[ -d "${venv}" && "${venv}" != "${keep}" ]] || continue
    used=""
    for marker in "${venv}"/.jobs/*; do
      [[ -e "${marker}" ]] && grep -qx "${marker##*/}" <<<"${jobs}" && used="${marker##*/}"
    done
    if [[ -z "${used}" ]]; then
      rm -rf "${venv}"
      echo "neuron_setup: removed ${venv}: no job uses it"
    fi
  done
}

# The compile cache (one directory per cache set below it), shared by the group CACHE_GROUP rather than by
# everyone: world-writable (1777, as before issue 32), any user could replace another's compiled graphs.
# setgid: what a job creates below it belongs to the group (subdirectories inherit the bit); the default ACL
# keeps it group-writable whatever the job's umask (a directory's default ACL replaces the umask for what is
# created in it: acl(5)). Slurm runs a job with the groups slurmctld, on this head node, resolves for its user
# (slurm.conf LaunchParameters: send_gids is the default), so membership here is what counts on every node.
CACHE_ACL="u::rwx,g::rwx,o::rx"
share_compile_cache() {
  local gid
  getent group "${CACHE_GROUP}" >/dev/null || groupadd --system "${CACHE_GROUP}"
  gid="$(getent group "${CACHE_GROUP}" | cut -d: -f3)"
  usermod -aG "${CACHE_GROUP}" ubuntu
  command -v setfacl >/dev/null || { apt-get update -y && apt-get install -y acl; }
  install -d "${COMPILE_CACHE}"
  if [[ "$(stat -c %g "${COMPILE_CACHE}")" != "${gid}" ]]; then
    # A cache of an older version (1777, each job's directories its own user's) or of another head node's group:
    # the group takes over what is in it, once.
    echo "neuron_setup: ${COMPILE_CACHE} passes to group ${CACHE_GROUP} (${gid})"
    chgrp -R "${gid}" "${COMPILE_CACHE}"
    chmod -R g+rwX,o-w "${COMPILE_CACHE}"
    find "${COMPILE_CACHE}" -type d -exec chmod g+s,-t {} +
    find "${COMPILE_CACHE}" -mindepth 1 -type d -exec setfacl -d -m "${CACHE_ACL}" {} + || true
  fi
  chmod 2775 "${COMPILE_CACHE}"
  # Lustre enforces POSIX ACLs where the file system enables them; elsewhere group write rests on the umask.
  setfacl -d -m "${CACHE_ACL}" "${COMPILE_CACHE}" \
    || echo "neuron_setup: no default ACL on ${COMPILE_CACHE}: a job's umask decides whether its group may write" >&2
}

# The teams' Slurm accounts (--accounting): a file of sacctmgr commands, one a line, its words separated by tabs. On a
# cluster with SlurmSettings.Database, ParallelCluster starts slurmdbd and adds the cluster to its database before the
# head node's custom actions; the commands wait for it to answer. Run again after every update, they change what
# differs: an `add` of what exists answers "Nothing new added" (exit 1), which is done already; any other failure
# fails the head node's setup (the cluster's creation or update says so).
SACCTMGR="/opt/slurm/bin/sacctmgr"
ACCOUNTING_WAIT_S="${TRN_ACCOUNTING_WAIT_S:-300}"
apply_accounting() {
  local commands said rc waited=0 words=()
  commands="$(mktemp)"
  fetch_checked "${ACCOUNTING}" "${commands}" 0600
  until "${SACCTMGR}" --noheader list cluster >/dev/null 2>&1; do
    if ((waited >= ACCOUNTING_WAIT_S)); then
      echo "neuron_setup: slurmdbd did not answer in ${ACCOUNTING_WAIT_S}s: the teams have no Slurm accounts" >&2
      exit 1
    fi
    sleep 5
    waited=$((waited + 5))
  done
  while IFS=$'\t' read -r -a words; do
    ((${#words[@]})) || continue
    rc=0
    said="$("${SACCTMGR}" -i "${words[@]}" 2>&1)" || rc=$?
    echo "neuron_setup: sacctmgr ${words[*]}: $(tr -s ' \n' ' ' <<<"${said}")"
    if ((rc)) && [[ "${said}" != *"Nothing new added"* ]]; then
      echo "neuron_setup: sacctmgr ${words[*]} failed (exit ${rc}); the teams' accounts are incomplete" >&2
      exit 1
    fi
  done <"${commands}"
  rm -f "${commands}"
}

# neuron_metrics.py needs boto3; an image carries it, so that its nodes run no apt at all.
install_boto3() {
  if ! dpkg-query -W -f='${Status}' python3-boto3 2>/dev/null | grep -q "ok installed"; then
    [[ -n "${APT_FRESH}" ]] || apt-get update -y
    apt-get install -y python3-boto3
  fi
}

# neuron-monitor-prometheus.py (the Prometheus exporters, --prometheus-*) imports prometheus_client; Ubuntu's pip
# refuses system installs (PEP 668), so its Debian package. An image carries it too: its nodes run no apt at all.
install_prometheus_client() {
  if ! dpkg-query -W -f='${Status}' python3-prometheus-client 2>/dev/null | grep -q "ok installed"; then
    [[ -n "${APT_FRESH}" ]] || apt-get update -y
    apt-get install -y python3-prometheus-client
  fi
}

if [[ "${cfn_node_type}" == "Image" ]]; then
  install_neuron_packages
  install_boto3
  install_prometheus_client
  # What the image is for: the driver built for the kernel it boots. Fail the build otherwise.
  built="$(modinfo -k "$(uname -r)" -F version neuron 2>/dev/null || true)"
  if [[ "${built}" != "${DRIVER}" ]]; then
    echo "neuron_setup: the Neuron driver built for $(uname -r) is '${built}', not ${DRIVER}" >&2
    exit 1
  fi
  apt-get clean
elif [[ "${cfn_node_type}" == "ComputeFleet" ]]; then
  if neuron_packages_present; then
    echo "neuron_setup: Neuron driver ${DRIVER} loaded and every package pinned (the image has them): nothing to install"
  else
    install_neuron_packages
  fi

  # Multi-NIC Trn1 nodes: older images map the hostname to the address of another interface in
  # /etc/hosts, and collectives then bind to the wrong one. Map it to the primary address.
  primary_ip="$(hostname -I | awk '{print $1}')"
  short="$(hostname -s)"
  domain="$(dnsdomainname 2>/dev/null || true)"
  sed -i "/[[:space:]]${short}\([[:space:]]\|\.\|$\)/d" /etc/hosts
  echo "${primary_ip} ${domain:+${short}.${domain} }${short}" >> /etc/hosts

  if [[ -n "${METRICS_PROGRAM}" ]]; then
    install_boto3
    install -d -m 0755 /opt/trainium-cdk
    fetch_checked "${METRICS_PROGRAM}" /opt/trainium-cdk/neuron_metrics.py 0644
    /usr/bin/python3 /opt/trainium-cdk/neuron_metrics.py install \
      --namespace "${METRICS_NAMESPACE}" --deployment "${METRICS_DEPLOYMENT}"
  fi
  if [[ -n "${PROMETHEUS_PROGRAM}" ]]; then
    install -d -m 0755 /opt/trainium-cdk
    fetch_checked "${PROMETHEUS_PROGRAM}" /opt/trainium-cdk/prometheus_node.py 0644
    fetch=()
    for release in "${PROMETHEUS_RELEASES[@]}"; do fetch+=(--fetch "${release#*@}" "${release%%@*}"); done
    install_prometheus_client || echo "neuron_setup: python3-prometheus-client not installed (see above)" >&2
    # A node without these metrics still takes work (CloudWatch has its Neuron metrics): report and go on.
    /usr/bin/python3 /opt/trainium-cdk/prometheus_node.py install --remote-write "${PROMETHEUS_REMOTE_WRITE}" \
      --deployment "${PROMETHEUS_DEPLOYMENT}" "${fetch[@]}" --prometheus-client "${PROMETHEUS_CLIENT}" \
      --python /usr/bin/python3 \
      || echo "neuron_setup: the Prometheus exporters were not installed (see above)" >&2
  fi
  # Last, once per instance: the node health check with its on-node collective over every NeuronCore (too long for
  # the per-job prolog). A node that fails it never registers with Slurm: a failed OnNodeConfigured fails the
  # bootstrap, and ParallelCluster terminates the instance and launches another. The node's Slurm name is its
  # hostname (ParallelCluster names compute nodes <queue>-{st,dy}-<compute resource>-<n>).
  if [[ -n "${BOOT_CHECK}" ]]; then
    if [[ -x "${PROLOG_DIR}/${BOOT_CHECK}" ]]; then
      TRN_HEALTH_BOOT=1 SLURMD_NODENAME="$(hostname -s)" "${PROLOG_DIR}/${BOOT_CHECK}"
    else
      echo "neuron_setup: no ${PROLOG_DIR}/${BOOT_CHECK} (a head node of an older version): no first-boot check" >&2
    fi
  fi
else
  install_shared_venv
  if [[ -n "${CACHE_GROUP}" ]]; then share_compile_cache; fi
  # The batch scripts: the OS user's copy (`trn submit` and the README run ~/trainium/...), and one every
  # user reads in the cluster's directory beside the venv.
  shared_scripts="$(dirname "${VENV}")/trainium"
  sudo -u ubuntu mkdir -p "${OS_USER_SCRIPTS}"
  install -d -m 0755 "${shared_scripts}"
  for spec in "${SBATCH[@]}"; do
    fetch_checked "${spec#*=}" "${shared_scripts}/${spec%%=*}" 0644
    # The OS user's copy is the checked file, the user's own (ubuntu writes its ~/trainium).
    sudo -u ubuntu cp "${shared_scripts}/${spec%%=*}" "${OS_USER_SCRIPTS}/${spec%%=*}"
  done
  # /opt/slurm is shared with every compute node; Slurm runs each script of prolog.d before a job.
  install -d -m 0755 "${PROLOG_DIR}"
  for spec in "${PROLOG[@]}"; do
    fetch_checked "${spec#*=}" "${PROLOG_DIR}/${spec%%=*}" 0755
  done
  if [[ -n "${ACCOUNTING}" ]]; then apply_accounting; fi
fi
echo "${SDK}" > /etc/neuron-sdk-version
echo "neuron_setup: done"
