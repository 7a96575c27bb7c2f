"""An EKS Trainium node's Neuron driver (trainium_cdk/node/eks_neuron_driver.sh, a shell part of the nodes' user
data). The native track (Neuron 2.34.0, 2026-11-30) pins driver 2.32.6.0 on EKS AMI release v20260930, built two
months before that driver shipped: without an install at boot, the launcher stopped every job on those nodes
("the node's Neuron driver ... is older"). The part runs here as the user data carries it, with stand-ins on PATH
for what the AMI provides (rpm, dnf, modprobe, systemctl, shutdown); each records what it was asked."""

from __future__ import annotations

import email
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import US_EAST_2, config_with
from trainium_cdk.app.adapters.eks import node_user_data
from trainium_cdk.facts import versions
from trainium_cdk.facts.names import NEURON_YUM_REPO

PINNED = versions.NATIVE_TRACK.driver
NATIVE = {**US_EAST_2, "neuron": {"track": "native"},
          "compute_groups": [{"name": "train", "instance_type": "trn2.48xlarge", "nodes": 2, "az_ids": "use2-az3"}]}


def _shell_parts(user_data: str | None) -> list[str]:
    """The shell parts of a MIME multi-part user data, as cloud-init hands them to bash."""
    assert user_data is not None
    message = email.message_from_string(user_data)
    return [part.get_payload() for part in message.walk() if part.get_content_type() == "text/x-shellscript"]


def _driver_part(user_data: str | None) -> str:
    (part,) = [text for text in _shell_parts(user_data) if "eks_neuron_driver" in text or "aws-neuronx-dkms-" in text]
    return part


def _run(tmp_path: Path, part: str, *, ami_driver: str, failing: str = "") -> tuple[int, dict[str, list[str]]]:
    """Run the part on a node whose AMI has ``ami_driver`` (empty: none); ``failing`` names a stand-in that exits
    1. Returns the exit status and each stand-in's calls."""
    log, bindir = tmp_path / "calls.log", tmp_path / "bin"
    bindir.mkdir()
    bodies = {"rpm": f'case "$*" in *--qf*aws-neuronx-dkms*) [ -n "{ami_driver}" ] && printf "{ami_driver}" && exit 0; exit 1 ;; esac\n',
              "dnf": "", "modprobe": "", "systemctl": "", "shutdown": "", "uname": "echo 6.12.40-63.114.amzn2023.x86_64\n"}
    for name, body in bodies.items():
        path = bindir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n' + ("exit 1\n" if name == failing else "")
                        + body + "exit 0\n")
        path.chmod(0o755)
    script = tmp_path / "part.sh"
    script.write_text(part)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "YUM_REPOS_DIR": str(tmp_path)}
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False)
    calls: dict[str, list[str]] = {}
    for line in (log.read_text().splitlines() if log.exists() else []):
        name, _, args = line.partition(" ")
        calls.setdefault(name, []).append(args)
    return result.returncode, calls


def test_native_track_nodes_install_the_pinned_driver_over_an_older_one_before_kubelet_starts(tmp_path):
    """The AMI's 2.30 driver (what v20260930 was built with, before 2.32 existed): the pinned package from Neuron's
    repository (gpgcheck on), built for the running kernel, the old module unloaded and the new one loaded."""
    part = _driver_part(node_user_data(config_with(**NATIVE), config_with(**NATIVE).compute_groups[0], None))
    status, calls = _run(tmp_path, part, ami_driver="2.30.2.0")
    assert status == 0
    assert calls["dnf"] == [f"install -y kernel-devel-uname-r == 6.12.40-63.114.amzn2023.x86_64 aws-neuronx-dkms-{PINNED}"]
    assert calls["modprobe"] == ["-r neuron", "neuron"]
    assert "shutdown" not in calls and "systemctl" not in calls
    repo = (tmp_path / "neuron.repo").read_text()
    assert f"baseurl={NEURON_YUM_REPO}\n" in repo and "gpgcheck=1\n" in repo


@pytest.mark.parametrize("ami_driver", [PINNED, "2.33.1.0"], ids=["the pin", "newer"])
def test_a_node_whose_driver_is_the_pin_or_newer_installs_nothing(tmp_path, ami_driver):
    part = _driver_part(node_user_data(config_with(**NATIVE), config_with(**NATIVE).compute_groups[0], None))
    status, calls = _run(tmp_path, part, ami_driver=ami_driver)
    assert status == 0 and set(calls) == {"rpm"}


def test_a_node_whose_install_failed_never_joins(tmp_path):
    """dnf fails (no repository, no kernel headers): nodeadm's run phase (kubelet) is masked and the node shuts down,
    so that its node group or Karpenter replaces it; it would otherwise take jobs the launcher stops."""
    part = _driver_part(node_user_data(config_with(**NATIVE), config_with(**NATIVE).compute_groups[0], None))
    status, calls = _run(tmp_path, part, ami_driver="2.30.2.0", failing="dnf")
    assert status != 0
    assert calls["systemctl"] == ["mask nodeadm-run.service"]
    assert len(calls["shutdown"]) == 1 and calls["shutdown"][0].startswith("-h +1")
    assert "modprobe" not in calls


def test_only_a_track_newer_than_its_eks_ami_installs_a_driver():
    """The xla track's driver (2.27, 2026-05) is older than its AMI release (v20260930): no part, no change to
    its nodes' user data. A track whose AMI release moves past its Neuron release drops the part by itself."""
    xla = config_with()
    user_data = node_user_data(xla, xla.compute_groups[0], None)
    assert user_data is None or not any("aws-neuronx-dkms-" in part for part in _shell_parts(user_data))
    assert versions.NATIVE_TRACK.eks_ami_predates_driver and not versions.XLA_TRACK.eks_ami_predates_driver
    later = versions.NeuronTrack(**{**vars(versions.NATIVE_TRACK), "eks_ami_release": "v20261215"})
    assert not later.eks_ami_predates_driver
