"""Every package repository a generated program writes on a node checks signatures explicitly (issue 33, item 4):
a yum/dnf repository says ``gpgcheck=1`` (dnf's own default is off, dnf.conf(5): only the AMI's dnf.conf turns it
on), an apt source names its keyring with ``signed-by`` (without it apt trusts every key in its global keyring).

Over everything the four-backend app synthesizes (templates, user data, assets: the Batch node setup, the
ParallelCluster setup script) and everything ``make synth`` writes to dist/ (the pcluster CLI's files, the image component).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import paths
from tests.support.helpers import synth, template_text, vendored_chart_hashes
from tests.unit.config.test_hostile_inputs import FULL
from trainium_cdk.app.config import build_config
from trainium_cdk.app.dist import write_dist
from trainium_cdk.facts import versions
from trainium_cdk.facts.versions import NEURON_TRACKS
from trainium_cdk.parallelcluster.configuration import setup_args

# A dnf repository section: from its [id] line to the next section, heredoc end or blank line.
YUM_SECTION = re.compile(r"^\[[\w.-]+\]\n(?:(?!\n\n|\n\[|\nEOF)[\s\S])*?\bbaseurl=.*(?:\n(?!\[|EOF)[^\n]+)*", re.M)
# An apt one-line source: "deb [options] URI suite component...".
APT_SOURCE = re.compile(r"\bdeb (\[[^\]]*\] )?(https?|s3)://\S+")


def _strings(value: Any) -> Iterator[str]:
    """Every string of a template, an Fn::Join's pieces also joined (helpers.template_text)."""
    if isinstance(value, dict):
        if set(value) == {"Fn::Join"}:
            yield template_text(value)
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)
    elif isinstance(value, str):
        yield value


def _texts(folder: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        yield str(path.relative_to(folder)), text
        if path.suffix == ".json":
            try:
                document = json.loads(text)
            except ValueError:
                continue
            for i, string in enumerate(_strings(document)):
                yield f"{path.relative_to(folder)}#{i}", string


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[tuple[str, str]]:
    config = build_config(FULL)
    dist = tmp_path_factory.mktemp("dist")
    write_dist(config, dist)
    # Not the vendored Helm charts cdk.out stages (pinned by digest: tests/unit/charts/test_vendored_charts.py): their templates'
    # defaults are not what the stack sets, and README "Supply chain" names the images they default to.
    charts = tuple(f"asset.{key}/" for key in vendored_chart_hashes())
    texts = [*_texts(synth(config, nag=False).outdir), *_texts(dist)]
    return [(where, text) for where, text in texts if not where.startswith(charts)]


def test_every_yum_repository_checks_signatures(generated):
    sections = [(where, section) for where, text in generated for section in YUM_SECTION.findall(text)]
    assert any("neuron" in section for _, section in sections), "the Batch node's Neuron repository was not seen"
    unchecked = [(where, section) for where, section in sections if not re.search(r"^gpgcheck=1$", section, re.M)]
    assert unchecked == []


def test_every_apt_source_names_its_keyring(generated):
    sources = [(where, m.group(0)) for where, text in generated for m in APT_SOURCE.finditer(text)]
    assert any("apt.repos.neuron.amazonaws.com" in source for _, source in sources), "no Neuron apt source seen"
    assert [(w, s) for w, s in sources if not re.match(r"deb \[[^\]]*\bsigned-by=/", s)] == []


# -- pip: Neuron packages exact, from Neuron's repository alone (issue 33, item 4) ------------------------------------
# pip has no index per package: with --extra-index-url it takes the highest version of a name from either index, so a
# Neuron package name published on PyPI at a higher version would win (dependency confusion).
NEURON_PIP_INDEX = "https://pip.repos.neuron.amazonaws.com"
PACKAGE = paths.ROOT / "trainium_cdk"
DATA = paths.DATA


def _pep503(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# Every pip package name of the vendored Neuron releases (tests/data/neuron-release-*.json; the apt names are there too,
# harmless), and what the tracks pin; a name with "neuron" in it, or a version built for Neuron (+neuron), too.
NEURON_NAMES = {
    _pep503(name)
    for path in DATA.glob("neuron-release-*.json") for name in json.loads(path.read_text())["packages"]
} | {_pep503(n) for t in NEURON_TRACKS.values() for n in {**t.pip_packages, **getattr(t, "pip_dependencies", {})}}
REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")


def _neuron(requirement: str) -> bool:
    match = REQUIREMENT.match(requirement)
    if match is None:
        return False
    name = _pep503(match.group(1))
    return name in NEURON_NAMES or "neuron" in name or "+neuron" in match.group(3)


def _exact(requirement: str) -> bool:
    """``name==version``: one version, no glob, no range."""
    match = REQUIREMENT.match(requirement)
    return bool(match and re.fullmatch(r"==[A-Za-z0-9.+!-]+", match.group(3).replace(" ", "")))


def _package_files() -> list[tuple[str, str]]:
    """What the package ships to be built or run as it is (recipes' and examples' Dockerfiles and requirements, node
    programs): the images `trn image push` builds are not in cdk.out."""
    paths = [p for p in sorted(PACKAGE.rglob("*")) if p.is_file()
             and (p.name == "Dockerfile" or p.suffix == ".sh" or p.name.endswith("requirements.txt"))]
    return [(str(p.relative_to(PACKAGE.parent)), p.read_text()) for p in paths]


def _code(text: str) -> str:
    """A program without its comment lines (which may name what the program must not do)."""
    return re.sub(r"^[ \t]*#.*$", "", text, flags=re.M)


def _pip_installs(text: str) -> list[str]:
    """Every pip install command of a text, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", _code(text))
    return [m.group(0) for m in re.finditer(r"\bpip3? install\b[^\n;&|]*", joined)]


def _requirements(command: str, where: str) -> list[str]:
    """The requirements a pip install names: its positional words, and the lines of each -r file the package ships
    beside the Dockerfile (its build context)."""
    words = command.split()[2:]
    found: list[str] = []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        word = word.strip("\"'")
        if word in ("-r", "--requirement"):
            name = Path(words[i + 1].strip("\"'")).name
            beside = PACKAGE.parent / Path(where).parent / name
            if beside.is_file():
                found += [line.strip() for line in beside.read_text().splitlines()
                          if line.strip() and not line.lstrip().startswith(("#", "-"))]
            skip = True
        elif word in ("-c", "--constraint", "--index-url", "-i", "--extra-index-url", "--find-links", "-f"):
            skip = True
        elif not word.startswith(("-", "$")) and "${" not in word:
            found.append(word)
    return found


@pytest.fixture(scope="module")
def installs(generated) -> list[tuple[str, str]]:
    return [(where, command) for where, text in [*generated, *_package_files()] for command in _pip_installs(text)]


def test_no_program_adds_an_extra_index(generated):
    """An extra index is the fall-through itself: nothing generated or shipped adds one (the flag, a pip.conf or
    environment setting, `pip config set`); unsetting one (`env -u PIP_EXTRA_INDEX_URL`) is what the setup does."""
    texts = [*generated, *_package_files()]
    adds = re.compile(r"--extra-index-url|extra[-_]index[-_]url\s*=|config set \S*extra-index-url", re.I)
    assert [where for where, text in texts if adds.search(_code(text))] == []


def test_every_pip_install_of_a_neuron_package_is_exact_and_from_neurons_repository_alone(installs):
    neuron_installs = [(where, command, [r for r in _requirements(command, where) if _neuron(r)])
                       for where, command in installs]
    neuron_installs = [(w, c, r) for w, c, r in neuron_installs if r]
    assert neuron_installs, "no pip install of a Neuron package seen (the titan-llama3 recipe has one)"
    loose = [(where, r) for where, _, reqs in neuron_installs for r in reqs if not _exact(r)]
    assert loose == []
    # The install that fetches them has Neuron's repository as its only index and takes no dependency from it; the
    # one from PyPI that names the same pins finds them installed.
    fetched = [(where, command) for where, command, _ in neuron_installs
               if f"--index-url {NEURON_PIP_INDEX}" in command]
    assert fetched and all("--no-deps" in command for _, command in fetched), fetched
    for where, command, _ in neuron_installs:
        if f"--index-url {NEURON_PIP_INDEX}" not in command:
            assert "--index-url https://pypi.org/simple" in command, (where, command)
            assert any(w == where for w, _ in fetched), (where, "installs Neuron pins it did not fetch from Neuron's repository")


@pytest.mark.parametrize("track", sorted(NEURON_TRACKS))
def test_the_slurm_setup_gets_every_neuron_package_exact(track, generated):
    """The ParallelCluster setup's --pip arguments (its venv, node/neuron_setup.sh): each NAME==VERSION, for
    every track, and in the cluster configuration dist/ and the template carry."""
    args = setup_args({}, NEURON_TRACKS[track])
    pins = [args[i + 1] for i, arg in enumerate(args) if arg == "--pip"]
    assert pins and all(_neuron(p) and _exact(p) for p in pins), pins
    # The cluster configuration (dist/'s YAML, the template), not the script's own text.
    carried = [(where, m.group(1)) for where, text in generated if not where.endswith(".sh") for m in re.finditer(r"--pip[\s\"',-]+([A-Za-z][^\s\"',\]]*)", _code(text))
               if m.group(1) != "NAME==VERSION"]
    assert carried and [(w, p) for w, p in carried if not _exact(p)] == []


# -- Images: from a registry AWS or the project controls, by an exact tag (issue 33, item 4) -------------------------
ALLOWED_REGISTRIES = (
    re.compile(r"(\d{12}|<[^>]+>|\$\{[^}]+\})\.dkr\.ecr\.[^/]+\.amazonaws\.com(\.cn)?/"),  # an account's ECR registry
    re.compile(r"public\.ecr\.aws/"),
    re.compile(r"registry\.k8s\.io/"),
)
# The deployment's own images, filled in at deploy from its outputs (dist/'s envsubst placeholders).
PLACEHOLDER = re.compile(r"\$\{[A-Z_]+\}")
JSON_IMAGE = re.compile(r'"[Ii]mage"\s*:\s*"([^"]+)"')
YAML_IMAGE = re.compile(r"^[ \t]*(?:-[ \t]+)?[Ii]mage:[ \t]*[\"']?([^\s\"']+)[\"']?[ \t]*$", re.M)
# Helm values: image {repository, tag} (a chart's default repository when the values name none).
HELM_IMAGE = re.compile(r'"image"\s*:\s*(\{[^{}]*\})')
FROM_LINE = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", re.M)


def _images(texts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every image a text names: `image` fields (Kubernetes objects, Batch job definitions' `Image`), Helm values'
    `image` {repository, tag} and Dockerfile FROM lines."""
    found = []
    for where, text in texts:
        found += [(where, m.group(1)) for m in JSON_IMAGE.finditer(text)]
        found += [(where, m.group(1)) for m in YAML_IMAGE.finditer(text)]
        for match in HELM_IMAGE.finditer(text):
            values = json.loads(match.group(1))
            found.append((where, f"{values.get('repository', 'registry.k8s.io/(chart default)')}:{values.get('tag')}"))
        for match in FROM_LINE.finditer(text):
            # The examples' base tag is a build argument: the EKS stack passes the track's (tests/app/eks/test_eks_workloads.py).
            found.append((where, match.group(1).replace("${BASE_TAG}", versions.XLA_TRACK.training_image_tag)))
    return found


def _tag_is_exact(image: str) -> bool:
    if "@sha256:" in image:
        return True
    _, colon, tag = image.rpartition("/")[2].partition(":")
    # A dotted version (1.37.0, v0.5.20, 2.9.0-neuronx-...) or a CDK asset's content hash; never latest or a bare major.
    return bool(colon) and tag != "latest" and ("." in tag or re.fullmatch(r"[0-9a-f]{64}", tag) is not None)


def _template_images(generated: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Images of the templates whose value is built at deploy (an Fn::Join with the region or account), joined."""
    found: list[tuple[str, str]] = []

    def walk(where: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                if key in ("Image", "image") and isinstance(inner, dict) and any(
                        k == "Ref" or k.startswith("Fn::") for k in inner):
                    found.append((where, template_text(inner)))
                walk(where, inner)
        elif isinstance(value, list):
            for inner in value:
                walk(where, inner)

    for where, text in generated:
        if where.endswith(".template.json"):
            walk(where, json.loads(text))
    return found


# Images the config names (the user's own, in the user's registry, by the user's tag): the test's config has one.
CONFIG_IMAGES = {FULL["batch"]["image_uri"], FULL["workloads"]["image"]}
# What versions.py pins for images that only some variants deploy (scheduler extension, neuron-monitor, kube-scheduler).
PINNED_IMAGES = [
    ("versions.py", image) for image in (
        versions.NEURON_DEVICE_PLUGIN_IMAGE, versions.NEURON_SCHEDULER_IMAGE, versions.NEURON_MONITOR_IMAGE,
        versions.AWS_CLI_IMAGE, versions.BUSYBOX_IMAGE, versions.TENSORBOARD_IMAGE,
        versions.efa_device_plugin_image("us-west-2"),
        *(versions.kube_scheduler_image(m) for m in versions.KUBE_SCHEDULER_TAGS),
        *(f"{versions.KARPENTER_IMAGE_REPOSITORY}:{versions.KARPENTER_VERSION}",),
        *(f"registry.k8s.io/autoscaling/cluster-autoscaler:{t}" for t in versions.CLUSTER_AUTOSCALER_IMAGE_TAGS.values()),
        *(versions.neuron_training_image("us-west-2", t) for t in NEURON_TRACKS),
        *(versions.neuron_public_training_image(t) for t in NEURON_TRACKS),
    )
]


def test_every_image_is_from_a_registry_aws_or_the_project_controls_by_an_exact_tag(generated):
    images = [*_images([*generated, *_package_files()]), *_template_images(generated), *PINNED_IMAGES]
    assert any(where == "eks/workloads/tensorboard.k8s.yaml" for where, _ in images), "TensorBoard's image not seen"
    checked = [(where, image) for where, image in images
               if not PLACEHOLDER.fullmatch(image) and image not in CONFIG_IMAGES]
    assert checked, "no image seen"
    foreign = [(where, image) for where, image in checked if not any(r.match(image) for r in ALLOWED_REGISTRIES)]
    assert foreign == []
    loose = [(where, image) for where, image in checked if not _tag_is_exact(image)]
    assert loose == []
