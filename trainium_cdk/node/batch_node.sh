missing=''
[ "$(rpm -q --qf '%{VERSION}' aws-neuronx-dkms 2>/dev/null || true)" = "${NEURON_DRIVER:?}" ] || missing="aws-neuronx-dkms-$NEURON_DRIVER"
rpm -q aws-neuronx-tools >/dev/null 2>&1 || missing="$missing aws-neuronx-tools"
libraries=''
for pin in "aws-neuronx-runtime-lib=${NEURON_RUNTIME:?}" "aws-neuronx-collectives=${NEURON_COLLECTIVES:?}"; do
  version="$(rpm -q --qf '%{VERSION}' "${pin%=*}" 2>/dev/null || true)"
  [ "${version%%_*}" = "${pin#*=}" ] || libraries="$libraries ${pin%=*}-${pin#*=}*"
done
if [ -n "$missing$libraries" ]; then
  # gpgcheck=1 in the repository itself: dnf's own default is off (dnf.conf(5)); the AMI's dnf.conf turns it on,
  # but a packaged driver installed as root must not rest on another file's setting. The key is imported below.
  cat > "${YUM_REPOS_DIR:-/etc/yum.repos.d}/neuron.repo" <<EOF_NEURON_REPO
[neuron]
name=Neuron YUM Repository
baseurl=${NEURON_YUM_REPO:?}
enabled=1
gpgcheck=1
metadata_expire=0
EOF_NEURON_REPO
  rpm --import "$NEURON_YUM_REPO/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"
fi
if [ -n "$missing" ]; then
  # shellcheck disable=SC2086  # $missing: one word per package
  dnf install -y "kernel-devel-uname-r == $(uname -r)" $missing || dnf downgrade -y $missing
  modprobe -r neuron || true
fi
if [ -n "$libraries" ]; then
  set -f  # the version globs are dnf's, not the shell's
  # shellcheck disable=SC2086  # $libraries: one word per package
  dnf install -y $libraries || dnf downgrade -y $libraries
  set +f
fi
modprobe neuron
if [ -n "${EFA_INSTALLER_URL:-}" ]; then
  if [ ! -e /dev/infiniband/uverbs0 ]; then modprobe efa || true; modprobe ib_uverbs || true; fi
  if [ ! -e /dev/infiniband/uverbs0 ]; then
    download=$(mktemp -d)
    cd "$download"
    curl -fsSL -o efa-installer.tar.gz "$EFA_INSTALLER_URL"
    echo "${EFA_INSTALLER_SHA256:?}  efa-installer.tar.gz" | sha256sum --check --strict -
    tar -xf efa-installer.tar.gz
    (cd aws-efa-installer && ./efa_installer.sh -y --minimal)
    modprobe efa
    modprobe ib_uverbs || true
  fi
fi
