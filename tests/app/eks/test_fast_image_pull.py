"""EKS Trainium nodes cut the image pull out of the time to first step: nodeadm's FastImagePull (the SOCI
snapshotter's parallel pull and unpack the AL2023 EKS AMI ships) on a root volume with the throughput nodeadm asks
for, and a pull of the deployment's training images started at boot (node/prepull_images.sh). Read from the
synthesized EC2NodeClass (Karpenter) and launch template (managed node groups): the user data parsed as a MIME
archive the way Karpenter and nodeadm take it apart, the NodeConfig validated against nodeadm's own schema
(tests/data/nodeadm, with its source), the pre-pulled images compared with the track's and the config's, the
node role checked for ECR pulls, and the pre-pull script run against stand-ins of systemd-run, aws and nerdctl.
"""

from __future__ import annotations

import email
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.app.test_neuron_tracks import RAW as TRACK_RAW
from tests.app.test_neuron_tracks import _manifest_objects
from tests.support import paths
from tests.support.helpers import resources, synth, template_text
from tests.support.reachability import manifest_objects
from tests.unit.node.test_node_programs import shellcheck
from trainium_cdk.app.config import build_config
from trainium_cdk.facts import versions
from trainium_cdk.runtime import eks_user_data

NODEADM = paths.DATA / "nodeadm"
RAW = {"backends": ["eks"], "storage": {"enabled": False}}
OWN_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:v1"
ECR_READ = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AmazonEC2ContainerRegistryReadOnly"]]}


def parts(user_data: str) -> list[tuple[str, str]]:
    """(content type, body) of every part of a MIME multi-part user data document, in order."""
    message = email.message_from_string(user_data)
    assert message.is_multipart(), user_data[:200]
    return [(p.get_content_type(), p.get_payload()) for p in message.walk() if not p.is_multipart()]


def node_configs(user_data: str) -> list[dict[str, Any]]:
    """The NodeConfig objects of the user data (every part of nodeadm's content type)."""
    found = []
    for content_type, body in parts(user_data):
        if content_type == eks_user_data.NODE_CONFIG_CONTENT_TYPE:
            found += [o for o in yaml.safe_load_all(body) if o]
    return found


def prepulled(user_data: str, template: dict[str, Any] | None = None) -> list[str]:
    """The images the user data's pre-pull part pulls at boot (none without one): it names an SSM parameter,
    whose value in ``template`` lists them (the parameter's name when no template is given)."""
    found = []
    for content_type, body in parts(user_data):
        if content_type == eks_user_data.SHELL_CONTENT_TYPE and "trn-prepull-images" in body:
            (line,) = [x for x in body.splitlines() if x.startswith(f"{eks_user_data.PREPULL_PARAMETER_VARIABLE}=")]
            name = shlex.split(line.split("=", 1)[1])[0]
            if template is None:
                found.append(name)
                continue
            (value,) = [r["Properties"]["Value"] for r in resources(template, "AWS::SSM::Parameter").values()
                        if r["Properties"].get("Name") == name]
            found += template_text(value).split()
    return found


# The image URIs of CDK assets, known only at deploy (a token in the template).
DEPLOY_TIME = "<token>"


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load((NODEADM / "node.eks.aws_nodeconfigs.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def validate_node_config(config: dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(config, _schema())
    assert (config["apiVersion"], config["kind"]) == ("node.eks.aws/v1alpha1", "NodeConfig")
    known = set(json.loads((NODEADM / "features.json").read_text())["features"])
    assert set(config["spec"]["featureGates"]) <= known


def test_our_node_config_is_one_nodeadm_accepts():
    import jsonschema

    (config,) = node_configs(eks_user_data.mime(eks_user_data.node_config_parts(fast_image_pull=True)) or "")
    validate_node_config(config)
    assert config["spec"]["featureGates"] == {"FastImagePull": True}
    # The schema check is not vacuous: a wrong type is refused.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**config, "spec": {"featureGates": {"FastImagePull": "yes"}}}, _schema())


def test_parts_join_in_one_document_node_config_first():
    """Features add parts; mime() joins them, NodeConfig parts first (nodeadm merges them in order)."""
    assert eks_user_data.mime([]) is None
    assert eks_user_data.node_config_parts(fast_image_pull=False) == [] == eks_user_data.prepull_parts(None)
    assert eks_user_data.root_volume_throughput(fast_image_pull=False) is None
    shell = (eks_user_data.SHELL_CONTENT_TYPE, "#!/bin/bash\necho tuned\n")
    text = eks_user_data.mime([shell, *eks_user_data.node_config_parts(fast_image_pull=True)]) or ""
    assert text.endswith(f"--{eks_user_data.BOUNDARY}--\n")
    assert [t for t, _ in parts(text)] == [eks_user_data.NODE_CONFIG_CONTENT_TYPE, eks_user_data.SHELL_CONTENT_TYPE]
    assert parts(text)[1][1] == shell[1]


def _config(track: str, **eks: Any) -> Any:
    raw = dict(TRACK_RAW[track]) if track == "native" else {**RAW}
    return build_config({**raw, "backends": ["eks"], "storage": {"enabled": False},
                         "eks": {**raw.get("eks", {}), **eks}, "workloads": {"image": OWN_IMAGE}})


def _node_classes(config: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    template = synth(config, nag=False).template_json("eks")
    return template, [o for o in _manifest_objects(template) if o.get("kind") == "EC2NodeClass"]


@pytest.fixture(scope="module", params=["xla", "native"])
def karpenter(request) -> tuple[str, Any, dict[str, Any], list[dict[str, Any]]]:
    config = _config(request.param, prepull_images=True, example_images=True)
    return (request.param, config, *_node_classes(config))


def test_without_example_images_the_nodes_pull_the_tracks_image_and_the_configs_once():
    """The default builds no image: the example jobs run in the track's image, listed once."""
    template, node_classes = _node_classes(_config("xla", prepull_images=True))
    image = f"public.ecr.aws/neuron/pytorch-training-neuronx:{versions.NEURON_TRACKS['xla'].training_image_tag}"
    for node_class in node_classes:
        assert prepulled(node_class["spec"]["userData"], template) == [image, OWN_IMAGE]


def test_karpenter_nodes_pull_the_tracks_image_fast_from_boot(karpenter):
    track, config, template, node_classes = karpenter
    assert node_classes
    for node_class in node_classes:
        spec = node_class["spec"]
        (volume,) = spec["blockDeviceMappings"]
        assert volume["ebs"]["throughput"] == 600 == eks_user_data.FAST_IMAGE_PULL_ROOT_VOLUME_THROUGHPUT
        assert volume["ebs"]["volumeType"] == "gp3"
        # Karpenter reads a MIME archive as its parts and puts its own NodeConfig first (bootstrap/nodeadm.go).
        assert spec["userData"].startswith("MIME-Version:")
        (node_config,) = node_configs(spec["userData"])
        validate_node_config(node_config)
        assert node_config["spec"]["featureGates"] == {"FastImagePull": True}
        # The track's Neuron image, the base every image of the project is built FROM, then the config's own.
        image = f"public.ecr.aws/neuron/pytorch-training-neuronx:{versions.NEURON_TRACKS[track].training_image_tag}"
        # Then the example images, CDK assets whose URIs are known at deploy: the list is a parameter's value.
        (first, own, *examples) = prepulled(spec["userData"], template)
        assert [first, own] == [image, OWN_IMAGE] and examples and set(examples) == {DEPLOY_TIME}
        assert config.neuron_track.name == track
        scripts = [b for t, b in parts(spec["userData"]) if t == eks_user_data.SHELL_CONTENT_TYPE]
        # The pre-pull; on the native track first the driver install (its AMI release predates its Neuron release).
        assert len(scripts) == 1 + versions.NEURON_TRACKS[track].eks_ami_predates_driver
        for script in scripts:
            assert shellcheck(script, "bash") == ""
    # The nodes may pull from ECR: the node role the node classes name carries the ECR read policy.
    roles = _node_class_roles(template)
    assert roles
    for logical in roles:
        assert ECR_READ in template["Resources"][logical]["Properties"]["ManagedPolicyArns"]


def test_karpenter_nodes_without_either_cut_get_no_user_data_of_ours():
    _, node_classes = _node_classes(_config("xla", fast_image_pull=False, prepull_images=False))
    for node_class in node_classes:
        spec = node_class["spec"]
        assert "userData" not in spec and "throughput" not in spec["blockDeviceMappings"][0]["ebs"]
    # Each cut alone: the other's part goes.
    (node_class, *_) = _node_classes(_config("xla", prepull_images=False))[1]
    assert prepulled(node_class["spec"]["userData"]) == [] and node_configs(node_class["spec"]["userData"])


@pytest.fixture(scope="module", params=[True, False], ids=["on", "off"])
def managed(request) -> tuple[bool, dict[str, Any], list[dict[str, Any]]]:
    config = build_config({**RAW, "workloads": {"image": OWN_IMAGE},
                           "eks": {"capacity": "managed", "fast_image_pull": request.param, "prepull_images": request.param}})
    template = synth(config, nag=False).template_json("eks")
    groups = [r["Properties"] for r in resources(template, "AWS::EKS::Nodegroup").values()
              if r["Properties"].get("AmiType") == "AL2023_x86_64_NEURON"]
    assert groups
    return request.param, template, groups


def test_managed_node_groups_pull_fast_from_boot(managed):
    on, template, groups = managed
    for group in groups:
        data = template["Resources"][group["LaunchTemplate"]["Id"]["Ref"]]["Properties"]["LaunchTemplateData"]
        (volume,) = data["BlockDeviceMappings"]
        if not on:
            assert "UserData" not in data and "Throughput" not in volume["Ebs"]
            continue
        assert volume["Ebs"]["Throughput"] == 600
        # Plain text in the template, base64 for EC2; EKS requires MIME multi-part and adds its own NodeConfig.
        (text,) = data["UserData"].values() if isinstance(data["UserData"], dict) else [data["UserData"]]
        assert isinstance(text, str), data["UserData"]
        (node_config,) = node_configs(text)
        validate_node_config(node_config)
        assert prepulled(text, template)[:2] == [versions.neuron_public_training_image("xla"), OWN_IMAGE]
        role = group["NodeRole"]["Fn::GetAtt"][0]
        assert ECR_READ in template["Resources"][role]["Properties"]["ManagedPolicyArns"]


def test_batch_nodes_keep_their_own_user_data_and_volume():
    """Batch nodes run containers through ECS, not nodeadm: nothing of this reaches them."""
    template = synth(build_config({"backends": ["batch"], "storage": {"enabled": False}}),
                     nag=False).template_with_nested("batch")
    assert resources(template, "AWS::EC2::LaunchTemplate")
    for resource in resources(template, "AWS::EC2::LaunchTemplate").values():
        data = resource["Properties"]["LaunchTemplateData"]
        assert "Throughput" not in data["BlockDeviceMappings"][0]["Ebs"]
        assert "trn-prepull-images" not in template_text(data["UserData"]["Fn::Base64"])


# -- the pre-pull script, run against stand-ins ----------------------------------------------------------------

# aws answers the parameter's value for ssm get-parameter, a password for ecr get-login-password.
STAND_IN = ('#!/bin/bash\necho "$(basename "$0") $*" >> "$CALLS"\n'
            'if [[ "$(basename "$0")" == aws ]]; then [[ "$1" == ssm ]] && echo "$IMAGES" || echo secret; fi\n')


def _run(tmp_path: Path, script: str, *args: str, containerd: str, images: str = "") -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("systemd-run", "aws", "nerdctl"):
        (bin_dir / name).write_text(STAND_IN)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "config.toml").write_text(containerd)
    (tmp_path / "part").write_text(script)
    calls = tmp_path / "calls"
    calls.write_text("")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), "IMAGES": images,
           "TRN_CONTAINERD_CONFIG": str(tmp_path / "config.toml")}
    subprocess.run(["bash", str(tmp_path / "part"), *args], check=True, env=env, capture_output=True, text=True)
    return calls.read_text().splitlines()


def test_the_prepull_hands_itself_to_systemd_after_nodeadm_run_and_pulls_where_kubelet_looks(tmp_path):
    config = _config("xla", prepull_images=True)
    from trainium_cdk.app.adapters.eks import node_user_data

    (script,) = [b for t, b in parts(node_user_data(config, config.compute_groups[0], None) or "") if t == eks_user_data.SHELL_CONTENT_TYPE]
    # At boot (cloud-init): one transient unit after nodeadm's run phase, nothing pulled yet.
    (boot,) = _run(tmp_path, script, containerd="")
    assert boot.startswith("systemd-run --no-block --unit=trn-prepull-images ")
    assert "--property=After=nodeadm-run.service" in boot and boot.endswith(f"{tmp_path / 'part'} --pull")
    # In that unit: into containerd's k8s.io namespace (the CRI's) and the snapshotter nodeadm gave the CRI;
    # a login for the private ECR registry only.
    base = versions.neuron_public_training_image("xla")
    images = f"{base} {OWN_IMAGE}"
    calls = _run(tmp_path, script, "--pull", containerd='[plugins]\nsnapshotter = "soci"\n', images=images)
    # The images from the deployment's parameter, in its region; the login is a pipeline (aws ecr
    # get-login-password | nerdctl login): its two commands start together.
    assert calls.pop(0) == ("aws ssm get-parameter --region us-west-2 --name /trainium-eks/prepull-images "
                            "--query Parameter.Value --output text")
    assert [calls[0], sorted(calls[1:3]), calls[3]] == [
        f"nerdctl --namespace k8s.io pull --snapshotter soci --quiet {base}",
        ["aws ecr get-login-password --region us-west-2",
         "nerdctl login --username AWS --password-stdin https://123456789012.dkr.ecr.us-west-2.amazonaws.com"],
        f"nerdctl --namespace k8s.io pull --snapshotter soci --quiet {OWN_IMAGE}",
    ]
    assert len(calls) == 4
    assert _run(tmp_path, script, "--pull", containerd="", images=images)[1].startswith(
        "nerdctl --namespace k8s.io pull --snapshotter overlayfs ")


def test_the_nodes_may_read_the_image_list_and_nothing_else_of_ssm(karpenter, managed):
    """The pre-pull reads its list with the node's own role: every Trainium node role may get that one parameter."""
    on, managed_template, groups = managed
    for template, roles, region in [
        (karpenter[2], _node_class_roles(karpenter[2]), karpenter[1].region),
        (managed_template, [g["NodeRole"]["Fn::GetAtt"][0] for g in groups] if on else [], "us-west-2"),
    ]:
        (parameter,) = [k for k, r in resources(template, "AWS::SSM::Parameter").items()
                        if r["Properties"].get("Name") == "/trainium-eks/prepull-images"] if roles else [None]
        for role in roles:
            statements = [s for p in resources(template, "AWS::IAM::Policy").values()
                          if {"Ref": role} in p["Properties"]["Roles"]
                          for s in p["Properties"]["PolicyDocument"]["Statement"]
                          if any(a.startswith("ssm:") for a in _list(s["Action"]))]
            (statement,) = statements
            assert "ssm:GetParameter" in statement["Action"] and statement["Effect"] == "Allow"
            assert statement["Resource"] == {"Fn::Join": ["", [
                "arn:", {"Ref": "AWS::Partition"}, f":ssm:{region}:", {"Ref": "AWS::AccountId"}, ":parameter",
                {"Ref": parameter}]]}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _node_class_roles(template: dict[str, Any]) -> list[str]:
    """The roles the EC2NodeClasses name (spec.role: the role's Ref)."""
    return sorted({o["spec"]["role"]["Ref"] for r in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
                   for o in manifest_objects(r["Properties"]["Manifest"]) if o.get("kind") == "EC2NodeClass"})
