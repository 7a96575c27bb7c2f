"""The one Lustre client script Batch hosts and the dev instance run (trainium_cdk/node/lustre_client.sh):
executed here with the values its header carries, stand-ins for what a host has (modinfo, mountpoint, mount,
systemctl, the package manager), a temporary fstab (LUSTRE_FSTAB) and root for what it writes (LUSTRE_CLIENT_ROOT).
The development instance also runs lustre_client_boot.sh: a unit that installs the client for the running kernel
before the mount, so that after a kernel update and a reboot /fsx mounts again (issue 32)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import node_files
from trainium_cdk import node
from trainium_cdk.errors import ConfigError
from trainium_cdk.runtime.lustre_client import BOOT_SCRIPT, SCRIPT, mount_script

UNIT = "trainium-lustre-client.service"
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
    "systemctl": 'echo "systemctl $*" >> "$STATE/calls"',
}


def _run(script: str, state: Path, bindir: Path, fstab: Path, *names: str) -> None:
    """``script`` (the files ``names``, by default the client's alone) as the host runs its user data."""
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "STATE": str(state), "LUSTRE_FSTAB": str(fstab),
           "LUSTRE_CLIENT_ROOT": str(state.parent / "root")}
    names = names or (SCRIPT,)
    values = node_files.split(script, *names)
    with_text = script[script.index(node.HEADER):]  # as user data runs it: the header, then the files
    result = subprocess.run(["bash", "-c", with_text], env={**env, **values}, capture_output=True, text=True,
                            timeout=60, check=False)
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
           "LUSTRE_FSTAB": str(tmp / "fstab"), "LUSTRE_CLIENT_ROOT": str(tmp / "root")}
    (tmp / "fstab").write_text("")
    for family, call in (("ubuntu", "wget -qO - https://fsx-lustre-client-repo-public-keys"), ("amazon-linux", "dnf install")):
        (state / "calls").unlink(missing_ok=True)
        values = node_files.split(mount_script(family, "dns", "mnt", mount_point=str(tmp / "fsx")), SCRIPT)
        result = node_files.run(SCRIPT, {**values, "LUSTRE_FSTAB": str(tmp / "fstab")}, env)
        calls = (state / "calls").read_text()
        assert call in calls and ("dnf" in calls) == (family == "amazon-linux"), family
        assert result.returncode == (1 if family == "ubuntu" else 0), result.stderr
    assert '"lustre-client-modules-$(uname -r)"' in (node_files.node.FOLDER / SCRIPT).read_text()


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
    script = mount_script("ubuntu", "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", "abcdefgh", at_boot=True)
    fstab = tmp_path / "fstab"
    fstab.write_text("# an older line of ours is replaced\nold@tcp:/x /fsx lustre defaults,_netdev 0 0\n")
    # The script's fstab lines alone (the mount point exists and is mounted: stand-ins that do nothing).
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("modinfo", "mountpoint", "systemctl"):
        (bindir / name).write_text("#!/bin/sh\nexit 0\n")
        (bindir / name).chmod(0o755)
    (bindir / "mkdir").write_text('#!/bin/sh\n[ "$*" = "-p /fsx" ] || exec /bin/mkdir "$@"\n')  # not this machine's /fsx
    (bindir / "mkdir").chmod(0o755)
    root = tmp_path / "root"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "LUSTRE_FSTAB": str(fstab),
           "LUSTRE_CLIENT_ROOT": str(root)}
    values = node_files.split(script, SCRIPT, BOOT_SCRIPT)
    result = subprocess.run(["bash", "-c", script[script.index(node.HEADER):]], env={**env, **values},
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert [line for line in fstab.read_text().splitlines() if " /fsx lustre " in line] == [
        f"fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com@tcp:/abcdefgh /fsx lustre {FSTAB_OPTIONS},"
        f"x-systemd.requires={UNIT} 0 0"
    ]
    units = tmp_path / "units"
    units.mkdir()
    env = {**os.environ, "SYSTEMD_FSTAB": str(fstab), "SYSTEMD_LOG_LEVEL": "warning"}
    subprocess.run([str(GENERATOR), str(units), str(units), str(units)], env=env, check=True, capture_output=True)
    mount = (units / "fsx.mount").read_text()
    assert "After=network-online.target" in mount and "Requires=network-online.target" in mount
    assert "network.service" not in mount
    # The mount waits for the client of the running kernel, installed by the script's unit at every boot.
    words = {key: [w for line in mount.splitlines() if line.startswith(f"{key}=") for w in line[len(key) + 1:].split()]
             for key in ("After", "Requires")}
    assert UNIT in words["After"] and UNIT in words["Requires"], mount
    shutil.copy(root / "etc" / "systemd" / "system" / UNIT, units / UNIT)
    # x-systemd.automount: the automount unit is pulled in by remote-fs.target at every boot.
    assert (units / "remote-fs.target.requires" / "fsx.automount").exists()
    verify = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "fsx.mount", "fsx.automount", UNIT],
        cwd=units, env={**env, "SYSTEMD_UNIT_PATH": f"{units}:"}, capture_output=True, text=True, check=False,
    )
    problems = [line for line in (verify.stdout + verify.stderr).splitlines() if "fsx." in line or UNIT in line]
    assert verify.returncode == 0 and not problems, verify.stdout + verify.stderr


def test_after_a_kernel_update_the_boot_unit_installs_the_client_for_the_new_kernel_before_the_mount(host):
    """The development instance (Ubuntu) at first boot, then rebooted into a kernel the installed client was not
    built for: at boot the unit's program installs lustre-client-modules for the running kernel, and the unit is
    enabled, ordered before the mount (test_systemd_accepts_the_mount_and_starts_it_at_every_boot) and needs the
    network, which apt needs."""
    tmp, bindir, state = host
    root, fstab = tmp / "root", tmp / "fstab"
    # modinfo looks in the running kernel's modules: only a kernel the client was installed for has them.
    (bindir / "modinfo").write_text('#!/bin/bash\n[ -e "$STATE/installed-$(uname -r)" ]\n')
    (bindir / "uname").write_text('#!/bin/bash\n[ "$1" = -r ] && cat "$STATE/kernel"\n')
    (bindir / "apt-get").write_text(
        '#!/bin/bash\necho "apt-get $*" >> "$STATE/calls"\n'
        'for a in "$@"; do case "$a" in lustre-client-modules-*) touch "$STATE/installed-${a#lustre-client-modules-}";; esac; done\n'
    )
    for name in ("wget", "gpg"):  # the FSx repository's key: recorded (gpg -o writes under LUSTRE_CLIENT_ROOT)
        (bindir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> "$STATE/calls"\n')
    for name in ("modinfo", "uname", "apt-get", "wget", "gpg"):
        (bindir / name).chmod(0o755)
    for folder in ("etc/apt/sources.list.d", "usr/share/keyrings"):
        (root / folder).mkdir(parents=True)
    (state / "kernel").write_text("6.8.0-1015-aws\n")
    fstab.write_text("")
    script = mount_script("ubuntu", "fs-1.fsx.us-west-2.amazonaws.com", "abcd", mount_point=str(tmp / "fsx"),
                          at_boot=True)
    _run(script, state, bindir, fstab, SCRIPT, BOOT_SCRIPT)
    _run(script, state, bindir, fstab, SCRIPT, BOOT_SCRIPT)  # user data again: one fstab line, one requirement
    assert fstab.read_text().count(f"x-systemd.requires={UNIT}") == 1
    assert "systemctl enable trainium-lustre-client.service" in (state / "calls").read_text().splitlines()
    install = "apt-get -o DPkg::Lock::Timeout=600 install -y lustre-client-modules-{}"
    assert install.format("6.8.0-1015-aws") in (state / "calls").read_text().splitlines()

    unit = (root / "etc" / "systemd" / "system" / UNIT).read_text()
    program = root / "usr" / "local" / "sbin" / "trainium-lustre-client"
    assert f"ExecStart={program}\n" in unit and "Type=oneshot" in unit and "WantedBy=multi-user.target" in unit
    assert "After=network-online.target" in unit and "Wants=network-online.target" in unit
    assert program.stat().st_mode & 0o111
    # The reboot into an updated kernel: the unit runs its program, which installs that kernel's client.
    (state / "calls").write_text("")
    (state / "kernel").write_text("6.8.0-1021-aws\n")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "STATE": str(state), "LUSTRE_CLIENT_ROOT": str(root)}
    boot = subprocess.run([str(program)], env=env, capture_output=True, text=True, check=False)
    assert boot.returncode == 0, boot.stderr
    calls = (state / "calls").read_text().splitlines()
    assert [c for c in calls if c.startswith("apt-get")] == ["apt-get update -y", install.format("6.8.0-1021-aws")]
    assert (root / "etc/apt/sources.list.d/fsxlustreclientrepo.list").is_file()
    # Booted again into the same kernel: nothing to install.
    (state / "calls").write_text("")
    assert subprocess.run([str(program)], env=env, check=False).returncode == 0
    assert (state / "calls").read_text() == ""
