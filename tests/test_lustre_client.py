"""The one Lustre client script Batch hosts and the dev instance run (trainium_cdk/node/lustre_client.sh):
executed here with the values its header carries, stand-ins for what a host has (modinfo, mountpoint, mount,
the package manager) and a temporary fstab (LUSTRE_FSTAB)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import node_files
from trainium_cdk.errors import ConfigError
from trainium_cdk.lustre_client import SCRIPT, mount_script

FSTAB_OPTIONS = (
    "defaults,relatime,flock,_netdev,x-systemd.automount,"
    "x-systemd.requires=network-online.target,x-systemd.after=network-online.target"
)

STANDINS = {
    # The client module is missing until the package manager installs it.
    "modinfo": '[ -e "$STATE/installed" ]',
    "dnf": 'echo "dnf $*" >> "$STATE/calls"; touch "$STATE/installed"',
    "mountpoint": '[ -e "$STATE/mounted" ]',
    "mount": 'echo "mount $*" >> "$STATE/calls"; touch "$STATE/mounted"',
}


def _run(script: str, state: Path, bindir: Path, fstab: Path) -> None:
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "STATE": str(state), "LUSTRE_FSTAB": str(fstab)}
    result = node_files.run(SCRIPT, node_files.split(script, SCRIPT), env)
    assert result.returncode == 0, result.stderr


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
    script = mount_script("amazon-linux", "fs-1.fsx.us-west-2.amazonaws.com", "abcd", mount_point=str(mount_point))
    fstab.write_text("")
    _run(script, state, bindir, fstab)
    _run(script, state, bindir, fstab)
    assert fstab.read_text().splitlines() == [
        f"fs-1.fsx.us-west-2.amazonaws.com@tcp:/abcd {mount_point} lustre {FSTAB_OPTIONS} 0 0"
    ]
    assert (state / "calls").read_text().splitlines() == ["dnf install -y lustre-client", f"mount {mount_point}"]
    assert mount_point.is_dir() and "flock" in FSTAB_OPTIONS


def test_ubuntu_takes_the_fsx_repository_and_amazon_linux_dnf(host):
    """Which install each family runs on a host without the client. The Ubuntu run stops at its key (the gpg
    stand-in fails): it writes nothing of this machine's /etc/apt, which tests may run as root beside."""
    tmp, bindir, state = host
    for name, code in (("wget", 0), ("gpg", 1)):
        (bindir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> "$STATE/calls"\nexit {code}\n')
        (bindir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "STATE": str(state),
           "LUSTRE_FSTAB": str(tmp / "fstab")}
    (tmp / "fstab").write_text("")
    for family, call in (("ubuntu", "wget -qO - https://fsx-lustre-client-repo-public-keys"), ("amazon-linux", "dnf install")):
        (state / "calls").unlink(missing_ok=True)
        values = node_files.split(mount_script(family, "dns", "mnt", mount_point=str(tmp / "fsx")), SCRIPT)
        result = node_files.run(SCRIPT, {**values, "LUSTRE_FSTAB": str(tmp / "fstab")}, env)
        calls = (state / "calls").read_text()
        assert call in calls and ("dnf" in calls) == (family == "amazon-linux"), family
        assert result.returncode == (1 if family == "ubuntu" else 0), result.stderr
    assert 'apt-get install -y "lustre-client-modules-$(uname -r)"' in (node_files.node.FOLDER / SCRIPT).read_text()


def test_an_unknown_family_is_refused_by_name():
    with pytest.raises(ConfigError, match="family"):
        mount_script("windows", "dns", "mnt")


GENERATOR = Path("/usr/lib/systemd/system-generators/systemd-fstab-generator")


@pytest.mark.skipif(not GENERATOR.exists() or not shutil.which("systemd-analyze"),
                    reason="needs Debian's systemd (apt-get install systemd): its fstab generator and systemd-analyze")
def test_systemd_accepts_the_mount_and_starts_it_at_every_boot(tmp_path):
    """systemd's own fstab generator turns the line into units, and systemd-analyze verifies them. The old
    x-systemd.requires=network.service gave `Unit network.service not found` (no such unit on Ubuntu
    24.04 or AL2023), so /fsx did not come back after a stop/start or a reboot."""
    script = mount_script("ubuntu", "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", "abcdefgh")
    fstab = tmp_path / "fstab"
    fstab.write_text("# an older line of ours is replaced\nold@tcp:/x /fsx lustre defaults,_netdev 0 0\n")
    # The script's fstab lines alone (the mount point exists and is mounted: stand-ins that do nothing).
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("modinfo", "mkdir", "mountpoint"):
        (bindir / name).write_text("#!/bin/sh\nexit 0\n")
        (bindir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "LUSTRE_FSTAB": str(fstab)}
    result = node_files.run(SCRIPT, node_files.split(script, SCRIPT), env)
    assert result.returncode == 0, result.stderr
    assert [line for line in fstab.read_text().splitlines() if " /fsx lustre " in line] == [
        f"fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com@tcp:/abcdefgh /fsx lustre {FSTAB_OPTIONS} 0 0"
    ]
    units = tmp_path / "units"
    units.mkdir()
    env = {**os.environ, "SYSTEMD_FSTAB": str(fstab), "SYSTEMD_LOG_LEVEL": "warning"}
    subprocess.run([str(GENERATOR), str(units), str(units), str(units)], env=env, check=True, capture_output=True)
    mount = (units / "fsx.mount").read_text()
    assert "After=network-online.target" in mount and "Requires=network-online.target" in mount
    assert "network.service" not in mount
    # x-systemd.automount: the automount unit is pulled in by remote-fs.target at every boot.
    assert (units / "remote-fs.target.requires" / "fsx.automount").exists()
    verify = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "fsx.mount", "fsx.automount"],
        cwd=units, env={**env, "SYSTEMD_UNIT_PATH": f"{units}:"}, capture_output=True, text=True, check=False,
    )
    problems = [line for line in (verify.stdout + verify.stderr).splitlines() if "fsx." in line]
    assert verify.returncode == 0 and not problems, verify.stdout + verify.stderr
