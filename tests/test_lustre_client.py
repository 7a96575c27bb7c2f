"""The one Lustre client script Batch hosts and the dev instance run: executed here with stand-ins for
what a host has (modinfo, mountpoint, mount, the package manager) and a temporary fstab."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from trainium_cdk.errors import ConfigError
from trainium_cdk.lustre_client import FSTAB_OPTIONS, mount_commands

STANDINS = {
    # The client module is missing until the package manager installs it.
    "modinfo": '[ -e "$STATE/installed" ]',
    "dnf": 'echo "dnf $*" >> "$STATE/calls"; touch "$STATE/installed"',
    "mountpoint": '[ -e "$STATE/mounted" ]',
    "mount": 'echo "mount $*" >> "$STATE/calls"; touch "$STATE/mounted"',
}


def _run(script: str, state: Path, bindir: Path) -> None:
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "STATE": str(state)}
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, check=True)


@pytest.fixture
def host(tmp_path):
    bindir, state = tmp_path / "bin", tmp_path / "state"
    bindir.mkdir(), state.mkdir()
    for name, body in STANDINS.items():
        (bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / name).chmod(0o755)
    return tmp_path, bindir, state


def test_mounts_once_and_a_second_run_changes_nothing(host):
    tmp, bindir, state = host
    fstab, mount_point = tmp / "fstab", tmp / "fsx"
    script = "\n".join(mount_commands("amazon-linux", "fs-1.fsx.us-west-2.amazonaws.com", "abcd",
                                      mount_point=str(mount_point)))
    script = script.replace("/etc/fstab", str(fstab))  # the one host file substituted
    fstab.write_text("")
    _run(script, state, bindir)
    _run(script, state, bindir)
    assert fstab.read_text().splitlines() == [
        f"fs-1.fsx.us-west-2.amazonaws.com@tcp:/abcd {mount_point} lustre {FSTAB_OPTIONS} 0 0"
    ]
    assert (state / "calls").read_text().splitlines() == ["dnf install -y lustre-client", f"mount {mount_point}"]
    assert mount_point.is_dir() and "flock" in FSTAB_OPTIONS


def test_ubuntu_installs_the_modules_of_the_running_kernel():
    text = "\n".join(mount_commands("ubuntu", "dns", "mnt"))
    assert "lustre-client-modules-$(uname -r)" in text and "dnf" not in text


def test_an_unknown_family_is_refused_by_name():
    with pytest.raises(ConfigError, match="family"):
        mount_commands("windows", "dns", "mnt")
