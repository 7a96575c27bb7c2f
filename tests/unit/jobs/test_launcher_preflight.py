"""The launcher's Neuron version preflight: one line per node before torchrun, skipped without a driver.

The driver's sysfs file is a temporary file the launcher is told of (TRN_NEURON_VERSION_FILE); dpkg-query
is a stand-in on PATH. torchrun is a stand-in that prints its arguments.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from trainium_cdk.facts.versions import NATIVE_TRACK, XLA_TRACK
from trainium_cdk.runtime.launcher import (
    LAUNCHER,
    LAUNCHER_NAME,
    SHELL,
    launch_command,
    launch_environment,
    neuron_pins,
)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    for name, text in {
        "torchrun": 'echo "torchrun $*"\n',
        "dpkg-query": 'test "$*" = "-W -f=\\${Version} aws-neuronx-runtime-lib" && echo "2.31.24.0-6e27b8d5b"\n',
    }.items():
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + text)
        path.chmod(0o755)
    return tmp_path


def launch(bin_dir: Path, env: dict[str, str], *, driver: str | None) -> subprocess.CompletedProcess[str]:
    argv = launch_command(["train.py"])
    version = bin_dir / "neuron-version"
    if driver is not None:
        version.write_text(driver + "\n")
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NPROC_PER_NODE": "32", "TRN_NEURON_VERSION_FILE": str(version), **env}
    return subprocess.run(argv, env=full, capture_output=True, text=True, check=False)


def preflight_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("torchrun ")  # the preflight stops a job only on a driver older than the pin
    return [ln for ln in result.stderr.splitlines() if "neuron driver" in ln.lower() or "preflight" in ln]


def test_skipped_in_one_line_where_no_driver_is_loaded(bin_dir):
    lines = preflight_lines(launch(bin_dir, {}, driver=None))
    assert lines == ["trainium-launch: no Neuron driver loaded here: version preflight skipped"]


def test_driver_and_runtime_next_to_the_pins(bin_dir):
    env = neuron_pins(XLA_TRACK)
    lines = preflight_lines(launch(bin_dir, env, driver=XLA_TRACK.driver))
    assert lines == [
        f"trainium-launch: neuron driver {XLA_TRACK.driver} (pinned {XLA_TRACK.driver}), "
        f"runtime 2.31.24.0 (pinned {XLA_TRACK.runtime})"
    ]


def test_a_newer_driver_than_the_pinned_one_is_a_warning_not_a_failure(bin_dir):
    env = neuron_pins(NATIVE_TRACK)
    lines = preflight_lines(launch(bin_dir, env, driver="2.99.1.0"))
    assert lines[-1] == (
        f"trainium-launch: WARNING: the node's Neuron driver 2.99.1.0 is not the "
        f"{NATIVE_TRACK.neuron_release}'s {NATIVE_TRACK.driver}"
    )


@pytest.mark.parametrize("driver", [XLA_TRACK.driver, "2.30.2.0", "1.99.0.0"])
def test_a_driver_older_than_the_tracks_stops_the_job_before_torchrun_in_one_line(bin_dir, driver):
    """The native track's runtime needs its release's driver or newer (Neuron's runtime notes: "Requires Neuron
    Driver 2.31 or later"): on an older one it would fail later, inside nrt_init, on every rank (fails on the old
    launcher, which only warned)."""
    result = launch(bin_dir, neuron_pins(NATIVE_TRACK), driver=driver)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        f"trainium-launch: the node's Neuron driver {driver} is older than the {NATIVE_TRACK.neuron_release}'s "
        f"{NATIVE_TRACK.driver}, which its runtime needs: a node image (AMI) with that driver or newer "
        "(TRN_NEURON_DRIVER_CHECK=warn runs anyway)")
    # The job's own choice (`--env TRN_NEURON_DRIVER_CHECK=warn`): a warning, and torchrun.
    lines = preflight_lines(launch(bin_dir, {**neuron_pins(NATIVE_TRACK), "TRN_NEURON_DRIVER_CHECK": "warn"},
                                   driver=driver))
    assert "WARNING: the node's Neuron driver" in lines[-1]


def test_a_driver_of_the_same_minor_with_another_patch_is_a_warning(bin_dir):
    major_minor = ".".join(NATIVE_TRACK.driver.split(".")[:2])
    lines = preflight_lines(launch(bin_dir, neuron_pins(NATIVE_TRACK), driver=f"{major_minor}.0.0"))
    assert "WARNING: the node's Neuron driver" in lines[-1]


def test_without_pins_the_node_versions_alone(bin_dir, tmp_path):
    (bin_dir / "dpkg-query").unlink()  # an AL2023 host: neither dpkg-query nor rpm here
    lines = preflight_lines(launch(bin_dir, {}, driver="2.27.4.0"))
    assert lines == ["trainium-launch: neuron driver 2.27.4.0, runtime not installed"]


def test_launch_environment_carries_a_tracks_pins_only_when_asked():
    base = launch_environment(processes=32, master_port=29500, cache_dir="/fsx/neuron-cache/x")
    assert not [k for k in base if k.startswith("TRN_NEURON_")]
    pinned = launch_environment(processes=32, master_port=29500, cache_dir="/fsx/neuron-cache/x", track=XLA_TRACK)
    assert pinned == {**base, **neuron_pins(XLA_TRACK)}
    assert neuron_pins(XLA_TRACK) == {
        "TRN_NEURON_RELEASE": "2.29.1", "TRN_NEURON_DRIVER": "2.27.4.0", "TRN_NEURON_RUNTIME": "2.31.24.0",
        "TRN_NEURON_FRAMEWORK": XLA_TRACK.framework, "TRN_NEURON_TRACK": "xla",
    }


def test_the_launcher_is_still_one_posix_program():
    assert LAUNCHER_NAME == "trainium-launch" and SHELL == "/bin/sh"
    # dash (Ubuntu's /bin/sh) parses it.
    assert subprocess.run(["sh", "-n", "-c", LAUNCHER], check=False).returncode == 0

