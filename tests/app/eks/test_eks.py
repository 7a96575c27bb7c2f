"""EKS backend: cluster, add-ons, and (eks.capacity: managed) one all-EFA Trainium node group per compute
group. The Karpenter path, the default: tests/app/test_capacity_from_zero.py."""

from __future__ import annotations

import json

import pytest

from tests.support.chart_helpers import affinity_types
from tests.support.helpers import (
    US_EAST_2,
    cfn_lint_errors,
    config_with,
    helm_chart_name,
    imported,
    quality_synth,
    resources,
    synth,
    template_text,
)
from tests.support.reachability import Reachability
from trainium_cdk.facts import versions
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, SUPPORTED_TRAINING_TYPES
from trainium_cdk.facts.names import HEALTH_TAINT_KEY, HEALTH_TAINT_VALUE
from trainium_cdk.facts.versions import KUBERNETES_VERSION
from trainium_cdk.runtime.eks_user_data import FAST_IMAGE_PULL_ROOT_VOLUME_THROUGHPUT

# One app holds a group of every type, in us-east-2 where cfn-lint knows Trn1 and Trn2.
AZ = {"trn1.2xlarge": "use2-az2"}


def _group(instance_type: str) -> dict:
    return {
        "name": instance_type.replace(".", "-"),
        "instance_type": instance_type,
        "nodes": 1 if instance_type == "trn1.2xlarge" else 2,
        "max_nodes": 4,
        "az_ids": AZ.get(instance_type, "use2-az3"),
        "root_volume_gib": 300,
    }


@pytest.fixture(scope="module")
def every_type():
    """One app with a compute group of every supported instance type."""
    return quality_synth(config_with(**US_EAST_2, eks={"capacity": "managed"},
                                     compute_groups=[_group(t) for t in SUPPORTED_TRAINING_TYPES]))


@pytest.fixture(scope="module")
def reserved():
    """A capacity reservation, a capacity block, a public endpoint for one CIDR and an admin role."""
    return synth(
        config_with(
            **US_EAST_2,
            compute_groups=[
                {**_group("trn1.32xlarge"), "capacity": {"type": "reservation", "reservation_id": "cr-0aaaaaaaaaaaaaaaa"}},
                {**_group("trn2.48xlarge"), "capacity": {"type": "capacity-block", "reservation_id": "cr-0bbbbbbbbbbbbbbbb"}},
            ],
            eks={
                "capacity": "managed",
                "endpoint_access": "public-and-private", "public_access_cidrs": ["203.0.113.0/24"],
                "admin_role_arns": ["arn:aws:iam::123456789012:role/ml-platform-admin"],
            },
        )
    )


def _launch_template_of(template: dict, group_name: str) -> dict:
    nodegroups = resources(template, "AWS::EKS::Nodegroup")
    (nodegroup,) = [n for n in nodegroups.values() if n["Properties"]["Labels"].get("trainium-cdk/compute-group") == group_name]
    lt_id = nodegroup["Properties"]["LaunchTemplate"]["Id"]["Ref"]
    return template["Resources"][lt_id]["Properties"]["LaunchTemplateData"], nodegroup["Properties"]


def _network_id(result, construct) -> str:
    """The logical id of a network stack's resource (an L1 or an L2's default child)."""
    network = result.stacks.network
    resource = construct if construct.node.default_child is None else construct.node.default_child
    return network.resolve(network.get_logical_id(resource))


def _node_groups(result) -> list[dict]:
    """The security groups of a Trainium node (once imported): the network stack's EFA group and the cluster's."""
    (cluster_id,) = resources(result.template_json("eks"), "AWS::EKS::Cluster")
    efa = _network_id(result, result.stacks.network.network.efa_security_group)
    return [{"Fn::GetAtt": [efa, "GroupId"]}, {"Fn::GetAtt": [cluster_id, "ClusterSecurityGroupId"]}]


def _managed_policy(name: str) -> dict:
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":iam::aws:policy/{name}"]]}


def _policy_names(arns: list) -> set[str]:
    """The names of managed policies, whatever form their ARNs take."""
    return {template_text(arn).rsplit("/", 1)[-1] for arn in arns}


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_launch_template_has_every_efa_interface_on_its_own_card(every_type, instance_type):
    spec = DEFAULT_CATALOG.get(instance_type)
    data, _ = _launch_template_of(every_type.template_json("eks"), _group(instance_type)["name"])
    assert data["InstanceType"] == instance_type
    interfaces = data.get("NetworkInterfaces", [])
    assert len(interfaces) == spec.efa_interfaces
    assert sorted(i["NetworkCardIndex"] for i in interfaces) == list(range(spec.efa_interfaces))
    assert all(i["InterfaceType"] == "efa" for i in interfaces)
    assert [i["DeviceIndex"] for i in interfaces] == ([0] + [1] * (spec.efa_interfaces - 1) if spec.has_efa else [])
    for interface in interfaces:
        assert [imported(every_type, g) for g in interface["Groups"]] == _node_groups(every_type)
    if not spec.has_efa:
        assert [imported(every_type, g) for g in data["SecurityGroupIds"]] == _node_groups(every_type)


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_node_group_one_subnet_neuron_ami_taint_and_sizes(every_type, instance_type):
    data, nodegroup = _launch_template_of(every_type.template_json("eks"), _group(instance_type)["name"])
    assert len(nodegroup["Subnets"]) == 1
    assert nodegroup["AmiType"] == "AL2023_x86_64_NEURON"
    assert "InstanceTypes" not in nodegroup  # the type lives in the launch template
    assert nodegroup["Taints"] == [
        {"Effect": "NO_SCHEDULE", "Key": "aws.amazon.com/neuron", "Value": "true"},
        # Lifted by the node health checker (tests/unit/node/test_node_health.py).
        {"Effect": "NO_SCHEDULE", "Key": HEALTH_TAINT_KEY, "Value": HEALTH_TAINT_VALUE},
    ]
    assert nodegroup["Labels"]["trainium-cdk/instance-type"] == instance_type
    # Nothing runs until a pod asks: Cluster Autoscaler scales the group from zero.
    assert nodegroup["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 4}
    assert data["MetadataOptions"] == {"HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1, "HttpTokens": "required"}
    (root,) = data["BlockDeviceMappings"]
    # The throughput nodeadm's FastImagePull asks for (tests/app/eks/test_fast_image_pull.py).
    assert root["Ebs"] == {"DeleteOnTermination": True, "Encrypted": True, "VolumeSize": 300, "VolumeType": "gp3",
                           "Throughput": FAST_IMAGE_PULL_ROOT_VOLUME_THROUGHPUT}


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_node_group_subnet_is_the_compute_subnet(every_type, instance_type):
    _, nodegroup = _launch_template_of(every_type.template_json("eks"), _group(instance_type)["name"])
    subnet = every_type.stacks.network.network.compute_subnet(_group(instance_type)["name"])
    assert [imported(every_type, s) for s in nodegroup["Subnets"]] == [{"Ref": _network_id(every_type, subnet)}]


@pytest.mark.parametrize("instance_type", SUPPORTED_TRAINING_TYPES)
def test_placement_group_attached_on_demand(every_type, instance_type):
    data, _ = _launch_template_of(every_type.template_json("eks"), _group(instance_type)["name"])
    placement = every_type.stacks.network.network.placement_group(_group(instance_type)["name"])
    assert imported(every_type, data["Placement"]["GroupName"]) == {
        "Fn::GetAtt": [_network_id(every_type, placement), "GroupName"]}
    assert "CapacityReservationSpecification" not in data


def test_no_placement_group_with_a_reservation_or_capacity_block(reserved):
    template = reserved.template_json("eks")
    data, nodegroup = _launch_template_of(template, "trn1-32xlarge")
    assert "Placement" not in data
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaaaaaaaaaaaaaaa"}
    }
    assert nodegroup["CapacityType"] == "ON_DEMAND"
    data, nodegroup = _launch_template_of(template, "trn2-48xlarge")
    assert "Placement" not in data
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert nodegroup["CapacityType"] == "CAPACITY_BLOCK"
    assert len(data["NetworkInterfaces"]) == 16


def test_cluster_version_logging_encryption_and_endpoint(every_type, reserved):
    (cluster,) = resources(every_type.template_json("eks"), "AWS::EKS::Cluster").values()
    props = cluster["Properties"]
    assert props["Version"] == KUBERNETES_VERSION
    assert props["AccessConfig"]["AuthenticationMode"] in ("API", "API_AND_CONFIG_MAP")
    assert {t["Type"] for t in props["Logging"]["ClusterLogging"]["EnabledTypes"]} == {
        "api", "audit", "authenticator", "controllerManager", "scheduler"
    }
    assert props["EncryptionConfig"][0]["Resources"] == ["secrets"]
    vpc_config = props["ResourcesVpcConfig"]
    # Private by default; public only to the CIDRs the config lists.
    assert vpc_config["EndpointPublicAccess"] is False and vpc_config["EndpointPrivateAccess"] is True
    assert "ComputeConfig" not in props or props["ComputeConfig"].get("Enabled") is not True  # not Auto Mode
    (public,) = resources(reserved.template_json("eks"), "AWS::EKS::Cluster").values()
    public_config = public["Properties"]["ResourcesVpcConfig"]
    assert public_config["EndpointPublicAccess"] is True and public_config["EndpointPrivateAccess"] is True
    assert public_config["PublicAccessCidrs"] == ["203.0.113.0/24"]


def test_fsx_csi_role_deletes_and_updates_only_what_it_created(every_type):
    template = every_type.template_json("eks")
    (association,) = [
        a for a in resources(template, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "fsx-csi-controller-sa"
    ]
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    statements = [
        s for p in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    deleting = []
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        deleting += [statement] if "fsx:DeleteFileSystem" in actions else []
        if {"fsx:DeleteFileSystem", "fsx:UpdateFileSystem", "fsx:CreateFileSystem"} & set(actions):
            assert statement["Resource"] == "*"
            assert statement["Condition"]["Null"] in (
                {"aws:ResourceTag/CSIVolumeName": "false"}, {"aws:RequestTag/CSIVolumeName": "false"}
            ), statement
    assert deleting


def test_control_plane_and_kubectl_log_groups_are_created_with_a_retention(every_type):
    template = every_type.template_json("eks")
    groups = [g["Properties"] for g in resources(template, "AWS::Logs::LogGroup").values()]
    assert groups and all("RetentionInDays" in g for g in groups)
    (cluster,) = resources(template, "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["Name"] == "t-eks"
    assert "/aws/eks/t-eks/cluster" in [g.get("LogGroupName") for g in groups]
    functions = resources(template, "AWS::Lambda::Function")
    assert functions
    for logical_id, function in functions.items():
        config = function["Properties"].get("LoggingConfig", {})
        assert "LogGroup" in config, f"{logical_id} logs to a group the stack does not create"


def test_a_private_endpoint_brings_an_access_host_and_a_public_one_none(every_type, reserved):
    """The access host: arm64, IMDSv2, encrypted root, SSM-only role, and an output `trn connect` reads. Who it
    can reach is tests/app/test_reachability.py's."""
    template = every_type.template_json("eks")
    (host,) = resources(template, "AWS::EC2::Instance").values()
    props = host["Properties"]
    assert props["InstanceType"] == "t4g.nano"
    assert props["MetadataOptions"]["HttpTokens"] == "required"
    assert [b["Ebs"]["Encrypted"] for b in props["BlockDeviceMappings"]] == [True]
    image = template["Parameters"][props["ImageId"]["Ref"]]
    assert image["Default"] == "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-6.1-arm64"  # AWS publishes it
    profile = template["Resources"][props["IamInstanceProfile"]["Ref"]]["Properties"]
    role = template["Resources"][profile["Roles"][0]["Ref"]]["Properties"]
    assert "ManagedPolicyArns" not in role  # Session Manager's minimal policy only: no ssm:GetParameter*
    from tests.app.test_instance import assert_session_manager_only

    (policy,) = [p["Properties"] for p in resources(template, "AWS::IAM::Policy").values()
                 if {"Ref": profile["Roles"][0]["Ref"]} in p["Properties"]["Roles"]]
    assert_session_manager_only(policy["PolicyDocument"]["Statement"])
    assert template["Outputs"]["AccessHostId"]["Value"] == {"Ref": next(iter(resources(template, "AWS::EC2::Instance")))}
    public = reserved.template_json("eks")
    assert resources(public, "AWS::EC2::Instance") == {} and "AccessHostId" not in public["Outputs"]


@pytest.mark.parametrize("wide", ["0.0.0.0/0", "0.0.0.0/1", "64.0.0.0/3"])
def test_a_public_endpoint_open_to_most_of_the_internet_is_refused(wide):
    from trainium_cdk.app.config import ConfigError

    with pytest.raises(ConfigError, match=r"public_access_cidrs\[0\] = .*: a network of /8 or narrower"):
        config_with(eks={"endpoint_access": "public-and-private", "public_access_cidrs": [wide]})


@pytest.mark.parametrize("fixture", ["every_type", "karpenter_app"])
def test_no_node_role_carries_the_cni_policy_the_vpc_cni_has_its_own(request, fixture):
    """aws-node's ENI and address rights sat on every node role, so any pod that reached the metadata service
    had them: they move to a Pod Identity role of the aws-node service account, which each node role waits for
    (a node without them and without that role would get no pod addresses)."""
    template = request.getfixturevalue(fixture).template_json("eks")
    (association_id, association), = [
        (k, r) for k, r in resources(template, "AWS::EKS::PodIdentityAssociation").items()
        if r["Properties"]["ServiceAccount"] == "aws-node"]
    assert association["Properties"]["Namespace"] == "kube-system"
    cni_role = template["Resources"][association["Properties"]["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert cni_role["ManagedPolicyArns"] == [_managed_policy("AmazonEKS_CNI_Policy")]
    node_roles = {k: r for k, r in resources(template, "AWS::IAM::Role").items()
                  if [s["Principal"] for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]]
                  == [{"Service": "ec2.amazonaws.com"}]
                  and "AmazonEKSWorkerNodePolicy" in _policy_names(r["Properties"].get("ManagedPolicyArns", []))}
    assert len(node_roles) >= 2  # the system nodes' and the Trainium nodes'
    for logical_id, role in node_roles.items():
        assert "AmazonEKS_CNI_Policy" not in _policy_names(role["Properties"]["ManagedPolicyArns"]), logical_id
        assert association_id in role.get("DependsOn", []), logical_id


@pytest.fixture(scope="module")
def karpenter_app():
    return synth(config_with(**US_EAST_2, compute_groups=[_group("trn1.32xlarge")]), nag=False)


def test_admin_role_gets_an_access_entry(reserved):
    entries = [e["Properties"] for e in resources(reserved.template_json("eks"), "AWS::EKS::AccessEntry").values()]
    admin = [e for e in entries if e["PrincipalArn"] == "arn:aws:iam::123456789012:role/ml-platform-admin"]
    assert len(admin) == 1
    assert admin[0]["AccessPolicies"] == [{
        "AccessScope": {"Type": "cluster"},
        "PolicyArn": {"Fn::Join": ["", [
            "arn:", {"Ref": "AWS::Partition"}, ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"]]},
    }]


def test_system_node_group(every_type):
    nodegroups = resources(every_type.template_json("eks"), "AWS::EKS::Nodegroup").values()
    (system,) = [n["Properties"] for n in nodegroups if n["Properties"]["Labels"].get("trainium-cdk/role") == "system"]
    assert system["InstanceTypes"] == ["m7i.large"]
    assert system["ScalingConfig"]["DesiredSize"] == 2
    assert system["AmiType"] == "AL2023_x86_64_STANDARD"
    assert len(system["Subnets"]) == 2
    assert "Taints" not in system


def test_managed_addons_and_fsx_csi_pod_identity(every_type):
    template = every_type.template_json("eks")
    addons = {a["Properties"]["AddonName"]: a["Properties"] for a in resources(template, "AWS::EKS::Addon").values()}
    assert set(addons) == {
        "vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent", "aws-fsx-csi-driver",
        "eks-node-monitoring-agent", "amazon-cloudwatch-observability",  # tests/app/eks/test_observability.py
    }
    config = json.loads(addons["aws-fsx-csi-driver"]["ConfigurationValues"])
    assert {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"} in config["node"]["tolerations"]
    (association,) = [
        a for a in resources(template, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "fsx-csi-controller-sa"
    ]
    assert association["Properties"]["ServiceAccount"] == "fsx-csi-controller-sa"
    assert association["Properties"]["Namespace"] == "kube-system"
    roles = resources(template, "AWS::IAM::Role")
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    (trust,) = roles[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Action"] == ["sts:AssumeRole", "sts:TagSession"]


def _cluster_objects(template: dict) -> list[dict]:
    """Kubernetes objects the stack applies, from every manifest whose text is fully known at synth."""
    objects = []
    for resource in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        manifest = resource["Properties"]["Manifest"]
        if isinstance(manifest, str):
            objects += json.loads(manifest)
    return objects


def test_exactly_one_neuron_device_plugin_ours(every_type):
    daemon_sets = [o for o in _cluster_objects(every_type.template_json("eks")) if o["kind"] == "DaemonSet"]
    neuron = [
        d for d in daemon_sets
        if any("neuron-device-plugin" in c["image"] for c in d["spec"]["template"]["spec"]["containers"])
    ]
    assert len(neuron) == 1
    assert neuron[0]["spec"]["template"]["spec"]["containers"][0]["image"] == versions.NEURON_DEVICE_PLUGIN_IMAGE
    assert affinity_types(neuron[0]) == list(DEFAULT_CATALOG.neuron_types())


def test_efa_plugin_runs_on_efa_types_only(every_type):
    (efa,) = [
        o for o in _cluster_objects(every_type.template_json("eks"))
        if o["kind"] == "DaemonSet" and "efa" in o["metadata"]["name"]
    ]
    assert affinity_types(efa) == sorted(s.name for s in DEFAULT_CATALOG if s.has_efa)


def test_fsx_volume_is_bound_to_the_storage_stack(every_type):
    objects = [o for stack, objs in Reachability.from_dir(every_type.outdir).manifests() if stack == "t-eks" for o in objs]
    (storage_class,) = [o for o in objects if o["kind"] == "StorageClass"]
    (volume,) = [o for o in objects if o["kind"] == "PersistentVolume"]
    storage = every_type.template_json("storage")
    (file_system,) = resources(storage, "AWS::FSx::FileSystem")
    (lustre_group,) = resources(storage, "AWS::EC2::SecurityGroup")
    subnet = every_type.stacks.network.network.compute_subnet(every_type.config.storage_group.name)  # first group
    parameters = {k: imported(every_type, v) for k, v in storage_class["parameters"].items()}
    assert parameters["subnetId"] == {"Ref": _network_id(every_type, subnet)}
    assert parameters["securityGroupIds"] == {"Fn::GetAtt": [lustre_group, "GroupId"]}
    assert volume["spec"]["accessModes"] == ["ReadWriteMany"]
    assert imported(every_type, volume["spec"]["csi"]["volumeHandle"]) == {"Ref": file_system}
    assert imported(every_type, volume["spec"]["csi"]["volumeAttributes"]["mountname"]) == {
        "Fn::GetAtt": [file_system, "LustreMountName"]}


def test_every_type_in_one_cluster_passes_cfn_lint(every_type):
    for path in every_type.template_paths():
        assert cfn_lint_errors(path, every_type.config.region) == []


def _bare_cluster(**props):
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    from trainium_cdk.constructs.eks_cluster import TrainiumCluster

    stack = cdk.Stack(cdk.App(), "Bare", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc")
    return stack, TrainiumCluster(stack, "Eks", vpc=vpc, subnets=vpc.private_subnets, **props)


def test_a_cluster_alone_can_run_a_neuron_pod():
    """Built from its props in a bare stack, the cluster brings the namespace and both device plugins:
    an importing app needs nothing else for a pod to ask for aws.amazon.com/neuron and EFA devices."""
    from aws_cdk import assertions

    stack, cluster = _bare_cluster(system_nodes=1)
    assert set(cluster.manifests) == {"training-namespace", "neuron-device-plugin", "efa-device-plugin"}
    template = assertions.Template.from_stack(stack)
    daemon_sets = {o["metadata"]["name"]: o for o in _cluster_objects(template.to_json()) if o["kind"] == "DaemonSet"}
    assert set(daemon_sets) == {"neuron-device-plugin", "aws-efa-k8s-device-plugin"}
    assert [c["image"] for c in daemon_sets["neuron-device-plugin"]["spec"]["template"]["spec"]["containers"]] == [
        versions.NEURON_DEVICE_PLUGIN_IMAGE]
    template.has_resource_properties("AWS::EKS::Nodegroup", {"ScalingConfig": {"MinSize": 1, "DesiredSize": 1}})
    # The endpoint is private unless CIDRs are given.
    template.has_resource_properties(
        "AWS::EKS::Cluster", {"ResourcesVpcConfig": {"EndpointPublicAccess": False, "EndpointPrivateAccess": True}}
    )


def test_a_cluster_without_device_plugins_keeps_only_the_namespace():
    _, cluster = _bare_cluster(device_plugins=False)
    assert set(cluster.manifests) == {"training-namespace"}


@pytest.mark.parametrize(
    "props, field", [({"system_nodes": 0}, "system_nodes"), ({"device_plugins": False, "neuron_monitor": True}, "device_plugins")]
)
def test_a_cluster_rejects_bad_props_by_name(props, field):
    from trainium_cdk.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        _bare_cluster(**props)


def test_a_cluster_alone_brings_volcano_unless_told_not_to():
    from aws_cdk import assertions

    stack, cluster = _bare_cluster()
    charts = assertions.Template.from_stack(stack).find_resources("Custom::AWSCDK-EKS-HelmChart")
    assert [helm_chart_name(c["Properties"]) for c in charts.values()] == ["volcano"]
    assert cluster.volcano is not None
    _, without = _bare_cluster(volcano=False)
    assert without.volcano is None
