"""An importing app that brings a VPC and an EKS cluster it does not own: the "Bringing a VPC and a cluster you
have" example of docs/guide/own-cdk-app.md, read from the page and run in a stack under cdk-nag and cfn-lint. The
test asserts what the imported resources get wired to: the EFA group in the VPC, the compute subnet under the file
system, the Batch compute environment and the node group, the cluster's name and security group in the node
group and its launch template, the device plugins through the cluster's kubectl provider, Lustre open to the
cluster security group, and the CI role's grant. Bad attributes are a ConfigError naming the attribute."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk import aws_iam as iam

import trainium_cdk
from tests.support import readme
from tests.support.helpers import CDK_CONTEXT, add_nag_packs, cfn_lint_errors, new_outdir, resources
from trainium_cdk import (
    DEFAULT_CATALOG,
    ComputePlacement,
    ConfigError,
    KarpenterController,
    KarpenterOptions,
    TrainingNetwork,
    TrainiumCluster,
)

ENV = cdk.Environment(account="111122223333", region="us-west-2")
STACK = "MyTraining"
EXAMPLE_MARKER = "<!-- example:importing"
VPC_ID = "vpc-0a1b2c3d4e5f60718"
COMPUTE_SUBNET, OTHER_SUBNET = "subnet-0aaaaaaaaaaaaaaa4", "subnet-0bbbbbbbbbbbbbbb3"
CLUSTER_GROUP = "sg-0c1d2e3f4a5b6c7d8"
KUBECTL = "arn:aws:lambda:us-west-2:111122223333:function:platform-kubectl-provider"
LUSTRE = ((988, 988), (1018, 1023))


def example() -> str:
    """The page's example, verbatim."""
    text = readme.page("guide/own-cdk-app.md")
    after = text[text.index(EXAMPLE_MARKER):]
    block = after[after.index("```python\n") + len("```python\n"):]
    return block[: block.index("```")]


@pytest.fixture(scope="module")
def app() -> tuple[dict[str, Any], Any]:
    outdir = new_outdir()
    application = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_nag_packs(application)
    cdk.Aspects.of(application).add(trainium_cdk.NagAcknowledgments())
    stack = cdk.Stack(application, STACK, env=ENV)
    # What the page's app.py above the example imports, and its stack.
    names: dict[str, Any] = {"cdk": cdk, "ec2": ec2, "iam": iam, "stack": stack}
    names.update({name: getattr(trainium_cdk, name) for name in trainium_cdk.__all__})
    exec(compile(example(), "own-cdk-app.md (example:importing)", "exec"), names)  # noqa: S102
    # The app's own role, not the library's: what its grant makes is the app's to acknowledge.
    cdk.Validations.of(names["ci_role"]).acknowledge(cdk.Acknowledgment(
        id="NIST.800.53.R5-IAMNoInlinePolicy", reason="The app's role: its grants in a policy of the app's"))
    application.synth()  # cdk-nag runs here: an unacknowledged finding raises
    return json.loads((outdir / f"{STACK}.template.json").read_text()), outdir


def only(template: dict[str, Any], type_name: str) -> tuple[str, dict[str, Any]]:
    (found,) = resources(template, type_name).items()
    return found[0], found[1]["Properties"]


def efa_group(template: dict[str, Any]) -> str:
    (name,) = [k for k, v in resources(template, "AWS::EC2::SecurityGroup").items()
               if v["Properties"]["GroupDescription"].startswith("EFA")]
    return name


def test_the_app_passes_cfn_lint(app):
    _, outdir = app
    assert cfn_lint_errors(outdir / f"{STACK}.template.json", ENV.region) == []


def test_the_efa_group_is_made_in_the_imported_vpc_open_to_itself(app):
    template, _ = app
    efa = efa_group(template)
    props = template["Resources"][efa]["Properties"]
    assert props["VpcId"] == VPC_ID
    assert props["SecurityGroupEgress"] == [{"CidrIp": "0.0.0.0/0", "IpProtocol": "-1", "Description": "All outbound"}]
    self_rules = {(r["Type"], r["Properties"]["IpProtocol"]) for r in template["Resources"].values()
                  if r["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
                  and r["Properties"]["GroupId"] == {"Fn::GetAtt": [efa, "GroupId"]}
                  and {"Fn::GetAtt": [efa, "GroupId"]} in (r["Properties"].get("SourceSecurityGroupId"),
                                                           r["Properties"].get("DestinationSecurityGroupId"))}
    assert self_rules == {("AWS::EC2::SecurityGroupIngress", "-1"), ("AWS::EC2::SecurityGroupEgress", "-1")}


def test_the_compute_groups_subnet_is_the_imported_one_of_its_az(app):
    template, _ = app
    _, fsx = only(template, "AWS::FSx::FileSystem")
    assert fsx["SubnetIds"] == [COMPUTE_SUBNET]
    _, nodegroup = only(template, "AWS::EKS::Nodegroup")
    assert nodegroup["Subnets"] == [COMPUTE_SUBNET]
    _, environment = only(template, "AWS::Batch::ComputeEnvironment")
    assert environment["ComputeResources"]["Subnets"] == [COMPUTE_SUBNET]
    (placement,) = resources(template, "AWS::EC2::PlacementGroup")
    assert environment["ComputeResources"]["PlacementGroup"] == {"Fn::GetAtt": [placement, "GroupName"]}
    batch_template = template["Resources"][environment["ComputeResources"]["LaunchTemplate"]["LaunchTemplateId"]["Ref"]]
    interfaces = batch_template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    assert interfaces and all(i["Groups"] == [{"Fn::GetAtt": [efa_group(template), "GroupId"]}] for i in interfaces)


def test_the_node_group_joins_the_imported_cluster_with_its_security_group(app):
    template, _ = app
    _, nodegroup = only(template, "AWS::EKS::Nodegroup")
    assert nodegroup["ClusterName"] == "platform"
    launch_template = template["Resources"][nodegroup["LaunchTemplate"]["Id"]["Ref"]]["Properties"]
    interfaces = launch_template["LaunchTemplateData"]["NetworkInterfaces"]
    assert len(interfaces) == DEFAULT_CATALOG.get("trn1n.32xlarge").efa_interfaces  # every EFA interface
    for interface in interfaces:
        assert interface["Groups"] == [{"Fn::GetAtt": [efa_group(template), "GroupId"]}, CLUSTER_GROUP]
    (placement,) = resources(template, "AWS::EC2::PlacementGroup")
    assert launch_template["LaunchTemplateData"]["Placement"]["GroupName"] == {"Fn::GetAtt": [placement, "GroupName"]}


def test_the_device_plugins_go_through_the_clusters_kubectl_provider(app):
    template, _ = app
    manifests = [r["Properties"] for r in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values()]
    assert manifests and all(m["ClusterName"] == "platform" and m["ServiceToken"] == KUBECTL for m in manifests)
    kinds = {(d["kind"], d["metadata"]["name"]) for m in manifests for d in json.loads(m["Manifest"])}
    assert ("Namespace", "training") in kinds
    assert {name for kind, name in kinds if kind == "DaemonSet"} >= {"neuron-device-plugin", "aws-efa-k8s-device-plugin"}


def test_lustre_is_open_to_the_imported_cluster_security_group_both_ways(app):
    """FSx's client rules (TCP 988 and 1018-1023, both ways), with the platform's cluster security group, which
    every node of the cluster carries; nothing else touches that group."""
    template, _ = app
    (group,) = [k for k, r in resources(template, "AWS::EC2::SecurityGroup").items()
                if r["Properties"]["GroupDescription"].startswith("FSx for Lustre")]
    fsx = {"Fn::GetAtt": [group, "GroupId"]}

    def key(kind: str, group: Any, peer: Any, low: int, high: int) -> str:
        return json.dumps([kind, group, peer, low, high], sort_keys=True)

    found = {key(r["Type"].rsplit("::", 1)[1], p["GroupId"],
                 p.get("SourceSecurityGroupId") or p.get("DestinationSecurityGroupId"), p["FromPort"], p["ToPort"])
             for r in template["Resources"].values() if r["Type"].startswith("AWS::EC2::SecurityGroup")
             and r["Type"] != "AWS::EC2::SecurityGroup" and CLUSTER_GROUP in (
                 (p := r["Properties"])["GroupId"], p.get("SourceSecurityGroupId"), p.get("DestinationSecurityGroupId"))}
    assert found == {rule for low, high in LUSTRE for rule in (
        key("SecurityGroupIngress", fsx, CLUSTER_GROUP, low, high),
        key("SecurityGroupEgress", fsx, CLUSTER_GROUP, low, high),
        key("SecurityGroupIngress", CLUSTER_GROUP, fsx, low, high),
    )}


def test_the_ci_role_may_submit_to_the_queue(app):
    template, _ = app
    (policy,) = [p["Properties"] for p in resources(template, "AWS::IAM::Policy").values()
                 if p["Properties"].get("Roles") == ["ci"]]
    (statement,) = policy["PolicyDocument"]["Statement"]
    job_definition, _ = only(template, "AWS::Batch::JobDefinition")
    queue, _ = only(template, "AWS::Batch::JobQueue")
    assert statement["Action"] == "batch:SubmitJob"
    assert sorted(json.dumps(r, sort_keys=True) for r in statement["Resource"]) == sorted(
        json.dumps(r, sort_keys=True) for r in ({"Ref": job_definition}, {"Fn::GetAtt": [queue, "JobQueueArn"]}))


@pytest.fixture
def stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(outdir=str(new_outdir()), context=CDK_CONTEXT), STACK, env=ENV)


def vpc_of(stack: cdk.Stack, **subnets: Any) -> ec2.IVpc:
    return ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id=VPC_ID, availability_zones=["usw2-az4", "usw2-az3"],
                                       **subnets)


def test_a_vpc_without_private_subnets_names_the_prop(stack):
    vpc = vpc_of(stack, public_subnet_ids=["subnet-0ccccccccccccccc4", "subnet-0ddddddddddddddd3"])
    with pytest.raises(ConfigError, match=r"^MyTraining/Net\.private_subnets = \[\]: at least one subnet"):
        TrainingNetwork.from_vpc(stack, "Net", vpc=vpc, compute_groups=[])


def test_an_empty_subnet_list_names_the_prop(stack):
    vpc = vpc_of(stack, private_subnet_ids=[COMPUTE_SUBNET, OTHER_SUBNET])
    with pytest.raises(ConfigError, match=r"private_subnets = \[\]"):
        TrainingNetwork.from_vpc(stack, "Net", vpc=vpc, compute_groups=[], private_subnets=[])


def test_a_subnet_without_an_az_names_the_subnet(stack):
    vpc = vpc_of(stack, private_subnet_ids=[COMPUTE_SUBNET, OTHER_SUBNET])
    bare = ec2.Subnet.from_subnet_id(stack, "Bare", OTHER_SUBNET)
    with pytest.raises(ConfigError, match=rf"private_subnets\[1\]\.availability_zone = '{OTHER_SUBNET}'"):
        TrainingNetwork.from_vpc(stack, "Net", vpc=vpc, compute_groups=[], private_subnets=[vpc.private_subnets[0], bare])


def test_a_compute_group_in_an_az_without_a_subnet_names_the_group(stack):
    vpc = vpc_of(stack, private_subnet_ids=[COMPUTE_SUBNET, OTHER_SUBNET])
    with pytest.raises(ConfigError, match=r"compute group pretrain: az_ids = \['usw2-az1'\]"):
        TrainingNetwork.from_vpc(stack, "Net", vpc=vpc,
                                 compute_groups=[ComputePlacement(name="pretrain", az_ids=("usw2-az1",))])


@pytest.mark.parametrize(("attributes", "field"), [
    ({"cluster_name": ""}, "cluster_name"),
    ({"cluster_name": cdk.Fn.import_value("PlatformCluster")}, "cluster_name"),
    ({"cluster_security_group_id": "platform-nodes"}, "cluster_security_group_id"),
    ({"device_plugins": True}, "kubectl_provider"),
])
def test_bad_cluster_attributes_name_the_attribute(stack, attributes, field):
    given = {"cluster_name": "platform", "cluster_security_group_id": CLUSTER_GROUP, **attributes}
    with pytest.raises(ConfigError, match=rf"^MyTraining/Eks\.{field} = "):
        TrainiumCluster.from_cluster_attributes(stack, "Eks", vpc=vpc_of(stack), **given)


def test_the_imported_cluster_is_what_the_node_constructs_take(stack):
    imported = TrainiumCluster.from_cluster_attributes(
        stack, "Eks", cluster_name="platform", cluster_security_group_id=CLUSTER_GROUP, vpc=vpc_of(stack),
    )
    assert imported.cluster_ref.cluster_name == "platform"
    assert imported.cluster_name == "platform"
    assert imported.cni_association is None and imported.volcano is None
    assert [g.security_group_id for g in imported.connections.security_groups] == [CLUSTER_GROUP]


def test_a_kubectl_provider_without_its_role_names_the_attribute(stack):
    """aws-eks-v2's Helm charts grant the provider's role read on their asset: without one, a TypeError."""
    provider = eks_v2.KubectlProvider.from_kubectl_provider_attributes(stack, "Kubectl", service_token=KUBECTL)
    with pytest.raises(ConfigError, match=r"^MyTraining/Eks\.kubectl_provider = .*imported with its role"):
        TrainiumCluster.from_cluster_attributes(stack, "Eks", cluster_name="platform", vpc=vpc_of(stack),
                                                cluster_security_group_id=CLUSTER_GROUP, kubectl_provider=provider)


def test_karpenter_runs_on_the_imported_cluster_through_its_kubectl_provider(stack):
    provider = eks_v2.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Kubectl", service_token=KUBECTL,
        role=iam.Role.from_role_arn(stack, "KubectlRole", "arn:aws:iam::111122223333:role/platform-kubectl"),
    )
    imported = TrainiumCluster.from_cluster_attributes(
        stack, "Eks", cluster_name="platform", cluster_security_group_id=CLUSTER_GROUP, vpc=vpc_of(stack),
        kubectl_provider=provider,
    )
    KarpenterController(stack, "Karpenter", cluster=imported.cluster_ref, cluster_name=imported.cluster_name,
                        options=KarpenterOptions(node_selector={"role": "system"}),
                        cni_association=imported.cni_association)
    template = cdk.assertions.Template.from_stack(stack).to_json()
    charts = {r["Properties"]["Release"]: r["Properties"] for r in
              resources(template, "Custom::AWSCDK-EKS-HelmChart").values()}
    assert set(charts) == {"karpenter", "karpenter-crd"}
    assert all(c["ClusterName"] == "platform" and c["ServiceToken"] == KUBECTL for c in charts.values())
    for kind in ("AWS::EKS::AccessEntry", "AWS::EKS::PodIdentityAssociation"):
        assert [r["Properties"]["ClusterName"] for r in resources(template, kind).values()] == ["platform"]
    # The cluster's VPC CNI is not this app's: the Karpenter node role keeps the CNI policy.
    (node_role,) = [r["Properties"] for r in resources(template, "AWS::IAM::Role").values()
                    if r["Properties"].get("Description") == "Trainium nodes launched by Karpenter"]
    assert {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AmazonEKS_CNI_Policy"]]} \
        in node_role["ManagedPolicyArns"]
