"""Neuron tracks: every backend of one deployment runs the same pinned Neuron release, and no AMI or
image reference moves under the user (`latest`, ECS `recommended`).

Each track is synthesized once with every backend that supports it; the pins are read back from what a
user deploys (templates, dist/) and compared with the track's table in versions.py.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest

from tests.support import node_files
from tests.support.helpers import ROOT, group_resources, resources, strings, synth
from trainium_cdk.app.config import build_config
from trainium_cdk.app.dist import write_dist
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.versions import NEURON_TRACKS

# trn2 in us-east-2, where CloudFormation's and cfn-lint's instance data know it (synth validates it).
TRN2_OFFERINGS = {"trn2.48xlarge": {"us-east-2": ["use2-az3", "use2-az2"]}}
RAW = {
    # Each track takes one EKS capacity path, so that both node AMI pins are read back.
    "xla": {
        "backends": ["eks", "batch", "parallelcluster", "instance"],
        "eks": {"capacity": "managed"},
        "compute_groups": [{"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2, "az_ids": "usw2-az4"}],
    },
    "native": {
        "backends": ["eks", "batch", "instance"],
        "region": "us-east-2",
        "network": {"az_ids": ["use2-az3", "use2-az2"]},
        "neuron": {"track": "native"},
        "instance_offerings": TRN2_OFFERINGS,
        "compute_groups": [{"name": "train", "instance_type": "trn2.48xlarge", "nodes": 2, "az_ids": "use2-az3"}],
        "instance": {"instance_type": "trn2.48xlarge"},
    },
}
# An AMI or image reference that follows whatever is newest: an SSM path, an image tag, a Karpenter
# AMI alias (al2023@latest).
MOVING = re.compile(r"/(latest|recommended)(/|$)|:latest$|resolve:ssm:.*/latest|@latest\b")


@pytest.fixture(scope="module", params=sorted(RAW))
def deployed(request, tmp_path_factory):
    config = build_config({"network": {"az_ids": ["usw2-az4", "usw2-az3"]}, **RAW[request.param]})
    dist = tmp_path_factory.mktemp(f"dist-{request.param}")
    return request.param, config, synth(config, nag=False), write_dist(config, dist)


def _pins(name: str, config, app) -> dict[str, dict[str, str]]:
    """What each backend of the deployment actually pins: release, driver, image tag."""
    pins: dict[str, dict[str, str]] = {}
    batch = app.template_with_nested("batch")
    (definition,) = group_resources(batch, "AWS::Batch::JobDefinition").values()
    container = definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    (template,) = group_resources(batch, "AWS::EC2::LaunchTemplate").values()
    # node/batch_node.sh's header
    (driver,) = node_files.header_value(template["Properties"]["LaunchTemplateData"]["UserData"], "NEURON_DRIVER")
    # Batch builds the MLP example image on the track's training image (the tag is the build argument).
    assets = json.loads((app.outdir / f"{app.stacks.backends['batch'].artifact_id}.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    (destination,) = image["destinations"].values()
    assert container["Image"] == {"Fn::Sub": f"${{AWS::AccountId}}.dkr.ecr.{config.region}.${{AWS::URLSuffix}}/"
                                             f"{destination['repositoryName']}:{destination['imageTag']}"}
    pins["batch"] = {"image_tag": image["source"]["dockerBuildArgs"]["BASE_TAG"]}
    # EKS builds none by default (eks.example_images): its jobs run in the track's training image itself.
    (image,) = {app.template_json("eks")["Outputs"]["ExampleImageUri"]["Value"]}
    pins["eks"] = {"image_tag": image.rsplit(":", 1)[1]}
    pins["batch"]["driver"] = driver
    instance = app.template_json("instance")
    (lookup,) = resources(instance, "Custom::AmiLookup").values()
    (description,) = [f["Values"][0] for f in lookup["Properties"]["Filters"] if f["Name"] == "description"]
    pins["instance"] = {"release": re.fullmatch(r"\*Neuron SDK ([0-9.]+)\*", description).group(1)}
    if "parallelcluster" in config.backends:
        (cluster,) = resources(app.template_json("parallelcluster"), "Custom::PclusterCluster").values()
        cluster_config = cluster["Properties"]["ClusterConfiguration"]
        args = cluster_config["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Args"]
        pairs = dict(zip(args[::2], args[1::2], strict=True))
        apt = dict(v.split("=", 1) for k, v in zip(args[::2], args[1::2], strict=True) if k == "--apt")
        pins["parallelcluster"] = {"release": pairs["--sdk"], "driver": apt["aws-neuronx-dkms"]}
        assert cluster_config["Image"]["Os"] == NEURON_TRACKS[name].parallelcluster_os
    return pins


def test_every_backend_of_a_track_runs_its_one_pinned_release(deployed):
    name, config, app, _ = deployed
    track = NEURON_TRACKS[name]
    expected = {"release": track.neuron_release, "driver": track.driver, "image_tag": track.training_image_tag}
    pins = _pins(name, config, app)
    assert set(pins) == set(config.backends)
    for backend, found in pins.items():
        assert found == {k: expected[k] for k in found}, backend


def test_the_tracks_disagree_with_each_other_only_where_their_tables_do():
    xla, native = NEURON_TRACKS["xla"], NEURON_TRACKS["native"]
    assert xla.neuron_release in xla.training_image_tag and native.neuron_release in native.training_image_tag
    for track in (xla, native):
        assert track.apt_packages["aws-neuronx-dkms"] == track.driver
        assert track.ecs_neuron_ami_parameter.startswith("/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/")
        assert track.dlami.description == f"*Neuron SDK {track.neuron_release}*"


def test_no_ami_or_image_reference_follows_latest_or_recommended(deployed):
    _, _, app, dist = deployed
    texts = {p.name: p.read_text() for p in app.template_paths()}
    texts.update({str(p): p.read_text() for p in dist if p.is_file()})
    moving = []
    for where, text in texts.items():
        data: Any = json.loads(text) if where.endswith(".json") else None
        words = strings(data) if data is not None else text.split()
        moving += [(where, s) for s in words if ("image" in s.lower() or "ami" in s.lower() or ":" in s) and MOVING.search(s)]
    assert moving == []


def test_moving_references_are_recognised():
    for moving in ("al2023@latest", "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id",
                   "public.ecr.aws/neuron/neuron-device-plugin:latest",
                   "{{resolve:ssm:/aws/service/neuron/dlami/base/ubuntu-24.04/latest/image_id}}"):
        assert MOVING.search(moving), moving
    for pinned in (versions.KARPENTER_AMI_ALIAS, versions.NEURON_DEVICE_PLUGIN_IMAGE,
                   NEURON_TRACKS["xla"].ecs_neuron_ami_parameter):
        assert not MOVING.search(pinned), pinned


def _manifest_objects(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes objects a template applies (tokens inside a manifest left as text)."""
    objects = []
    for resource in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        manifest = resource["Properties"]["Manifest"]
        if not isinstance(manifest, str):
            manifest = "".join(p if isinstance(p, str) else "TOKEN" for p in next(iter(manifest.values()))[1])
        objects += json.loads(manifest)
    return objects


def test_eks_trainium_nodes_boot_the_tracks_pinned_ami_release(deployed):
    """Managed node groups name the release (without one, EKS takes the newest when it creates the
    group); Karpenter's EC2NodeClass names it in its AMI alias."""
    name, config, app, _ = deployed
    track = NEURON_TRACKS[name]
    templates = [json.loads(p.read_text()) for p in app.template_paths()]
    neuron_groups = [
        r["Properties"] for t in templates for r in resources(t, "AWS::EKS::Nodegroup").values()
        if r["Properties"].get("AmiType") == "AL2023_x86_64_NEURON"
    ]
    node_classes = [o for t in templates for o in _manifest_objects(t) if o.get("kind") == "EC2NodeClass"]
    if config.eks.capacity == "managed":
        assert len(neuron_groups) == len(config.compute_groups) and not node_classes
        release = f"{versions.KUBERNETES_VERSION}.8-{track.eks_ami_release.removeprefix('v')}"
        assert {g["ReleaseVersion"] for g in neuron_groups} == {release} == {track.eks_nodegroup_release_version}
    else:
        assert len(node_classes) == len(config.compute_groups) and not neuron_groups
        for node_class in node_classes:
            assert node_class["spec"]["amiSelectorTerms"] == [{"alias": f"al2023@{track.eks_ami_release}"}]


def test_every_track_names_a_dated_eks_ami_release():
    for track in NEURON_TRACKS.values():
        assert re.fullmatch(r"v20\d{6}", track.eks_ami_release), track.name
        assert re.fullmatch(r"\d+\.\d+\.\d+-20\d{6}", track.eks_nodegroup_release_version), track.name
        assert track.eks_nodegroup_release_version.startswith(versions.KUBERNETES_VERSION + ".")
        assert track.karpenter_ami_alias == f"al2023@{track.eks_ami_release}"


@pytest.mark.parametrize("capacity", ["karpenter", "managed"])
def test_eks_nodes_take_the_configured_track_s_release_not_a_module_pin(capacity, monkeypatch):
    """A track with an EKS AMI release of its own reaches every EKS node: the Karpenter EC2NodeClass alias,
    the Trainium node groups' and the system nodes' releaseVersion (they read the module pin before)."""
    from dataclasses import replace

    track = replace(NEURON_TRACKS["xla"], eks_ami_release="v20991231")
    monkeypatch.setitem(NEURON_TRACKS, "xla", track)
    config = build_config({"backends": ["eks"], "eks": {"capacity": capacity}, "storage": {"enabled": False}})
    assert config.neuron_track is track
    template = synth(config, nag=False).template_json("eks")
    releases = {r["Properties"].get("AmiType"): r["Properties"]["ReleaseVersion"]
                for r in resources(template, "AWS::EKS::Nodegroup").values()}
    node_classes = [o for o in _manifest_objects(template) if o.get("kind") == "EC2NodeClass"]
    assert releases.pop("AL2023_x86_64_STANDARD") == f"{versions.KUBERNETES_VERSION}.8-20991231"
    if capacity == "managed":
        assert releases == {"AL2023_x86_64_NEURON": f"{versions.KUBERNETES_VERSION}.8-20991231"} and not node_classes
    else:
        assert not releases and node_classes
        assert {json.dumps(c["spec"]["amiSelectorTerms"]) for c in node_classes} == {'[{"alias": "al2023@v20991231"}]'}


# TorchNeuron runs on Trn2 and Trn3 only (Neuron 2.33.0 release notes): every first-generation Trainium type is refused.
@pytest.mark.parametrize("instance_type", [s.name for s in DEFAULT_CATALOG if s.accelerator == "Trainium"])
def test_native_track_on_trn1_is_rejected_naming_the_field_and_what_is_allowed(instance_type):
    raw = {"neuron": {"track": "native"}, "compute_groups": [{"name": "train", "instance_type": instance_type}]}
    with pytest.raises(ConfigError) as err:
        build_config(raw)
    message = str(err.value)
    assert "neuron.track = 'native'" in message and instance_type in message and "allowed: xla" in message


def test_native_track_with_parallelcluster_is_rejected():
    raw = {**RAW["native"], "backends": ["parallelcluster"]}
    with pytest.raises(ConfigError, match=r"neuron.track = 'native'.*Ubuntu 26.04"):
        build_config(raw)


def test_default_track_is_xla():
    assert build_config({}).neuron_track is NEURON_TRACKS["xla"]


def test_every_backend_s_jobs_carry_the_track_s_pins():
    """The launcher's preflight compares the node's driver and the image's runtime with TRN_NEURON_*:
    EKS jobs, the Batch job definition and the Slurm batch script all carry the configured track's pins."""
    from tests.support.apps import synthesized
    from trainium_cdk.app.parallelcluster.sbatch import render_sbatch
    from trainium_cdk.runtime.launcher import neuron_pins

    app = synthesized("trn1.32xlarge")
    config = app.config
    pins = neuron_pins(config.neuron_track)
    assert pins["TRN_NEURON_DRIVER"] == config.neuron_track.driver
    from trainium_cdk.app.workloads import example_jobs

    jobs = example_jobs(config, image="x")
    assert jobs and all(pins.items() <= job.environment().items() for job in jobs)
    (definition,) = group_resources(app.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
    (node_range,) = definition["Properties"]["NodeProperties"]["NodeRangeProperties"]
    assert pins.items() <= {e["Name"]: e["Value"] for e in node_range["Container"]["Environment"]}.items()
    script = render_sbatch(config, config.compute_groups[0])
    for key, value in pins.items():
        # The value the shell gives the variable, all of it: `export KEY=<word>` read as bash reads it.
        (exported,) = re.findall(rf"^export {key}=(.*)$", script, re.M)
        assert shlex.split(exported) == [value], (key, exported)


# Each track's release, as vendored under tests/data with its source: the xla track's from Neuron's release
# manifest (aws-neuron-sdk src/helperscripts/n2-manifest.json, the commit in the file); the native track's from
# the 2.34.0 release content page and torch-neuronx's v2.34.0 release, because no commit of the manifest that lists
# 2.34.0 was reachable (the file says so; replace it with the manifest's entry when one is).
RELEASE_FILES = {"xla": "neuron-release-2.29.1.json", "native": "neuron-release-2.34.0.json"}


def _release(track: str) -> dict[str, Any]:
    return json.loads((ROOT / "tests" / "data" / RELEASE_FILES[track]).read_text())


# Pip dependencies a track pins that its vendored release entry does not list, with the version pinned: Neuron's manifest
# names aws-neuronx-runtime-discovery at 2.9 in earlier 2.x releases, not in the entry of 2.29.1 read here.
UNLISTED_DEPENDENCIES = {("xla", "aws-neuronx-runtime-discovery"): "2.9"}


@pytest.mark.parametrize("name", sorted(NEURON_TRACKS))
def test_every_pin_of_a_track_is_its_releases_package(name):
    """Every package a track pins (apt and pip, and the driver) is the version its vendored release lists.
    The xla track's aws-neuronx-tools was 2.29.18.0, Neuron 2.29.0's; the native track's were 2.33.0's."""
    import fnmatch

    track = NEURON_TRACKS[name]
    release = _release(name)
    assert release["neuron_version"] == track.neuron_release
    assert "source" in release and release["source"]
    pins = {**track.apt_packages, **track.pip_packages, **track.pip_dependencies}
    for package, pinned in pins.items():
        if (name, package) in UNLISTED_DEPENDENCIES:
            assert pinned == UNLISTED_DEPENDENCIES[name, package]
            continue
        assert package in release["packages"], (package, "not in the vendored release")
        assert fnmatch.fnmatchcase(release["packages"][package], pinned), (package, pinned, release["packages"][package])
    assert track.driver == release["packages"]["aws-neuronx-dkms"]


@pytest.mark.parametrize("name", sorted(NEURON_TRACKS))
def test_a_tracks_release_date_image_and_dlami_are_its_releases(name):
    """The fields the package check above does not reach: the release date, the runtime and collectives the launcher's
    preflight compares, the training image's SDK (DLC tags carry "sdk<version>") and the DLAMI lookup ("Neuron SDK
    <version>" in the description, the Neuron DLAMI guide). A release bump that leaves one behind fails here, and
    a correct bump needs no edit."""
    track = NEURON_TRACKS[name]
    release = _release(name)
    if "released" in release:  # the xla track's manifest entry carries no date; the native track's notes do
        assert track.released == release["released"]
    assert (track.runtime, track.collectives) == (
        release["packages"]["aws-neuronx-runtime-lib"], release["packages"]["aws-neuronx-collectives"])
    assert f"-sdk{track.neuron_release}-" in track.training_image_tag
    assert track.dlami.description == f"*Neuron SDK {track.neuron_release}*"


def test_a_pin_that_is_not_the_releases_fails_the_check():
    """The check is not vacuous: 2.33.1's driver under the 2.34.0 release."""
    import fnmatch

    assert not fnmatch.fnmatchcase(_release("native")["packages"]["aws-neuronx-dkms"], "2.31.8.0")
