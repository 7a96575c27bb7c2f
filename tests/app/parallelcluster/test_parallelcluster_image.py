"""The ParallelCluster compute image: the `pcluster build-image` configuration (checked by ParallelCluster's
own image schema), `parallelcluster.custom_ami` in the cluster configuration (checked by its cluster
schema and update policies), and the boot path with and without the image, run with stand-ins for what
a node has (apt, dpkg, the kernel module, the network): what each path does at scale-up."""

from __future__ import annotations

import copy
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.helpers import US_EAST_2, config_with
from tests.support.pcluster_schema import update_changes, validate_images, validate_many, venv_or_skip
from trainium_cdk.app.config import ConfigError
from trainium_cdk.app.parallelcluster.cluster_config import setup_args
from trainium_cdk.app.parallelcluster.image import (
    COMPONENT_SCRIPT_NAME,
    DEFAULT_BUILD_INSTANCE_TYPE,
    IMAGE_ROOT_VOLUME_GIB,
    OFFICIAL_IMAGE_NAME_PART,
    component_args,
    image_configuration,
    image_id,
    official_image_name,
    render_component_script,
    render_image_yaml,
)
from trainium_cdk.facts.versions import PARALLELCLUSTER_VERSION, XLA_TRACK
from trainium_cdk.parallelcluster import ClusterIds, S3Object, cluster_configuration, write_dist
from trainium_cdk.parallelcluster.parts import SETUP_SCRIPT

AMI = "ami-0123456789abcdef0"
GROUPS = [
    {"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2, "max_nodes": 4, "az_ids": "use2-az3"},
    {"name": "small", "instance_type": "trn1.2xlarge", "nodes": 1, "max_nodes": 2, "az_ids": "use2-az2",
     "root_volume_gib": 64},
]
PLAIN = config_with(**US_EAST_2, backends=["parallelcluster"], compute_groups=GROUPS)
IMAGED = config_with(**US_EAST_2, backends=["parallelcluster"], compute_groups=GROUPS, parallelcluster={"custom_ami": AMI})


def _ids(config) -> ClusterIds:
    bucket = "cdk-hnb659fds-assets-123456789012-us-east-2"
    return ClusterIds(
        head_node_subnet_id="subnet-0123456789abcdef0",
        compute_subnet_ids={g.name: f"subnet-0123456789abcd{i:03d}" for i, g in enumerate(config.compute_groups)},
        efa_security_group_id="sg-0123456789abcdef0",
        file_system_id="fs-0123456789abcdef0",
        setup_script=S3Object(bucket, "t-cluster/" + "0" * 64 + ".sh"),
        head_node_script=S3Object(bucket, "t-cluster/" + "2" * 64 + ".sh"),
    )


# -- the image configuration -----------------------------------------------------------------------


def _filled(config) -> dict:
    """The generated YAML after `envsubst`, as the user runs it."""
    text = render_image_yaml(config).replace("${PARENT_IMAGE_ID}", "ami-0fedcba9876543210")
    return yaml.safe_load(text.replace("${SCRIPTS_BUCKET}", "my-bucket"))


def test_the_image_is_the_official_parallelcluster_ami_plus_the_component():
    document = yaml.safe_load(render_image_yaml(PLAIN))
    build = document["Build"]
    assert build["ParentImage"] == "${PARENT_IMAGE_ID}"  # never `latest`: the user's region's AMI of the name below
    assert build["InstanceType"] == DEFAULT_BUILD_INSTANCE_TYPE
    assert build["UpdateOsPackages"] == {"Enabled": False}
    assert build["Components"] == [{"Type": "script", "Value": f"s3://${{SCRIPTS_BUCKET}}/trainium/{COMPONENT_SCRIPT_NAME}"}]
    assert document["Region"] == "us-east-2"
    assert document["Image"]["RootVolume"] == {"Size": IMAGE_ROOT_VOLUME_GIB, "Encrypted": True}
    assert {"Key": "neuron-release", "Value": XLA_TRACK.neuron_release} in document["Image"]["Tags"]
    # The parent's name carries the pinned ParallelCluster version and the track's OS.
    assert official_image_name(XLA_TRACK) == f"aws-parallelcluster-{PARALLELCLUSTER_VERSION}-ubuntu-2404-lts-hvm-x86_64"
    header = render_image_yaml(PLAIN).split("\nRegion:")[0]
    assert f"Values={official_image_name(XLA_TRACK)}*" in header and "latest" not in render_image_yaml(PLAIN)
    assert f"pcluster build-image --region us-east-2 --image-id {image_id(PLAIN)} -c image.yaml" in header
    assert f"pcluster describe-image --region us-east-2 --image-id {image_id(PLAIN)}" in header
    assert "parallelcluster.custom_ami" in header


def test_the_component_runs_the_setup_script_unchanged_with_the_queues_pins():
    text = render_component_script(PLAIN)
    embedded = text.split("<<'TRAINIUM_CDK_NEURON_SETUP_SH'\n", 1)[1].split("\nTRAINIUM_CDK_NEURON_SETUP_SH\n", 1)[0]
    assert embedded + "\n" == SETUP_SCRIPT.read_text()
    # The --apt pins are those the queues pass at boot (one source: the track's table).
    queue_args = setup_args({}, XLA_TRACK)
    queue_apt = [v for k, v in zip(queue_args[::2], queue_args[1::2], strict=True) if k == "--apt"]
    args = component_args(XLA_TRACK)
    assert args[:3] == ["--image", "--sdk", XLA_TRACK.neuron_release]
    assert args[3::2] == ["--apt"] * len(queue_apt) and args[4::2] == queue_apt
    assert queue_apt == [f"{n}={v}" for n, v in XLA_TRACK.apt_packages.items()]
    assert text.rstrip().splitlines()[-1] == 'bash "${setup}" ' + " ".join(args)
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_write_dist_writes_the_image_and_its_component(tmp_path):
    names = {p.name: p for p in write_dist(PLAIN, tmp_path)}
    assert names["t-image.yaml"].read_text() == render_image_yaml(PLAIN)
    assert names[COMPONENT_SCRIPT_NAME].read_text() == render_component_script(PLAIN)


def test_image_names_and_os_parts():
    assert image_id(PLAIN) == "t-neuron-2-29-1"
    with pytest.raises(ConfigError, match="neuron.track"):
        official_image_name(XLA_TRACK.__class__(**{**XLA_TRACK.__dict__, "parallelcluster_os": "rhel9"}))


@pytest.fixture(scope="module")
def pcluster():
    return venv_or_skip("ParallelCluster's image schema")


def _broken(change) -> dict:
    document = copy.deepcopy(_filled(PLAIN))
    change(document)
    return document


@pytest.fixture(scope="module")
def image_results(pcluster):
    direct = image_configuration(PLAIN, parent_image=AMI, component_url="https://example.com/c.sh")
    cases = {
        "generated-after-envsubst": (image_id(PLAIN), _filled(PLAIN)),
        "direct": (image_id(PLAIN), direct),
        "placeholder-left": (image_id(PLAIN), yaml.safe_load(render_image_yaml(PLAIN))),
        "parent-latest": (image_id(PLAIN), _broken(lambda d: d["Build"].update(ParentImage="latest"))),
        "component-not-a-url": (image_id(PLAIN), _broken(lambda d: d["Build"]["Components"][0].update(Value="c.sh"))),
        "dotted-image-id": ("t-neuron-2.29.1", _filled(PLAIN)),
    }
    return validate_images(cases, XLA_TRACK.parallelcluster_os)


@pytest.mark.parametrize("case", ["generated-after-envsubst", "direct"])
def test_the_image_configuration_passes_parallelcluster_image_schema(image_results, case):
    assert image_results[case].errors == [] and image_results[case].warnings == []


def test_the_parent_is_the_image_pcluster_lists_as_official(image_results):
    # `pcluster list-official-images` of the pinned version searches exactly this name.
    assert image_results["direct"].official_image_name_prefix == official_image_name(XLA_TRACK)
    assert OFFICIAL_IMAGE_NAME_PART[XLA_TRACK.parallelcluster_os] in official_image_name(XLA_TRACK)


@pytest.mark.parametrize("case, message", [
    ("placeholder-left", "Build.ParentImage: String does not match expected pattern."),
    ("parent-latest", "Build.ParentImage: String does not match expected pattern."),
    ("component-not-a-url", "Choose a value with 'https' or 's3' prefix url."),
    ("dotted-image-id", "ImageId: 't-neuron-2.29.1' does not match"),
])
def test_a_wrong_image_setting_is_caught(image_results, case, message):
    assert any(message in e for e in image_results[case].errors), image_results[case].errors


# -- parallelcluster.custom_ami in the cluster -----------------------------------------------------


def test_custom_ami_goes_into_every_compute_queue_only():
    config = cluster_configuration(IMAGED, _ids(IMAGED))
    assert [q["Image"] for q in config["Scheduling"]["SlurmQueues"]] == [{"CustomAmi": AMI}] * len(GROUPS)
    # The head node keeps ParallelCluster's official AMI (its image cannot be updated), and so does the cluster.
    assert config["Image"] == {"Os": "ubuntu2404"} and "Image" not in config["HeadNode"]
    # The same setup action: on the image, it finds the packages and installs nothing.
    plain = cluster_configuration(PLAIN, _ids(PLAIN))
    assert all("Image" not in q for q in plain["Scheduling"]["SlurmQueues"])
    for with_ami, without in zip(config["Scheduling"]["SlurmQueues"], plain["Scheduling"]["SlurmQueues"], strict=True):
        assert with_ami["CustomActions"] == without["CustomActions"]


def test_custom_ami_is_an_ami_id():
    for bad in ("ami-123", "ami-0123456789ABCDEF0", "latest", "i-0123456789abcdef0", ""):
        with pytest.raises(ConfigError, match=r"parallelcluster\.custom_ami"):
            config_with(parallelcluster={"custom_ami": bad})
    assert config_with(parallelcluster={"custom_ami": "ami-01234567"}).parallelcluster.custom_ami == "ami-01234567"
    assert config_with().parallelcluster.custom_ami is None


def test_cluster_with_custom_ami_passes_parallelcluster_schema(pcluster):
    results = validate_many({"t-imaged": cluster_configuration(IMAGED, _ids(IMAGED))})
    assert results["t-imaged"].errors == [] and results["t-imaged"].warnings == []


def test_setting_the_image_drains_the_queues_and_is_accepted_while_jobs_run(pcluster):
    pairs = {"custom_ami": (cluster_configuration(PLAIN, _ids(PLAIN)), cluster_configuration(IMAGED, _ids(IMAGED)))}
    changes = update_changes(pairs, cluster_name="t-cluster")["custom_ami"]
    image = [c for c in changes if c.path.endswith(".Image")]
    assert sorted(c.path for c in image) == ["Scheduling.SlurmQueues[small].Image", "Scheduling.SlurmQueues[train].Image"]
    assert {c.policy for c in image} == {"QUEUE_UPDATE_STRATEGY"} and {c.new["CustomAmi"] for c in image} == {AMI}
    assert [c for c in changes if c not in image] == []
    assert {c.running for c in changes} == {"SUCCEEDED"} and {c.stopped for c in changes} == {"SUCCEEDED"}


# -- the boot path, with and without the image ------------------------------------------------------

KERNEL = "6.8.0-1021-aws"
STANDINS = {
    "uname": f'echo {KERNEL}',
    "curl": 'echo "curl $*" >> "$STATE/calls"; echo NEURON-KEY',
    "gpg": 'echo "gpg $*" >> "$STATE/calls"; out=""; while (($#)); do [[ $1 == -o ]] && out="$2"; shift; done; cat > "$out"',
    # Installing aws-neuronx-dkms builds the driver for the running kernel (its DKMS post-install).
    "apt-get": r'''echo "apt-get $*" >> "$STATE/calls"
[[ "$1" == install ]] || exit 0
shift
for a in "$@"; do
  case "$a" in
    -*) ;;
    *=*) name="${a%%=*}"; version="${a#*=}"; version="${version%\*}"
         echo "${version}-1a2b3c4" > "$STATE/dpkg/$name"
         if [[ "$name" == aws-neuronx-dkms ]]; then
           echo "dkms build neuron ${version} for $(uname -r)" >> "$STATE/calls"
           echo "${version}" > "$STATE/modules/neuron"
         fi ;;
    *) echo "1.0-1" > "$STATE/dpkg/$a" ;;
  esac
done''',
    "apt-mark": 'echo "apt-mark $*" >> "$STATE/calls"',
    "dpkg-query": r'''name="${@: -1}"
[[ -f "$STATE/dpkg/$name" ]] || exit 1
case "$2" in *Status*) printf 'install ok installed' ;; *) printf '%s' "$(cat "$STATE/dpkg/$name")" ;; esac''',
    "modprobe": r'''echo "modprobe $*" >> "$STATE/calls"
[[ -f "$STATE/modules/neuron" ]] || exit 1
mkdir -p "$ROOT/sys/module/neuron" && cp "$STATE/modules/neuron" "$ROOT/sys/module/neuron/version"''',
    "modinfo": '[[ -f "$STATE/modules/neuron" ]] && cat "$STATE/modules/neuron"',
    "hostname": 'case "$1" in -I) echo "10.0.0.5 10.0.1.5" ;; -s) echo train-st-trn1-1 ;; esac',
    "dnsdomainname": "echo ec2.internal",
}
NETWORK_AND_BUILD = ("curl", "gpg", "apt-get", "dkms build")


@dataclass
class Host:
    """A machine's disk (root: /etc, /sys; state: installed packages and built modules) and a bin of stand-ins."""

    root: Path
    state: Path
    bindir: Path

    def run(self, script: str, args: list[str] | None = None) -> tuple[list[str], float]:
        """Run a script as this host would; return the calls it made and its wall time under stand-ins."""
        text = script.replace("/etc/", f"{self.root}/etc/").replace("/sys/module/", f"{self.root}/sys/module/")
        path = self.root / "script.sh"
        path.write_text(text)
        (self.state / "calls").write_text("")
        env = {"PATH": f"{self.bindir}:/usr/bin:/bin", "STATE": str(self.state), "ROOT": str(self.root), "HOME": str(self.root)}
        start = time.monotonic()
        done = subprocess.run(["bash", str(path), *(args or [])], env=env, capture_output=True, text=True, timeout=60, check=False)
        elapsed = time.monotonic() - start
        assert done.returncode == 0, done.stderr + done.stdout
        return (self.state / "calls").read_text().splitlines(), elapsed

    def boot(self, node_type: str = "ComputeFleet") -> None:
        """A new instance of this disk: nothing loaded; udev loads a built driver when it sees the devices."""
        (self.root / "etc" / "parallelcluster" / "cfnconfig").write_text(f"cfn_node_type={node_type}\n")
        module = self.root / "sys" / "module" / "neuron"
        for child in module.glob("*"):
            child.unlink()
        if module.exists():
            module.rmdir()
        built = self.state / "modules" / "neuron"
        if built.exists():
            module.mkdir(parents=True, exist_ok=True)
            (module / "version").write_text(built.read_text())


def make_host(base: Path) -> Host:
    """A fresh ParallelCluster official Ubuntu 24.04 AMI: no Neuron package, no driver."""
    root, state, bindir = base / "root", base / "state", base / "bin"
    for d in (root / "etc" / "parallelcluster", root / "etc" / "apt" / "sources.list.d", root / "etc" / "profile.d",
              root / "sys" / "module", state / "dpkg", state / "modules", bindir):
        d.mkdir(parents=True)
    (root / "etc" / "os-release").write_text('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nVERSION_CODENAME=noble\n')
    (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n10.0.1.5 train-st-trn1-1\n")
    for name, body in STANDINS.items():
        (bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / name).chmod(0o755)
    return Host(root, state, bindir)


@pytest.fixture
def host(tmp_path) -> Host:
    return make_host(tmp_path)


def _node_args(track=XLA_TRACK) -> list[str]:
    return setup_args({}, track)


def _slow_steps(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith(NETWORK_AND_BUILD)]


def test_a_node_of_the_official_ami_installs_and_builds_the_driver_at_boot(host):
    host.boot()
    calls, _ = host.run(SETUP_SCRIPT.read_text(), _node_args())
    assert calls.count(f"dkms build neuron {XLA_TRACK.driver} for {KERNEL}") == 1
    assert "apt-get update -y" in calls and any(c.startswith("curl ") for c in calls)
    pinned = [f"{n}={v}*" for n, v in XLA_TRACK.apt_packages.items()]
    assert f"apt-get install -y --allow-downgrades --allow-change-held-packages {' '.join(pinned)}" in calls
    assert (host.root / "etc" / "neuron-sdk-version").read_text() == f"{XLA_TRACK.neuron_release}\n"


def test_the_image_build_installs_the_pins_once_and_checks_the_built_driver(host):
    calls, _ = host.run(render_component_script(PLAIN))
    assert calls.count(f"dkms build neuron {XLA_TRACK.driver} for {KERNEL}") == 1
    assert "apt-get install -y python3-boto3" in calls and calls[-1] == "apt-get clean"
    assert {p.name: p.read_text() for p in (host.state / "dpkg").glob("aws-neuronx-*")} == {
        name: f"{version}-1a2b3c4\n" for name, version in XLA_TRACK.apt_packages.items()
    }
    # No node of its own in the image: the hosts entry is the node's, at boot.
    assert (host.root / "etc" / "hosts").read_text() == "127.0.0.1 localhost\n10.0.1.5 train-st-trn1-1\n"


def test_an_image_build_fails_when_the_driver_was_not_built_for_its_kernel(host):
    (host.bindir / "modinfo").write_text("#!/bin/bash\nexit 1\n")
    text = render_component_script(PLAIN).replace("/etc/", f"{host.root}/etc/")
    done = subprocess.run(["bash", "-c", text], env={"PATH": f"{host.bindir}:/usr/bin:/bin", "STATE": str(host.state),
                                                     "ROOT": str(host.root)}, capture_output=True, text=True, check=False)
    assert done.returncode != 0 and f"not {XLA_TRACK.driver}" in done.stderr


def test_a_node_of_the_image_installs_nothing_at_boot(host):
    host.run(render_component_script(PLAIN))
    host.boot()
    calls, _ = host.run(SETUP_SCRIPT.read_text(), _node_args())
    assert _slow_steps(calls) == [] and calls == []
    # What a node still does at boot: its own hosts entry, the SDK marker.
    hosts = (host.root / "etc" / "hosts").read_text().splitlines()
    assert hosts[-1] == "10.0.0.5 train-st-trn1-1.ec2.internal train-st-trn1-1"
    assert (host.root / "etc" / "neuron-sdk-version").read_text() == f"{XLA_TRACK.neuron_release}\n"


def test_a_node_of_the_image_loads_the_driver_if_udev_has_not_yet(host):
    host.run(render_component_script(PLAIN))
    host.boot()
    module = host.root / "sys" / "module" / "neuron"
    (module / "version").unlink()
    module.rmdir()  # sysfs has the module's directory only while it is loaded
    calls, _ = host.run(SETUP_SCRIPT.read_text(), _node_args())
    assert calls == ["modprobe neuron"]


def test_a_node_of_an_image_of_other_pins_installs_the_track_pins(host):
    host.run(render_component_script(PLAIN))
    host.boot()
    newer = XLA_TRACK.__class__(**{**XLA_TRACK.__dict__, "apt_packages": {**XLA_TRACK.apt_packages, "aws-neuronx-dkms": "2.27.5.0"}})
    calls, _ = host.run(SETUP_SCRIPT.read_text(), _node_args(newer))
    assert calls.count(f"dkms build neuron 2.27.5.0 for {KERNEL}") == 1


def test_boot_steps_with_and_without_the_image(host, tmp_path):
    """The measurement this machine can make: the steps of each boot path (with stand-ins, so without
    their real duration; the driver build's real time needs a Trainium node and is not measured here)."""
    host.boot()
    stock, stock_s = host.run(SETUP_SCRIPT.read_text(), _node_args())
    imaged = make_host(tmp_path / "imaged")
    imaged.run(render_component_script(PLAIN))
    imaged.boot()
    with_image, image_s = imaged.run(SETUP_SCRIPT.read_text(), _node_args())
    report = {"official AMI": (stock, stock_s), "custom AMI": (with_image, image_s)}
    summary = {k: {"steps": len(c), "network/build steps": len(_slow_steps(c)), "seconds (stand-ins)": round(s, 3)}
               for k, (c, s) in report.items()}
    print(summary)
    assert summary["official AMI"]["network/build steps"] == 6  # curl, gpg, apt update, 2 installs, DKMS build
    assert summary["custom AMI"]["steps"] == 0
