"""`trn doctor`'s checks of this machine, which need no credentials: the container engine a deploy builds
images with, the Session Manager plugin `trn connect` needs, and on a Trainium node its Neuron software
next to the configured track's pins."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainium_cdk.app import backends as backend_registry
from trainium_cdk.app.config import Config
from trainium_cdk.facts.versions import NeuronTrack

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
# A check that does not apply to this machine: printed, not counted.
SKIP = "SKIP"
# The CDK CLI's switch for another container engine (Finch, Podman) than docker.
CDK_DOCKER = "CDK_DOCKER"
# The Neuron host packages doctor reads (Debian on Ubuntu hosts, RPM on AL2023 hosts), by the name of
# what they carry. Debian versions carry a revision (2.31.24.0-<hash>): only the version is compared.
NEURON_PACKAGES = (
    ("driver", "aws-neuronx-dkms"),
    ("runtime", "aws-neuronx-runtime-lib"),
    ("collectives", "aws-neuronx-collectives"),
)
# The framework packages, from the Python on PATH: the user's activated Neuron environment, not trn's own.
FRAMEWORK_PACKAGES = ("torch-neuronx", "torch")
COMMAND_TIMEOUT_S = 30


@dataclass(frozen=True)


class Check:
    status: str
    name: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)


class CommandResult:
    code: int
    stdout: str


# Runs a command on this machine; None when its program is not installed.
CommandRunner = Callable[[Sequence[str]], CommandResult | None]


def run_command(argv: Sequence[str]) -> CommandResult | None:
    """The real runner: None when ``argv[0]`` is not on PATH, exit 124 on a timeout."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return CommandResult(124, "")
    return CommandResult(done.returncode, done.stdout)


def container_engine(config: Config, run: CommandRunner) -> list[Check]:
    """Docker (or Finch, through CDK_DOCKER) when a deployed stack builds a container image."""
    builds = [(b.name, what) for b in backend_registry.deployed(config) if (what := b.builds_image(config))]
    if not builds:
        return []
    engine = os.environ.get(CDK_DOCKER, "docker")
    why = "; ".join(f"the {name} stack builds {what}" for name, what in builds)
    fix = (f"start Docker, or install Finch and `export {CDK_DOCKER}=finch` (`finch vm start`); the engine "
           "must answer `docker version` before `make deploy`")
    answer = run([engine, "version"])
    if answer is None:
        return [Check(FAIL, "container engine", f"{engine} not found ({CDK_DOCKER}={engine}); {why}", fix)]
    if answer.code != 0:
        return [Check(FAIL, "container engine", f"`{engine} version` failed (exit {answer.code}): is its daemon "
                      f"running? {why}", fix)]
    return [Check(PASS, "container engine", f"{engine} answers; {why}")]


def session_manager_plugin(config: Config, run: CommandRunner) -> list[Check]:
    """The Session Manager plugin, when `trn connect` forwards a private EKS endpoint through it."""
    from trainium_cdk.cli.connect import PLUGIN_URL

    if "eks" not in config.backends or not config.eks.access_host_deployed:
        return []
    answer = run(["session-manager-plugin", "--version"])
    if answer is None or answer.code != 0:
        return [Check(FAIL, "session manager plugin", "session-manager-plugin not found: `trn connect` reaches "
                      "the private API endpoint through it", f"install it: {PLUGIN_URL}")]
    return [Check(PASS, "session manager plugin", f"version {answer.stdout.strip()}")]


def neuron_versions(track: NeuronTrack, run: CommandRunner) -> list[Check]:
    """Driver, runtime, collectives and framework versions of this machine next to the track's pins."""
    listing = run(["neuron-ls", "--json-output"])
    if listing is None:
        return [Check(SKIP, "neuron versions", f"no Neuron tools here (neuron-ls not found): run `trn doctor` "
                      f"on a Trainium node to compare its versions with the {track.name} track's pins")]
    checks = [_devices(listing)]
    for what, package in NEURON_PACKAGES:
        found = _package_version(run, package)
        where = "" if what == "driver" else "installed on this host (an image brings its own)"
        checks.append(_compare(f"neuron {what}", package, found, track.apt_packages[package], track, where=where))
    framework = _python_packages(run)
    if framework is None:
        checks.append(Check(SKIP, "torch-neuronx", "no python3 on PATH to read the framework versions from"))
        return checks
    where = "in the active Python (python3 on PATH; activate the Neuron environment to compare it)"
    neuronx_pin = track.pip_packages["torch-neuronx"]
    checks.append(_compare("torch-neuronx", "torch-neuronx", framework.get("torch-neuronx"), neuronx_pin, track,
                           where=where))
    # torch-neuronx A.B.C.x builds on torch A.B.C: the pin's first two fields are torch's minor.
    torch_pin = ".".join(neuronx_pin.split(".")[:2]) + ".*"
    checks.append(_compare("torch", "torch", framework.get("torch"), torch_pin, track, where=where))
    return checks


def _package_version(run: CommandRunner, package: str) -> str | None:
    """The installed version of a host package, from dpkg (Ubuntu) or else rpm (AL2023)."""
    # dpkg also knows removed packages whose configuration is left ("rc"): only "ii" is installed.
    dpkg = run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Version}", package])
    if dpkg is not None and dpkg.code == 0:
        status, _, version = dpkg.stdout.strip().partition(" ")
        if status == "ii" and version.strip():
            return version.strip().split("-", 1)[0]
    rpm = run(["rpm", "-q", "--qf", "%{VERSION}", package])
    if rpm is not None and rpm.code == 0 and rpm.stdout.strip():
        return rpm.stdout.strip()
    return None


def _python_packages(run: CommandRunner) -> dict[str, str] | None:
    """Name -> version of FRAMEWORK_PACKAGES in the active Python; None without a python3."""
    result = run(["python3", "-m", "pip", "show", *FRAMEWORK_PACKAGES])
    if result is None:
        return None
    found, name = {}, None
    # `pip show` prints one block per installed package (and exits 1 if any is missing).
    for row in result.stdout.splitlines():
        key, _, value = row.partition(":")
        if key == "Name":
            name = value.strip().lower().replace("_", "-")
        elif key == "Version" and name:
            found[name] = value.strip()
    return found


def _devices(listing: CommandResult) -> Check:
    if listing.code != 0:
        return Check(WARN, "neuron devices", f"neuron-ls failed (exit {listing.code})",
                     "is the Neuron driver loaded? `lsmod | grep neuron`; `sudo modprobe neuron`")
    # A list of devices up to Neuron 2.33; 2.34 drops --json-output (announce-intent-eos-neuron-ls-json).
    try:
        devices = json.loads(listing.stdout)
    except ValueError:
        devices = None
    if not isinstance(devices, list):
        return Check(WARN, "neuron devices", "neuron-ls printed no JSON device list",
                     "run `neuron-ls`: a tools release other than the track's aws-neuronx-tools pin?")
    return Check(PASS, "neuron devices", f"{len(devices)} Neuron device(s) (neuron-ls)")


def _compare(name: str, package: str, found: str | None, pin: str, track: NeuronTrack, *, where: str) -> Check:
    """PASS when ``found`` matches the pin (exact, or a glob such as 2.9.*), WARN when it differs; a package
    that is not here is a SKIP, since a container host runs the image's runtime and framework, except
    the driver (``where`` empty), which every Neuron host needs."""
    pinned = f"{track.name} track pins {pin} (Neuron {track.neuron_release})"
    fix = (f"install {package} {pin} (docs/concepts/tracks.md), or set neuron.track to the track this node was "
           "built for")
    if found is None:
        if where:
            return Check(SKIP, name, f"{package} is not {where}; {pinned}")
        return Check(WARN, name, f"{package} is not installed; {pinned}", fix)
    # A wheel's local label (2.9.0.2.13.26312+a1b2c3d4) is not part of an exact pin: pip's == ignores it (PEP 440).
    if fnmatch.fnmatchcase(found, pin) or fnmatch.fnmatchcase(found.partition("+")[0], pin):
        return Check(PASS, name, f"{package} {found}: {pinned}")
    return Check(WARN, name, f"{package} {found}, but the {pinned}", fix)
