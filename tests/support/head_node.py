"""The ParallelCluster head node's setup (trainium_cdk/node/neuron_setup.sh), run here in a folder that
stands for its root.

The head node runs the script at configure time and again from OnNodeUpdated after every cluster update. The
script runs as it is, with the arguments the cluster configuration gives the head node; what cannot run here is
replaced as listed in :data:`STAND_INS` and :data:`PATHS`, and nowhere else. The group database is the edge:
``groupadd``/``usermod`` record their calls and ``getent`` answers with ``STANDIN_GID`` once the group exists;
``setfacl`` writes the default ACL itself (the kernel of this machine then applies it, as Lustre's would).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import config_with
from trainium_cdk.app.config import Config
from trainium_cdk.app.dist.parallelcluster import fetched_digests, fetched_files
from trainium_cdk.app.parallelcluster.cluster_config import (
    SCRIPTS_BUCKET,
    SCRIPTS_PREFIX,
    cluster_configuration,
    placeholder,
    placeholder_ids,
    setup_args,
)
from trainium_cdk.facts.names import CACHE_GROUP
from trainium_cdk.facts.versions import XLA_TRACK
from trainium_cdk.parallelcluster.parts import SETUP_SCRIPT

# setfacl -d -m u::rwx,g::rwx,o::rx PATH...: the default ACL of each directory, as the kernel reads it
# (system.posix_acl_default: version 2, then tag, permissions, id per entry; acl(5), linux/posix_acl_xattr.h).
_SETFACL = f"""#!{sys.executable}
import os, struct, sys
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write("setfacl " + " ".join(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
assert args[:2] == ["-d", "-m"], args
tags = {{"u": 0x01, "g": 0x04, "o": 0x20}}
perms = lambda text: sum(bit for bit, char in ((4, "r"), (2, "w"), (1, "x")) if char in text)
entries = [entry.split(":") for entry in args[2].split(",")]
blob = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tags[t], perms(p), 0xFFFFFFFF) for t, _, p in entries)
try:
    for path in args[3:]:
        os.setxattr(path, "system.posix_acl_default", blob)
except OSError as error:
    sys.exit(f"setfacl: {{error}}")
"""
# Programs the head-node branch calls that would touch this machine or the network: each records its
# arguments, one line per call, in $STANDIN_LOG ("<program> <args>").
STAND_INS = {
    # root -> ubuntu: runs the command as it is (the test runs as one user).
    "sudo": '[ "$1" = -u ] && shift 2\necho "sudo $*" >> "$STANDIN_LOG"\nexec "$@"\n',
    "apt-get": 'echo "apt-get $*" >> "$STANDIN_LOG"\n',
    # s3 cp s3://BUCKET/KEY DEST: DEST holds $STANDIN_S3/BUCKET/KEY (what the scripts bucket holds: HeadNode.bucket).
    "aws": 'echo "aws $*" >> "$STANDIN_LOG"\neval "dest=\\${$#}"\neval "src=\\${$(($# - 1))}"\n'
           'cp "$STANDIN_S3/${src#s3://}" "$dest"\n',
    # python3 -m venv DIR: DIR/bin/python is the pip stand-in below (the only python3 call on a head node).
    "python3": (
        'echo "python3 $*" >> "$STANDIN_LOG"\n'
        '[ "$1 $2" = "-m venv" ] || exit 3\n'
        'mkdir -p "$3/bin" && echo "home = /usr/bin" > "$3/pyvenv.cfg"\n'
        'cp "$STANDIN_PIP" "$3/bin/python" && echo "# activate stand-in" > "$3/bin/activate"\n'
    ),
    "groupadd": 'echo "groupadd $*" >> "$STANDIN_LOG"\ntouch "$STANDIN_GROUP"\n',
    "getent": f'[ "$*" = "group {CACHE_GROUP}" ] || exit 3\n[ -e "$STANDIN_GROUP" ] || exit 2\n'
              f'echo "{CACHE_GROUP}:x:$STANDIN_GID:ubuntu"\n',
    "usermod": 'echo "usermod $*" >> "$STANDIN_LOG"\n',
}
# DIR/bin/python -m pip install [OPTION...] SPEC...: each spec not yet there goes to DIR/installed.txt (the venv's
# content; options and --index-url's value are not specs); exits 1 when $STANDIN_PIP_FAILS is set (a failed download).
# An install from PyPI (--index-url https://pypi.org/simple) also adds $STANDIN_PIP_FROM_PYPI when set: a dependency
# that the public index resolved. DIR/bin/python -m pip list --format=freeze: the pinned specs installed (NAME==VERSION).
PIP = (
    'echo "$0 $*" >> "$STANDIN_LOG"\n'
    'venv="$(dirname "$0")/.."\n'
    'if [ "$1 $2 $3 $4" = "-m pip list --format=freeze" ]; then grep "==" "$venv/installed.txt"; exit 0; fi\n'
    '[ "$1 $2 $3" = "-m pip install" ] || exit 3\n'
    '[ -z "${STANDIN_PIP_FAILS:-}" ] || exit 1\n'
    # An install from a named index reads no pip configuration that could add another (PIP_CONFIG_FILE=/dev/null).
    'case " $* " in *" --index-url "*) [ "${PIP_CONFIG_FILE:-}" = /dev/null ] && [ -z "${PIP_EXTRA_INDEX_URL+set}" ] '
    '|| { echo "pip stand-in: configuration read" >&2; exit 4; } ;; esac\n'
    'shift 3\nindex=""\n'
    'while [ $# -gt 0 ]; do\n'
    '  case "$1" in --index-url) index="$2"; shift 2; continue ;; -*) shift; continue ;; esac\n'
    '  grep -qxF "$1" "$venv/installed.txt" 2>/dev/null || echo "$1" >> "$venv/installed.txt"\n'
    '  shift\n'
    'done\n'
    'if [ "$index" = https://pypi.org/simple ] && [ -n "${STANDIN_PIP_FROM_PYPI:-}" ]; then\n'
    '  echo "$STANDIN_PIP_FROM_PYPI" >> "$venv/installed.txt"\n'
    'fi\n'
)
# Absolute paths of the head-node branch, each to a folder of the test's (the arguments' /home paths too).
PATHS = {
    "/etc/parallelcluster/cfnconfig": "etc/cfnconfig",
    "/etc/os-release": "etc/os-release",
    "/etc/neuron-sdk-version": "etc/neuron-sdk-version",
    "/fsx/": "fsx/",
    "/opt/slurm/": "opt/slurm/",
    "/home/": "home/",
}
CONFIG = config_with(backends=["parallelcluster"])
OS_USER_UID = 1000  # the ubuntu user of Ubuntu's images
NEW_PINS = dataclasses.replace(
    XLA_TRACK, neuron_release="2.29.2", pip_packages={**XLA_TRACK.pip_packages, "neuronx-cc": "2.24.9999.0"}
)


@dataclasses.dataclass
class HeadNode:
    """``root`` stands for the head node's /; ``gid``: the group the system gives CACHE_GROUP; ``config``: the
    deployment's (its teams give the head node their Slurm accounts to apply)."""

    root: Path
    gid: int = dataclasses.field(default_factory=os.getgid)
    config: Config = CONFIG

    def __post_init__(self) -> None:
        script = SETUP_SCRIPT.read_text()
        for old, new in PATHS.items():
            assert old in script, old
            script = script.replace(old, f"{self.root}/{new}")
        self.script = self.root / "neuron_setup.sh"
        self.script.write_text(script)
        (self.root / "etc").mkdir()
        (self.root / "etc" / "cfnconfig").write_text("cfn_node_type=HeadNode\n")
        (self.root / "etc" / "os-release").write_text('PRETTY_NAME="Ubuntu 24.04 LTS"\nVERSION_CODENAME=noble\n')
        # /home/ubuntu as Ubuntu creates it (750, since 21.04), the ubuntu user's when the test may say so.
        self.ubuntu = self.root / "home" / "ubuntu"
        self.ubuntu.mkdir(parents=True)
        self.ubuntu.chmod(0o750)
        if os.geteuid() == 0:
            os.chown(self.ubuntu, OS_USER_UID, OS_USER_UID)
        self.home = self.root / "home" / "trainium-cdk"  # the cluster's directory: the venvs, the scripts
        self.cache = self.root / "fsx" / "neuron-cache"
        bin_dir = self.root / "bin"
        bin_dir.mkdir()
        for name, body in {**STAND_INS, "pip": PIP}.items():
            (bin_dir / name).write_text("#!/bin/sh\n" + body)
            (bin_dir / name).chmod(0o755)
        (bin_dir / "setfacl").write_text(_SETFACL)
        (bin_dir / "setfacl").chmod(0o755)
        self.log = self.root / "calls.log"
        # The scripts bucket as a user uploads dist/parallelcluster/ to it (the README's pcluster steps).
        self.s3 = self.root / "s3"
        self.bucket = self.s3 / placeholder(SCRIPTS_BUCKET) / SCRIPTS_PREFIX
        self.bucket.mkdir(parents=True)
        for name, text in fetched_files(self.config).items():
            (self.bucket / name).write_text(text)
        self.env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STANDIN_LOG": str(self.log),
                    "STANDIN_PIP": str(bin_dir / "pip"), "STANDIN_GID": str(self.gid),
                    "STANDIN_GROUP": str(self.root / "group-made"), "LANG": "C.UTF-8",
                    "STANDIN_S3": str(self.s3)}

    @property
    def link(self) -> Path:
        return self.home / "neuron-venv"

    def args(self, track=XLA_TRACK) -> list[str]:
        """The head node's OnNodeUpdated arguments (configuration.render_configuration's) for ``track``."""
        ids = placeholder_ids(self.config, fetched_digests(self.config))
        args = setup_args(ids.batch_scripts, track, ids.prologs, cache_group=CACHE_GROUP)
        # A config with teams: the accounts' file, as the cluster configuration gives it to the head node.
        rendered = cluster_configuration(self.config, ids)["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]
        if "--accounting" in rendered:
            at = rendered.index("--accounting")
            args += rendered[at:at + 2]
        return [a.replace("/home/", f"{self.root}/home/") for a in args]

    def run(self, track=XLA_TRACK, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
        """The head node's OnNodeUpdated (also what its OnNodeConfigured runs): the script with the
        arguments of the cluster configuration; returns the run and the calls it made."""
        self.log.write_text("")
        proc = subprocess.run(["bash", str(self.script), *self.args(track)], env={**self.env, **env},
                              capture_output=True, text=True, timeout=60, check=False)
        return proc, self.log.read_text().splitlines()
