"""A Batch host's own setup (trainium_cdk/node/batch_node.sh, as the node setup the user data fetches carries it):
the EFA installer is the pinned version, checked against its published SHA-256 before it is extracted, and a host
whose setup failed never takes jobs (the ECS agent stays stopped and masked, the instance shuts down, which the
launch template turns into a termination). The program runs here as the user data carries it, with stand-ins on
PATH for what the AMI provides (rpm, dnf, modprobe, curl, systemctl, shutdown); each records what it was asked."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support import node_files
from trainium_cdk import node
from trainium_cdk.constructs.batch_node import BATCH_NODE_FILES, node_setup
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG

DRIVER = versions.XLA_TRACK.driver
# What the ECS agent's unit is asked on a host: held while the user data runs, then let go, or masked.
HELD, STARTED = "stop --no-block ecs.service", "start --no-block ecs.service"
MASKED = "mask ecs.service"


def _values(instance_type: str) -> dict[str, str]:
    """The header values of batch_node.sh in the node setup of a group of ``instance_type`` (no storage), as the
    setup program the node fetches carries them."""
    setup = node_setup(DEFAULT_CATALOG.get(instance_type), None)
    assert node.source("batch_node.sh") in setup.program
    return setup.values


def _installer(*, fails: bool = False) -> bytes:
    """An EFA installer tarball as AWS lays it out (aws-efa-installer/efa_installer.sh), whose script records
    that it ran (and exits 1 with ``fails``): not AWS's bytes, so its digest is not the pinned one."""
    script = b'#!/bin/sh\necho "efa_installer.sh $*" >> "$STAND_IN_LOG"\n' + (b"exit 1\n" if fails else b"")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("aws-efa-installer/efa_installer.sh")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    return buffer.getvalue()


# The track's runtime and collectives as rpm shows an installed one: the version with the build's suffix.
RUNTIME, COLLECTIVES = f"{versions.XLA_TRACK.runtime}_4f1c2e9d0", f"{versions.XLA_TRACK.collectives}_4f1c2e9d0"


class Host:
    """A Batch host under stand-ins: the AMI's driver is ``driver``, its runtime and collectives ``libraries`` (the
    track's unless told), modules load, python3-boto3 is not installed, the network serves a stand-in installer at
    any URL; ``failing`` names commands, or a command and its first argument (``modprobe neuron``), that exit 1."""

    def __init__(self, tmp_path: Path, *, failing: tuple[str, ...] = (), driver: str = DRIVER,
                 libraries: tuple[str, str] = (RUNTIME, COLLECTIVES)) -> None:
        self.root = tmp_path
        self.log = tmp_path / "calls.log"
        self.ecs_config = tmp_path / "ecs.config"
        self.ecs_config.write_text("ECS_CLUSTER=batch-cluster\n")
        self.served = tmp_path / "served.tar.gz"
        self.served.write_bytes(_installer())
        bindir = tmp_path / "bin"
        bindir.mkdir()
        stand_ins = {
            "rpm": node_files.rpm_stand_in(driver, *libraries),
            "dnf": "",
            "modprobe": "",
            # curl -fsSL -o FILE URL: the file is what this network serves.
            "curl": 'while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done\ncp "$STAND_IN_SERVED" "$out"\n',
            "systemctl": "",
            "shutdown": "",
        }
        for name, body in stand_ins.items():
            fails = "".join(
                "exit 1\n" if entry == name else f'[ "$1" = {entry.split(" ", 1)[1]} ] && exit 1\n'
                for entry in failing if entry.split(" ", 1)[0] == name
            )
            path = bindir / name
            path.write_text(f'#!/bin/sh\necho "{name} $*" >> "$STAND_IN_LOG"\n{fails}{body}exit 0\n')
            path.chmod(0o755)
        # Never the machine's own systemctl or shutdown: only the stand-ins and coreutils are on PATH.
        self.env = {
            "PATH": f"{bindir}:/usr/bin:/bin", "ECS_CONFIG": str(self.ecs_config), "TMPDIR": str(tmp_path),
            "YUM_REPOS_DIR": str(tmp_path),
            "STAND_IN_LOG": str(self.log), "STAND_IN_SERVED": str(self.served),
        }

    def run(self, values: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return node_files.run(BATCH_NODE_FILES, values, self.env)

    def run_text(self, text: str) -> subprocess.CompletedProcess[str]:
        """Run a generated shell text as it is (the user data's shell part)."""
        script = self.root / "user-data.sh"
        script.write_text(text)
        return subprocess.run(["bash", str(script)], env=self.env, capture_output=True, text=True, timeout=60,
                              check=False)

    def calls(self, command: str) -> list[str]:
        """The arguments ``command`` was called with, in order."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line.partition(" ")[2] for line in lines if line.split(" ", 1)[0] == command]


def test_a_clean_run_lets_the_ecs_agent_start_once_it_is_done(tmp_path):
    """trn1.2xlarge has no EFA: the driver is the track's, the module loads; the agent is held while the user
    data runs and let go at its end, and nothing shuts the host down."""
    host = Host(tmp_path)
    result = host.run(_values("trn1.2xlarge"))
    assert result.returncode == 0, result.stderr
    assert host.calls("systemctl") == [HELD, STARTED]
    assert host.calls("shutdown") == [] and host.calls("curl") == []
    assert host.ecs_config.read_text() == "ECS_CLUSTER=batch-cluster\nECS_AWSVPC_BLOCK_IMDS=true\n"


def test_an_efa_host_fetches_the_pinned_installer_and_runs_it_only_when_its_digest_is_the_published_one(tmp_path):
    """trn1.32xlarge without an EFA device: the pinned version's URL, never `latest`; with a digest that matches
    (here the stand-in tarball's, given as the header's value) the installer runs, then the agent starts."""
    values = _values("trn1.32xlarge")
    assert values["EFA_INSTALLER_URL"] == versions.EFA_INSTALLER_URL
    assert values["EFA_INSTALLER_SHA256"] == versions.EFA_INSTALLER_SHA256
    assert "latest" not in values["EFA_INSTALLER_URL"] and versions.EFA_INSTALLER_VERSION in values["EFA_INSTALLER_URL"]
    host = Host(tmp_path)
    digest = hashlib.sha256(host.served.read_bytes()).hexdigest()
    result = host.run({**values, "EFA_INSTALLER_SHA256": digest})
    assert result.returncode == 0, result.stderr
    assert host.calls("curl") == [f"-fsSL -o efa-installer.tar.gz {versions.EFA_INSTALLER_URL}"]
    assert host.calls("efa_installer.sh") == ["-y --minimal"]
    assert host.calls("systemctl") == [HELD, STARTED] and host.calls("shutdown") == []


def test_an_installer_that_is_not_the_published_one_is_never_extracted_and_the_host_never_joins(tmp_path):
    """The network serves other bytes than AWS published for the pinned version: sha256sum fails, nothing is
    extracted or run, the agent stays stopped and masked, and the host shuts down (terminated: the launch
    template's shutdown behaviour, tests/app/batch/test_batch.py)."""
    host = Host(tmp_path)
    result = host.run(_values("trn1.32xlarge"))
    assert result.returncode != 0
    assert "efa-installer.tar.gz: FAILED" in result.stdout + result.stderr
    assert host.calls("efa_installer.sh") == [] and not list(tmp_path.glob("tmp.*/aws-efa-installer"))
    assert host.calls("systemctl") == [HELD, "stop --no-block ecs.service", MASKED]
    [shutdown] = host.calls("shutdown")
    assert shutdown.startswith("-h +1 ")
    assert "node setup failed (exit status 1)" in result.stderr


@pytest.mark.parametrize(
    ("failing", "installer_fails"),
    [(("modprobe neuron",), False), (("curl",), False), ((), True), (("modprobe efa",), False)],
    ids=["neuron-module", "efa-download", "efa-installer", "efa-module"],
)
def test_any_failing_step_keeps_the_agent_stopped_and_terminates_the_host(tmp_path, failing, installer_fails):
    """The Neuron module does not load; the installer cannot be downloaded; the (genuine) installer fails; the
    EFA module does not load after it. A driver that dnf cannot install is the same `set -e` exit (not run
    here)."""
    host = Host(tmp_path, failing=failing)
    host.served.write_bytes(_installer(fails=installer_fails))
    values = {**_values("trn1.32xlarge"), "EFA_INSTALLER_SHA256": hashlib.sha256(host.served.read_bytes()).hexdigest()}
    result = host.run(values)
    assert result.returncode != 0
    assert host.calls("systemctl") == [HELD, "stop --no-block ecs.service", MASKED]
    assert len(host.calls("shutdown")) == 1
    assert "node setup failed" in result.stderr


def test_a_step_after_the_program_in_the_user_data_that_fails_also_keeps_the_host_out(tmp_path):
    """The trap covers what the user data runs after batch_node.sh (here the metrics program's dependency,
    python3-boto3, which dnf cannot install): the whole user data exits 0 or the host never joins."""
    setup = node_setup(DEFAULT_CATALOG.get("trn1.2xlarge"), None, metrics_deployment="dev")
    # The setup as the bootstrap runs it: sourced after the user data's header of its values.
    text = node.header(setup.values) + setup.program
    host = Host(tmp_path, failing=("dnf",))
    result = host.run_text(text)
    assert result.returncode != 0
    assert host.calls("dnf") == ["install -y python3-boto3"]
    assert host.calls("systemctl") == [HELD, "stop --no-block ecs.service", MASKED]
    assert len(host.calls("shutdown")) == 1


def test_a_host_gets_the_tracks_runtime_and_collectives_for_its_on_node_collective_without_a_driver_reload(tmp_path):
    """The health check's nccom-test runs on the Neuron runtime and collectives (jobs bring their own in the image):
    an AMI with other versions, or none, gets the track's from Neuron's repository, by version glob (an RPM version
    carries a build suffix); the driver, already the track's, is not reloaded. An AMI with the track's installs
    nothing."""
    host = Host(tmp_path, libraries=("2.30.51.0_0a1b2c3d4", ""))
    result = host.run(_values("trn1.2xlarge"))
    assert result.returncode == 0, result.stderr
    runtime, collectives = versions.XLA_TRACK.runtime, versions.XLA_TRACK.collectives
    assert host.calls("dnf") == [f"install -y aws-neuronx-runtime-lib-{runtime}* aws-neuronx-collectives-{collectives}*"]
    assert host.calls("modprobe") == ["neuron"]
    assert host.calls("systemctl") == [HELD, STARTED]
    assert "gpgcheck=1" in (tmp_path / "neuron.repo").read_text()  # Neuron's repository, signed packages only
    (tmp_path / "current").mkdir()
    again = Host(tmp_path / "current", libraries=(RUNTIME, COLLECTIVES))
    assert again.run(_values("trn1.2xlarge")).returncode == 0 and again.calls("dnf") == []
