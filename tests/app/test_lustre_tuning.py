"""The FSx for Lustre client tuning on every backend's Trainium nodes, read from what the apps synthesize: each
Batch and EKS launch template, each Karpenter EC2NodeClass, each ParallelCluster queue's OnNodeStart and each
development instance. The values are the FSx user guide's ("Performance tips") for the instance type's vCPUs
and memory, written out here per type; node/lustre_tuning.sh is then run as the node runs it (stand-ins for
lctl, lfs, findmnt, modprobe, systemctl and dnf), and what it writes (modprobe.d, the systemd unit, the
layout of /fsx/checkpoints) is checked, the unit with systemd-analyze verify."""

from __future__ import annotations

import base64
import gzip
import json
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import node_files
from tests.support.apps import VARIANTS, synthesized
from tests.support.helpers import resources
from tests.unit.node.test_node_programs import TOKEN_TEXT as TOKEN
from tests.unit.node.test_node_programs import _joined, shellcheck
from trainium_cdk import node
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.runtime import eks_user_data
from trainium_cdk.runtime.lustre_tuning import TUNER_PATH

MODULE_OPTIONS = ["options ptlrpc ptlrpcd_per_cpt_max=32", "options ksocklnd credits=2560"]
RPCS = ["osc.*OST*.max_rpcs_in_flight=32", "mdc.*.max_rpcs_in_flight=64", "mdc.*.max_mod_rpcs_in_flight=50"]


def guide_tuning(instance_type: str) -> tuple[list[str], list[str]]:
    """The FSx for Lustre guide's client tuning ("Performance tips") for a type's vCPUs and memory (catalog): above
    64 GiB the lock LRU at 100 x vCPUs; above 64 vCPUs the module options and the RPCs in flight. A type on either
    side needs no edit here (trn1.2xlarge, 8 / 32 GiB, gets none of it; trn1.32xlarge, 128 / 512, lru_size=12800)."""
    spec = DEFAULT_CATALOG.get(instance_type)
    lru = ["ldlm.namespaces.*.lru_max_age=600000", f"ldlm.namespaces.*.lru_size={100 * spec.vcpus}"]
    params = lru if spec.memory_gib > 64 else []
    many_cpus = spec.vcpus > 64
    return (MODULE_OPTIONS if many_cpus else []), params + (RPCS if many_cpus else [])


def test_the_variants_hold_types_on_both_sides_of_the_guide_thresholds():
    """Else the rule above would go untested on one side."""
    tuned = {bool(guide_tuning(g["instance_type"])[1]) for v in VARIANTS.values() for g in v["compute_groups"]}
    assert tuned == {True, False}


LAYOUT = ["-E", "100M", "-c", "1", "-E", "10G", "-c", "8", "-E", "-1", "-c", "-1"]


def _shell_part(user_data: str) -> str:
    """The shell text of user data: the shell part of MIME multi-part user data that is not the image pre-pull
    (EKS: eks_user_data), or the script itself."""
    if not user_data.startswith("MIME-Version"):
        return user_data
    boundary = user_data.split('boundary="', 1)[1].split('"', 1)[0]
    parts = [p for p in user_data.split(f"--{boundary}")
             if "Content-Type: text/x-shellscript" in p and eks_user_data.PREPULL_PARAMETER_VARIABLE not in p]
    (part,) = parts
    return part.split("\n\n", 1)[1]


def _manifest_objects(template: dict[str, Any]) -> list[dict[str, Any]]:
    objects = []
    for resource in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        objects += json.loads(_joined(resource["Properties"]["Manifest"]))
    return objects


def node_user_data(variant: str) -> list[tuple[str, str, str, str]]:
    """(backend, resource, instance type, shell text) of every Trainium node's user data in a variant."""
    result = synthesized(variant)
    found = []
    for path in result.template_paths():
        template = json.loads(path.read_text())
        stack = path.name.removesuffix(".template.json")
        templates = resources(template, "AWS::EC2::LaunchTemplate")
        for name, env in resources(template, "AWS::Batch::ComputeEnvironment").items():
            compute = env["Properties"]["ComputeResources"]
            (instance_type,) = compute["InstanceTypes"]
            if not instance_type.startswith("trn"):
                continue  # the CPU queue: a general-purpose node, untuned (constructs/batch_node.py cpu_node_setup)
            data = templates[compute["LaunchTemplate"]["LaunchTemplateId"]["Ref"]]["Properties"]["LaunchTemplateData"]
            # The setup the user data fetches (an S3 asset in the cloud assembly): the tuning is there.
            _, program = node_files.fetched_setup(_shell_part(_joined(data["UserData"])), result.outdir)
            found.append(("batch", f"{stack}/{name}", instance_type, program))
        for name, group in resources(template, "AWS::EKS::Nodegroup").items():
            ref = group["Properties"].get("LaunchTemplate", {}).get("Id", {}).get("Ref")
            data = templates[ref]["Properties"]["LaunchTemplateData"] if ref else {}
            if data.get("InstanceType", "").startswith("trn"):
                found.append(("eks", f"{stack}/{name}", data["InstanceType"], _shell_part(_joined(data["UserData"]))))
        for name, instance in resources(template, "AWS::EC2::Instance").items():
            props = instance["Properties"]
            if props["InstanceType"].startswith("trn"):
                _, program = node_files.fetched_setup(_joined(props["UserData"]), result.outdir)
                found.append(("instance", f"{stack}/{name}", props["InstanceType"], program))
        objects = _manifest_objects(template)
        classes = {o["metadata"]["name"]: o["spec"] for o in objects if o.get("kind") == "EC2NodeClass"}
        for pool in (o for o in objects if o.get("kind") == "NodePool"):
            spec = pool["spec"]["template"]["spec"]
            (types,) = [r["values"] for r in spec["requirements"] if r["key"] == "node.kubernetes.io/instance-type"]
            (instance_type,) = types
            node_class = classes[spec["nodeClassRef"]["name"]]
            found.append(("eks", f"{stack}/EC2NodeClass {spec['nodeClassRef']['name']}", instance_type,
                          _shell_part(node_class["userData"])))
        for cluster in resources(template, "Custom::PclusterCluster").values():
            for queue in cluster["Properties"]["ClusterConfiguration"]["Scheduling"]["SlurmQueues"]:
                (compute,) = queue["ComputeResources"]
                start = queue["CustomActions"]["OnNodeStart"]
                # The S3 object of the script, an asset of the cloud assembly: node/lustre_tuning.sh as it is.
                (*_, key) = start["Script"]["Fn::Join"][1]
                assert (result.outdir / f"asset.{key.rsplit('/', 1)[1]}").read_text() == node.source("lustre_tuning.sh")
                # As ParallelCluster runs it: the script (lustre_tuning.sh, tests/app/parallelcluster/test_parallelcluster.py) with Args.
                text = shlex.join([TUNER_PATH, *start["Args"]])
                found.append(("parallelcluster", f"{stack}/queue {queue['Name']}", compute["InstanceType"], text))
    return found


def _settings(text: str) -> dict[str, str]:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"{TUNER_PATH} install")]
    args = shlex.split(line)[2:]
    return dict(arg.split("=", 1) for arg in args)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_trainium_node_of_every_backend_carries_the_tuning_of_its_instance_type(variant):
    found = node_user_data(variant)
    config = synthesized(variant).config
    # Every backend of the variant, every compute group once (the development instance: its own type).
    groups = sorted(g.instance_type for g in config.compute_groups)
    expected = {b: groups if b != "instance" else [config.instance.instance_type]
                for b in config.backends}
    seen: dict[str, list[str]] = {}
    for backend, _, instance_type, _ in found:
        seen.setdefault(backend, []).append(instance_type)
    assert {b: sorted(t) for b, t in seen.items()} == expected
    for _, where, instance_type, text in found:
        settings = _settings(text)
        modules, params = guide_tuning(instance_type)
        options = [f"options {o.replace(':', ' ', 1)}" for o in settings["LUSTRE_MODULE_OPTIONS"].split()]
        assert options == modules, where
        assert settings["LUSTRE_TUNING_PARAMS"].split() == params, where
        assert settings["LUSTRE_STRIPE_LAYOUT"].split() == LAYOUT, where
        assert settings["LUSTRE_STRIPED_DIRS"].split() == ["checkpoints", "datasets"], where
        if "EC2NodeClass" in where or "Nodegroup" in where:
            # The FSx CSI driver mounts in pods: the host installs the client and loads its modules first.
            assert settings["LUSTRE_FILE_SYSTEM"] == TOKEN and settings["LUSTRE_CLIENT_INSTALL"] == "amazon-linux"
        else:
            assert settings["LUSTRE_FILE_SYSTEM"] == "/fsx" and "LUSTRE_CLIENT_INSTALL" not in settings
        if "queue" not in where:
            assert shellcheck(text, "bash") == "", where
            program = [ln for ln in text.splitlines() if ln.endswith(f"| base64 -d | gunzip > {TUNER_PATH}")]
            (line,) = program
            assert gzip.decompress(base64.b64decode(line.split()[1])).decode() == node.source("lustre_tuning.sh")
            lines = text.splitlines()
            install = lines.index(next(ln for ln in lines if ln.startswith(f"{TUNER_PATH} install")))
            mounts = [i for i, ln in enumerate(lines) if ln.startswith('mountpoint -q "$LUSTRE_MOUNT_POINT"')]
            # Before the host mounts (Batch, the instance): the module options are read when the mount loads them.
            assert all(install < i for i in mounts), where


def test_eks_user_data_is_mime_multipart_with_one_shell_part():
    """EKS (AL2023, nodeadm) merges its NodeConfig into MIME multi-part user data, in the launch template and
    in the EC2NodeClass alike: the tuning is one shell part of it (beside the image pre-pull's), joined by
    eks_user_data.mime."""
    for variant in ("trn1.32xlarge", "trn1n.32xlarge+trn1.2xlarge"):
        result = synthesized(variant)
        template = result.template_json("eks")
        datas = [_joined(o["spec"]["userData"]) for o in _manifest_objects(template) if o.get("kind") == "EC2NodeClass"]
        for lt in resources(template, "AWS::EC2::LaunchTemplate").values():
            data = lt["Properties"]["LaunchTemplateData"]
            if data.get("InstanceType", "").startswith("trn"):
                datas.append(_joined(data["UserData"]))
        assert datas
        for data in datas:
            assert data.startswith(f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{eks_user_data.BOUNDARY}"')
            assert data.endswith(f"--{eks_user_data.BOUNDARY}--\n")
            assert _shell_part(data).startswith("#!")


# -- the program as a node runs it ------------------------------------------------------------------------

STANDINS = {
    # Each records its arguments; findmnt lists one Lustre mount (FSX_SOURCE at FSX_TARGET) and, polled, ends.
    "lctl": 'echo "lctl $*" >> "$CALLS"',
    "lfs": 'echo "lfs $*" >> "$CALLS"',
    "modprobe": 'echo "modprobe $*" >> "$CALLS"',
    "systemctl": 'echo "systemctl $*" >> "$CALLS"',
    "dnf": 'echo "dnf $*" >> "$CALLS"',
    "findmnt": 'case "$*" in *--poll*) exit 0 ;; esac; echo "$FSX_TARGET $FSX_SOURCE"',
}


def _run_as_node(tmp_path: Path, text: str, *, target: str, source: str, command: list[str]) -> list[str]:
    """Run the user data's lustre_tuning install line (or ``command``) against a root under tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in STANDINS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    program = tmp_path / "lustre_tuning.sh"
    program.write_text(node.source("lustre_tuning.sh"))
    program.chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LUSTRE_TUNING_ROOT": str(tmp_path / "root"),
           "CALLS": str(calls), "FSX_TARGET": target, "FSX_SOURCE": source}
    args = command or ["install", *(f"{k}={v}" for k, v in _settings(text).items())]
    done = subprocess.run(["bash", str(program), *args], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize(("variant", "backend", "instance_type"), [
    ("trn1n.32xlarge+trn1.2xlarge", "batch", "trn1.2xlarge"),
    ("trn1n.32xlarge+trn1.2xlarge", "eks", "trn1n.32xlarge"),
    ("trn2.48xlarge+trn2u.48xlarge", "parallelcluster", "trn2.48xlarge"),
    ("trn1.32xlarge", "instance", "trn1.2xlarge"),
])
def test_the_node_writes_the_module_options_a_unit_and_sets_every_parameter_after_the_mount(
    tmp_path, variant, backend, instance_type
):
    (text,) = [t for b, _, it, t in node_user_data(variant) if b == backend and it == instance_type]
    eks = backend == "eks"
    target = "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/fsx/mount" if eks else "/fsx"
    source = f"10.0.0.5@tcp:/{TOKEN}" if eks else "10.0.0.5@tcp:/abcdefgh"
    root = tmp_path / "root"
    calls = _run_as_node(tmp_path, text, target=target, source=source, command=[])
    modules, params = guide_tuning(instance_type)
    modprobe = root / "etc/modprobe.d/trainium-lustre.conf"
    if modules:
        assert modprobe.read_text().splitlines()[1:] == modules
    else:
        assert not modprobe.exists()
    assert "systemctl enable --now trainium-lustre-tuning.service" in calls
    assert ("modprobe lustre" in calls) == eks
    unit = root / "etc/systemd/system/trainium-lustre-tuning.service"
    assert f"ExecStart={root}/usr/local/sbin/trainium-lustre-tuning watch" in unit.read_text()
    tuner = root / "usr/local/sbin/trainium-lustre-tuning"
    assert tuner.read_text() == node.source("lustre_tuning.sh") and tuner.stat().st_mode & stat.S_IXUSR
    if shutil.which("systemd-analyze"):
        verified = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
        assert verified.returncode == 0, verified.stderr
    # The service's pass (after every mount, at every boot): each parameter, then the layout on a directory it
    # creates under the file system's mount (the host's /fsx, or a pod's mount of that file system on EKS).
    # On EKS the settings name the file system by its mount name: a mount whose source ends in it is tuned.
    mounted = root / target.lstrip("/")
    mounted.mkdir(parents=True)
    # /checkpoints as the storage stack's checkpoint export makes it: FSx's association creates it, root's, 755.
    (mounted / "checkpoints").mkdir(mode=0o755)
    calls = _run_as_node(tmp_path, text, target=str(mounted), source=source, command=["apply"])
    applied = [c for c in calls if c.startswith(("lctl", "lfs"))]
    assert applied[-len(params) - 2:] == [
        *(f"lctl set_param {p}" for p in params),
        f"lfs setstripe {' '.join(LAYOUT)} {mounted}/checkpoints",
        f"lfs setstripe {' '.join(LAYOUT)} {mounted}/datasets",
    ]
    assert stat.S_IMODE((mounted / "checkpoints").stat().st_mode) == 0o1777
    # A directory that exists keeps its layout: a second pass sets the parameters again, the layout not.
    again = _run_as_node(tmp_path, text, target=str(mounted), source=source, command=["apply"])
    assert [c for c in again[len(calls):] if c.startswith("lfs")] == []


def test_another_file_system_is_not_tuned(tmp_path):
    (text,) = [t for b, _, _, t in node_user_data("trn1.32xlarge") if b == "instance"]
    _run_as_node(tmp_path, text, target="/fsx", source="10.0.0.5@tcp:/abcdefgh", command=[])
    other = tmp_path / "other"
    other.mkdir()
    calls = _run_as_node(tmp_path, text, target=str(other), source="10.0.0.5@tcp:/abcdefgh", command=["apply"])
    assert not [c for c in calls if c.startswith("lfs")] and not (other / "checkpoints").exists()


def test_without_storage_no_node_is_tuned():
    """No file system, nothing to tune: no OnNodeStart on Slurm queues (as `trn` renders the cluster for the
    pcluster CLI), no tuning in a Batch node's user data."""
    import yaml

    from tests.support.helpers import config_with
    from trainium_cdk.app.dist.parallelcluster import fetched_digests
    from trainium_cdk.app.parallelcluster.cluster_config import render_cluster_yaml
    from trainium_cdk.constructs.batch_node import node_setup
    from trainium_cdk.facts.catalog import DEFAULT_CATALOG

    config = config_with(backends=["parallelcluster"], storage={
        "enabled": False, "deployment_type": "SCRATCH_2", "throughput_mb_per_tib": None, "capacity_gib": 2400})
    queues = yaml.safe_load(render_cluster_yaml(config, fetched_digests(config)))["Scheduling"]["SlurmQueues"]
    assert queues and all("OnNodeStart" not in q["CustomActions"] for q in queues)
    stored = config_with(backends=["parallelcluster"])
    with_storage = yaml.safe_load(render_cluster_yaml(stored, fetched_digests(stored)))
    (queue,) = with_storage["Scheduling"]["SlurmQueues"]
    assert queue["CustomActions"]["OnNodeStart"]["Script"].endswith("/trainium/lustre_tuning.sh")
    assert TUNER_PATH not in node_setup(DEFAULT_CATALOG.get("trn1.32xlarge"), None).program
