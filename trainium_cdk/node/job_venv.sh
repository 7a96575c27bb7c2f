#!/bin/bash
# trainium-cdk job_venv: the job's own Python packages, a requirements.txt in the directory the job starts in
# (TRN_WORKDIR, else here), where no image carries them (ParallelCluster, the development instance: the node's Neuron
# venv is read-only to users). A virtual environment in the user's home (shared with every compute node on
# ParallelCluster; TRN_VENV_ROOT for another folder), layered on the Python in use: its own site-packages first, then
# the node's (a .pth file), so torch and torch-neuronx stay the node's and pip installs only what they lack. One per
# requirements.txt content and node Python (a digest names it), built once, before the nodes start, under a lock, and
# reused; its torchrun runs its Python. TRN_JOB_VENV=off: none.
job_venv() {
  local req="${TRN_WORKDIR:-$PWD}/requirements.txt" root="${TRN_VENV_ROOT:-$HOME/.cache/trainium-cdk/venvs}" py paths venv site waited=0
  [[ -f "$req" && "${TRN_JOB_VENV:-on}" != off ]] || return 0
  py="$(command -v python3)"
  paths="$("$py" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))')"
  venv="$root/$( { cat "$req"; echo "$py"; echo "$paths"; } | sha256sum | cut -c1-16)"
  mkdir -p "$root"
  until [[ -e "$venv/.complete" ]] || mkdir "$venv.lock" 2>/dev/null; do
    (( waited++ < 900 )) || { echo "trainium-cdk: $venv.lock held for 30 minutes: remove it" >&2; return 1; }
    sleep 2
  done
  if [[ ! -e "$venv/.complete" ]]; then
    echo "trainium-cdk: installing $req into $venv (once for this content)" >&2
    rm -rf "$venv"
    if "$py" -m venv --without-pip "$venv" \
        && site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
        && printf '%s\n' "$paths" > "$site/trainium-node-packages.pth" \
        && printf '#!/bin/sh\nexec "%s" -m torch.distributed.run "$@"\n' "$venv/bin/python" > "$venv/bin/torchrun" \
        && chmod 755 "$venv/bin/torchrun" \
        && "$py" -m pip --python "$venv/bin/python" install --no-input --disable-pip-version-check -r "$req" >&2; then
      touch "$venv/.complete"
    else
      rmdir "$venv.lock"
      echo "trainium-cdk: cannot install $req (above)" >&2
      return 1
    fi
    rmdir "$venv.lock"
  fi
  export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
  echo "trainium-cdk: the job's packages from $req: $venv" >&2
}
