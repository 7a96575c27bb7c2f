"""Each exported construct as an importing CDK app builds it: alone in a bare stack, under an id of the
app's choosing (never this app's "Eks", "Batch", ...), on an imported VPC, imported security groups and an
imported cluster wherever it takes them, with cdk-nag's AwsSolutions and NIST 800-53 rev 5 checks on (a finding not
acknowledged fails the synth). One synth per construct, each a module-scoped fixture."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import cdk8s
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from tests.e2e.test_package import readme_example
from tests.meta.test_toolchain import recommended_flags
from tests.support import node_files
from tests.support.helpers import CDK_CONTEXT, add_nag_packs, config_with, helm_chart_name, new_outdir, resources
from trainium_cdk import (
    DEFAULT_CATALOG,
    BatchRoles,
    BatchTaskRules,
    ClusterAutoscaler,
    ClusterAutoscalerOptions,
    ClusterObservability,
    ConfigError,
    EfaLaunchTemplate,
    GroupNodes,
    KarpenterController,
    KarpenterOptions,
    LustreStorage,
    NodePoolProps,
    SlurmAccountingDatabase,
    SlurmCluster,
    TrainingImageRepository,
    TrainingNetwork,
    TrainingWorkloads,
    TrainingWorkloadsOptions,
    TrainiumBatch,
    TrainiumCluster,
    TrainiumNodeGroup,
    TrainiumNodePools,
)
from trainium_cdk.app.adapters.parallelcluster import cluster_settings
from trainium_cdk.constructs.api_access import ApiAccessHost
from trainium_cdk.constructs.dev_instance import DevInstance
from trainium_cdk.constructs.nag import NagAcknowledgments
from trainium_cdk.constructs.network import ComputePlacement
from trainium_cdk.facts.versions import KARPENTER_AMI_ALIAS

ENV = cdk.Environment(account="123456789012", region="us-west-2")
STACK = "Alone"
VPC_ID = "vpc-0a1b2c3d4e5f60718"
PRIVATE_SUBNETS = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]
PUBLIC_SUBNETS = ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"]
EFA_GROUP = "sg-0ccccccccccccccc1"
DEFAULT_GROUP = "sg-0ddddddddddddddd1"
CLUSTER_GROUP = "sg-0eeeeeeeeeeeeeee1"
CLUSTER_NAME = "their-cluster"
TRN1 = DEFAULT_CATALOG.get("trn1.32xlarge")


class Imported:
    """What an importing app has from elsewhere: a VPC, its groups, a cluster, a file system."""

    def __init__(self, stack: cdk.Stack) -> None:
        self.vpc = ec2.Vpc.from_vpc_attributes(
            stack, "TheirVpc", vpc_id=VPC_ID, availability_zones=["us-west-2a", "us-west-2b"],
            private_subnet_ids=PRIVATE_SUBNETS, public_subnet_ids=PUBLIC_SUBNETS, vpc_cidr_block="10.20.0.0/16",
        )
        self.efa_group = ec2.SecurityGroup.from_security_group_id(stack, "TheirEfaGroup", EFA_GROUP)
        self.subnet = self.vpc.private_subnets[0]

    def cluster(self, stack: cdk.Stack) -> eks.ICluster:
        provider = eks.KubectlProvider.from_kubectl_provider_attributes(
            stack, "TheirKubectl",
            service_token=f"arn:aws:lambda:us-west-2:123456789012:function:{CLUSTER_NAME}-kubectl",
            role=iam.Role.from_role_arn(stack, "TheirKubectlRole", "arn:aws:iam::123456789012:role/kubectl"),
        )
        return eks.Cluster.from_cluster_attributes(
            stack, "TheirCluster", cluster_name=CLUSTER_NAME, cluster_security_group_id=CLUSTER_GROUP,
            vpc=self.vpc, kubectl_provider=provider,
        )

    def file_system(self, stack: cdk.Stack) -> Any:
        return LustreStorage.from_file_system_attributes(
            stack, "TheirFileSystem", file_system_id="fs-0123456789abcdef0", dns_name="fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
            mount_name="abcdefgh", capacity_gib=2400,
            security_group=ec2.SecurityGroup.from_security_group_id(stack, "TheirLustreGroup", "sg-0fffffffffffffff1"),
        )


def synth_alone(
    build: Callable[[cdk.Stack, Imported], Any], context: dict[str, Any] = CDK_CONTEXT
) -> tuple[Any, dict[str, Any]]:
    """Build one construct in a bare stack under cdk-nag and synthesize: a finding not acknowledged raises."""
    app = cdk.App(outdir=str(new_outdir()), context=context)
    add_nag_packs(app)
    cdk.Aspects.of(app).add(NagAcknowledgments())  # the library's reasons, as an importing app opts in
    stack = cdk.Stack(app, STACK, env=ENV)
    construct = build(stack, Imported(stack))
    assembly = app.synth()
    return construct, assembly.get_stack_by_name(STACK).template


def test_training_network_alone():
    # It creates the VPC (subnets by AZ ID, placement groups): nothing to import.
    network, template = synth_alone(lambda stack, _: TrainingNetwork(
        stack, "Fabric", az_ids=["usw2-az1", "usw2-az2"],
        compute_groups=[ComputePlacement(name="pretrain", az_ids=("usw2-az1",))],
    ))
    assert len(resources(template, "AWS::EC2::Subnet")) == 4
    assert len(resources(template, "AWS::EC2::PlacementGroup")) == 1


def test_lustre_storage_alone_takes_ids_of_its_path():
    """Its ids follow the construct's path (a second one in the stack gets its own: test_constructs_twice.py); the
    app's storage stack pins the ids it deployed under."""
    _, template = synth_alone(lambda stack, imported: LustreStorage(
        stack, "Datasets", vpc=imported.vpc, subnet=imported.subnet, clients=[imported.efa_group],
    ))
    ((logical_id, file_system),) = resources(template, "AWS::FSx::FileSystem").items()
    assert logical_id.startswith("DatasetsFileSystem")
    assert file_system["Properties"]["SubnetIds"] == [PRIVATE_SUBNETS[0]]
    rules = resources(template, "AWS::EC2::SecurityGroupIngress").values()
    client_rules = [r for r in rules if r["Properties"].get("Description") == "Lustre from FSx"]
    assert {r["Properties"]["GroupId"] for r in client_rules} == {EFA_GROUP}


def test_efa_launch_template_alone():
    _, template = synth_alone(lambda stack, imported: EfaLaunchTemplate(
        stack, "Wiring", spec=TRN1, security_groups=[imported.efa_group], placement_group=None, root_volume_gib=100,
    ))
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    interfaces = lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    assert len(interfaces) == TRN1.efa_interfaces
    assert all(i["Groups"] == [EFA_GROUP] for i in interfaces)


@pytest.fixture(scope="module")
def cluster_alone():
    def build(stack: cdk.Stack, imported: Imported) -> TrainiumCluster:
        cluster = TrainiumCluster(stack, "Training", vpc=imported.vpc, subnets=imported.vpc.private_subnets,
                                  system_nodes=1)
        cluster.add_lustre_storage(imported.file_system(stack), subnet=imported.subnet)
        return cluster

    return synth_alone(build)


def test_trainium_cluster_alone_under_any_id(cluster_alone):
    """Its cdk-nag acknowledgments follow the construct, not this app's id "Eks" (the kubectl provider's
    logical ids embed the construct's path)."""
    cluster, template = cluster_alone
    (eks_cluster,) = resources(template, "AWS::EKS::Cluster").values()
    assert eks_cluster["Properties"]["ResourcesVpcConfig"]["SubnetIds"] == PRIVATE_SUBNETS
    assert not any(k.startswith("Eks") for k in template["Resources"])
    assert "fsx-storage" in cluster.manifests


def test_trainium_cluster_takes_an_imported_file_system(cluster_alone):
    _, template = cluster_alone
    objects = [o for r in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
               for o in json.loads(r["Properties"]["Manifest"])]
    (volume,) = [o for o in objects if o["kind"] == "PersistentVolume"]
    assert volume["spec"]["csi"]["volumeHandle"] == "fs-0123456789abcdef0"
    assert volume["spec"]["csi"]["volumeAttributes"] == {
        "dnsname": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", "mountname": "abcdefgh"}
    rules = resources(template, "AWS::EC2::SecurityGroupIngress").values()
    assert any(r["Properties"]["GroupId"] == "sg-0fffffffffffffff1" for r in rules)


def test_trainium_cluster_keeps_its_creator_admin_only_when_asked(cluster_alone):
    """Off by default (CloudFormation's role no permanent admin); on for a cluster created with it, which EKS would
    otherwise replace."""
    _, template = cluster_alone
    (cluster,) = resources(template, "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["AccessConfig"]["BootstrapClusterCreatorAdminPermissions"] is False
    _, kept = synth_alone(lambda stack, imported: TrainiumCluster(
        stack, "Training", vpc=imported.vpc, subnets=imported.vpc.private_subnets, system_nodes=1, creator_admin=True,
    ))
    (cluster,) = resources(kept, "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["AccessConfig"]["BootstrapClusterCreatorAdminPermissions"] is True


def test_trainium_cluster_in_an_app_with_cdk_init_s_feature_flags():
    """A new app's cdk.json (`cdk init`) sets @aws-cdk/aws-lambda:useCdkManagedLogGroup, which gives the kubectl
    provider's functions log groups of CDK's own under the id the cluster's own took: synth failed."""
    _, template = synth_alone(
        lambda stack, imported: TrainiumCluster(stack, "Training", vpc=imported.vpc,
                                                subnets=imported.vpc.private_subnets, system_nodes=1),
        context=recommended_flags(),
    )
    groups = resources(template, "AWS::Logs::LogGroup").values()
    functions = resources(template, "AWS::Lambda::Function")
    assert len(groups) == len(functions) + 1  # and the control plane's
    assert {g["Properties"]["RetentionInDays"] for g in groups} == {30}


def test_trainium_node_group_alone_on_an_imported_cluster():
    _, template = synth_alone(lambda stack, imported: TrainiumNodeGroup(
        stack, "Pretrain", cluster=imported.cluster(stack), group=GroupNodes("pretrain", TRN1, max_nodes=4),
        subnets=[imported.subnet], security_groups=[imported.efa_group], placement_group=None,
    ))
    (group,) = resources(template, "AWS::EKS::Nodegroup").values()
    assert group["Properties"]["ClusterName"] == CLUSTER_NAME
    assert group["Properties"]["Subnets"] == [PRIVATE_SUBNETS[0]]
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    assert lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"][0]["Groups"] == [EFA_GROUP, CLUSTER_GROUP]


def test_karpenter_controller_alone_on_an_imported_cluster():
    _, template = synth_alone(lambda stack, imported: KarpenterController(
        stack, "Provisioner", cluster=imported.cluster(stack), cluster_name=CLUSTER_NAME,
        options=KarpenterOptions(node_selector={"role": "system"}), after=[],
    ))
    charts = sorted(helm_chart_name(c["Properties"]) for c in resources(template, "Custom::AWSCDK-EKS-HelmChart").values())
    assert charts == ["karpenter", "karpenter-crd"]  # the CRDs from their own chart
    assert len(resources(template, "AWS::Events::Rule")) == 5


def test_cluster_autoscaler_alone_on_an_imported_cluster():
    _, template = synth_alone(lambda stack, imported: ClusterAutoscaler(
        stack, "Scaler", cluster=imported.cluster(stack), cluster_name=CLUSTER_NAME,
        options=ClusterAutoscalerOptions(node_selector={"role": "system"}), after=[],
    ))
    (chart,) = resources(template, "Custom::AWSCDK-EKS-HelmChart").values()
    values = json.loads(chart["Properties"]["Values"])
    assert values["autoDiscovery"] == {"clusterName": CLUSTER_NAME} and values["nodeSelector"] == {"role": "system"}


def test_cluster_observability_alone_on_an_imported_cluster():
    _, template = synth_alone(lambda stack, imported: ClusterObservability(
        stack, "Watch", cluster=imported.cluster(stack), cluster_name=CLUSTER_NAME,
        file_system_id="fs-0123456789abcdef0",
    ))
    addons = {a["Properties"]["AddonName"] for a in resources(template, "AWS::EKS::Addon").values()}
    assert addons == {"eks-node-monitoring-agent", "amazon-cloudwatch-observability"}
    assert len(resources(template, "AWS::CloudWatch::Alarm")) == 2


def test_training_workloads_alone_on_an_imported_cluster():
    _, template = synth_alone(lambda stack, imported: TrainingWorkloads(
        stack, "Jobs", cluster=imported.cluster(stack),
        options=TrainingWorkloadsOptions(data_loader_bucket="their-datasets"),
    ))
    (association,) = resources(template, "AWS::EKS::PodIdentityAssociation").values()
    assert association["Properties"]["ClusterName"] == CLUSTER_NAME
    assert len(resources(template, "AWS::ECR::Repository")) == 1


def test_trainium_batch_alone_with_an_imported_file_system():
    batch, template = synth_alone(lambda stack, imported: TrainiumBatch(
        stack, "Queue", group=GroupNodes("pretrain", TRN1, max_nodes=2), vpc=imported.vpc, subnets=[imported.subnet],
        security_groups=[imported.efa_group], storage=imported.file_system(stack),
    ))
    (environment,) = resources(template, "AWS::Batch::ComputeEnvironment").values()
    assert environment["Properties"]["ComputeResources"]["Subnets"] == [PRIVATE_SUBNETS[0]]
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    assert node_files.header_value(lt["Properties"]["LaunchTemplateData"]["UserData"], "LUSTRE_SOURCE") == [
        "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com@tcp:/abcdefgh"]


def test_batch_roles_alone():
    _, template = synth_alone(lambda stack, _: BatchRoles(stack, "Shared"))
    assert len(resources(template, "AWS::IAM::Role")) == 2  # the execution and job roles: each group has its nodes'
    assert not resources(template, "AWS::IAM::InstanceProfile")


def test_training_image_repository_alone():
    _, template = synth_alone(lambda stack, _: TrainingImageRepository(stack, "TheirImages", images_kept=10))
    (repository,) = resources(template, "AWS::ECR::Repository").values()
    assert repository["Properties"]["ImageTagMutability"] == "IMMUTABLE"
    assert repository["Properties"]["ImageScanningConfiguration"] == {"ScanOnPush": True}
    (rule,) = json.loads(repository["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    assert rule["selection"]["countType"] == "imageCountMoreThan" and rule["selection"]["countNumber"] == 10
    assert repository["DeletionPolicy"] == "Retain"


def test_batch_task_rules_alone_on_an_imported_vpc():
    """An imported VPC has no default security group attribute: the construct takes its id."""
    _, template = synth_alone(lambda stack, imported: BatchTaskRules(
        stack, "Tasks", vpc=imported.vpc, default_security_group_id=DEFAULT_GROUP,
    ))
    groups = {r["Properties"]["GroupId"] for t in ("Ingress", "Egress")
              for r in resources(template, f"AWS::EC2::SecurityGroup{t}").values()}
    assert groups == {DEFAULT_GROUP}


def test_batch_task_rules_without_the_default_group_of_an_imported_vpc_names_the_prop_and_the_path():
    stack = cdk.Stack(cdk.App(), STACK, env=ENV)
    with pytest.raises(ConfigError, match=r"Alone/Tasks\.default_security_group_id"):
        BatchTaskRules(stack, "Tasks", vpc=Imported(stack).vpc)


def test_slurm_cluster_alone():
    # The typed settings as this app's adapter makes them, for one queue named as the app's compute subnet.
    settings = cluster_settings(config_with(backends=["parallelcluster"], compute_groups=[
        {"name": "pretrain", "instance_type": "trn1.32xlarge", "nodes": 2, "az_ids": "usw2-az4"}]))
    slurm, template = synth_alone(lambda stack, imported: SlurmCluster(
        stack, "Hpc", cluster_name="their-slurm", settings=settings,
        head_node_subnet=imported.subnet, compute_subnets={"pretrain": imported.subnet},
        security_group=imported.efa_group,
    ))
    (cluster,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    configuration = cluster["Properties"]["ClusterConfiguration"]
    assert configuration["HeadNode"]["Networking"]["SubnetId"] == PRIVATE_SUBNETS[0]
    (queue,) = configuration["Scheduling"]["SlurmQueues"]
    assert queue["Name"] == "pretrain" and queue["Networking"]["SubnetIds"] == [PRIVATE_SUBNETS[0]]


def test_slurm_cluster_with_teams_alone_keeps_accounting_in_its_database():
    """A cluster with teams needs a database (a one-line error without); with SlurmAccountingDatabase on an imported
    VPC, its configuration names the database and the head node alone joins the database's client group."""
    settings = cluster_settings(config_with(backends=["parallelcluster"], compute_groups=[
        {"name": "pretrain", "instance_type": "trn1.32xlarge", "nodes": 2, "az_ids": "usw2-az4"}],
        teams=[{"name": "research", "share": 3}, {"name": "platform-eng", "share": 1}]))

    def build(stack: cdk.Stack, imported: Imported) -> Any:
        database = SlurmAccountingDatabase(stack, "Accounting", vpc=imported.vpc, subnets=imported.vpc.private_subnets,
                                           database_name="slurm_their_slurm")
        return SlurmCluster(stack, "Hpc", cluster_name="their-slurm", settings=settings, database=database.for_cluster(),
                            head_node_subnet=imported.subnet, compute_subnets={"pretrain": imported.subnet},
                            security_group=imported.efa_group)

    _, template = synth_alone(build)
    (cluster,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    configuration = cluster["Properties"]["ClusterConfiguration"]
    assert configuration["Scheduling"]["SlurmSettings"]["Database"]["DatabaseName"] == "slurm_their_slurm"
    assert len(configuration["HeadNode"]["Networking"]["AdditionalSecurityGroups"]) == 2
    app = cdk.App(outdir=str(new_outdir()))
    stack = cdk.Stack(app, STACK, env=ENV)
    imported = Imported(stack)
    with pytest.raises(ConfigError, match=r"Alone/Hpc\.database = None: a Slurm accounting database"):
        SlurmCluster(stack, "Hpc", cluster_name="their-slurm", settings=settings, head_node_subnet=imported.subnet,
                     compute_subnets={"pretrain": imported.subnet}, security_group=imported.efa_group)


def test_dev_instance_alone_with_an_imported_file_system():
    _, template = synth_alone(lambda stack, imported: DevInstance(
        stack, "Workstation", vpc=imported.vpc, spec=DEFAULT_CATALOG.get("trn1.2xlarge"),
        storage=imported.file_system(stack), storage_client_group=imported.efa_group,
    ))
    (instance,) = resources(template, "AWS::EC2::Instance").values()
    assert instance["Properties"]["SubnetId"] == PRIVATE_SUBNETS[0]
    assert node_files.header_value(instance["Properties"]["UserData"], "LUSTRE_SOURCE") == [
        "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com@tcp:/abcdefgh"]


def test_api_access_host_alone_on_an_imported_group():
    _, template = synth_alone(lambda stack, imported: ApiAccessHost(
        stack, "Bastion", vpc=imported.vpc, subnets=imported.vpc.private_subnets,
        api=ec2.SecurityGroup.from_security_group_id(stack, "TheirApiGroup", CLUSTER_GROUP),
    ))
    (rule,) = resources(template, "AWS::EC2::SecurityGroupIngress").values()
    assert rule["Properties"]["GroupId"] == CLUSTER_GROUP and rule["Properties"]["FromPort"] == 443


def test_trainium_node_pools_alone():
    """A cdk8s chart, not a CDK construct: no cdk-nag; synthesized in a cdk8s App of its own."""
    chart = TrainiumNodePools(cdk8s.App(), "Pools", pools=[NodePoolProps(
        nodes=GroupNodes("pretrain", TRN1, max_nodes=4), node_role="their-node-role", subnet_ids=[PRIVATE_SUBNETS[0]], security_group_ids=[EFA_GROUP],
        ami_alias=KARPENTER_AMI_ALIAS,
    )])
    objects = {o["kind"]: o for o in chart.to_json()}
    assert objects["NodePool"]["spec"]["limits"]["nodes"] == "4"
    assert objects["EC2NodeClass"]["spec"]["role"] == "their-node-role"


@pytest.mark.parametrize("build, path", [
    (lambda s, i: TrainiumCluster(s, "Training", vpc=i.vpc, subnets=i.vpc.private_subnets, system_nodes=0),
     "Alone/Training.system_nodes"),
    (lambda s, i: TrainiumBatch(s, "Queue", group=GroupNodes("g", TRN1, max_nodes=2), vpc=i.vpc, subnets=[],
                                security_groups=[i.efa_group]), "Alone/Queue.subnets"),
    (lambda s, i: TrainiumNodeGroup(s, "Pretrain", cluster=i.cluster(s), group=GroupNodes("g", TRN1, max_nodes=1),
                                    subnets=[i.subnet], security_groups=[i.efa_group], placement_group=None,
                                    min_nodes=2),
     "Alone/Pretrain.min_nodes, max_nodes"),
    (lambda s, i: LustreStorage(s, "Datasets", vpc=i.vpc, subnet=i.subnet, clients=[], capacity_gib=1000),
     "Alone/Datasets.capacity_gib"),
    (lambda s, i: TrainingImageRepository(s, "Images", images_kept=0), "Alone/Images.images_kept"),
])
def test_errors_name_the_construct_path(build, path):
    stack = cdk.Stack(cdk.App(), STACK, env=ENV)
    with pytest.raises(ConfigError) as err:
        build(stack, Imported(stack))
    assert err.value.field == path


def test_the_harness_fails_on_a_finding_not_acknowledged():
    """The checks above would pass vacuously if cdk-nag did not run: a bare bucket has findings."""
    from aws_cdk import aws_s3 as s3

    with pytest.raises(Exception, match="AwsSolutions-S1"):
        synth_alone(lambda stack, _: s3.Bucket(stack, "Plain"))


# -- the README's own app, every id changed --------------------------------------------------------------

README_ID = re.compile(r'\((\s*)(app|stack), "([A-Za-z]+)"')


def test_the_readmes_own_app_synthesizes_under_cdk_nag_with_every_id_changed():
    """The README's compose example (tests/e2e/test_package.py runs it verbatim from the wheel) with each
    construct and stack id renamed, in this process, under cdk-nag: nothing in it leans on "Eks" or "Batch"."""
    source, renamed = README_ID.subn(lambda m: f'({m.group(1)}{m.group(2)}, "Their{m.group(3)}"', readme_example())
    assert renamed == 12  # the stack, its seven constructs, two outputs, the CI role and the data hosts' group
    app_line = "app = cdk.App()\n"
    assert source.count(app_line) == 1
    outdir = new_outdir()
    source = source.replace(app_line, f"app = cdk.App(outdir={str(outdir)!r})\n"
                            "from tests.support.helpers import add_nag_packs\nadd_nag_packs(app)\n")
    # The app's own role (the CI's, which grant_submit_job gives a policy): NIST wants no inline policy on it, the
    # app's call, not the library's.
    assert source.count("app.synth()\n") == 1
    source = source.replace("app.synth()\n", "cdk.Validations.of(ci_role).acknowledge(cdk.Acknowledgment("
                            "id='NIST.800.53.R5-IAMNoInlinePolicy', reason='The CI role of the app'))\napp.synth()\n")
    namespace: dict[str, Any] = {"__name__": "readme_app"}
    exec(compile(source, "README.md (own-app, ids renamed)", "exec"), namespace)  # noqa: S102
    template = json.loads((outdir / "TheirMyTraining.template.json").read_text())
    assert not [k for k in template["Resources"] if k.startswith(("Eks", "Batch", "Storage", "Network"))]
    assert len(resources(template, "AWS::EKS::Cluster")) == 1
    assert len(resources(template, "AWS::Batch::JobQueue")) == 1
    (file_system,) = resources(template, "AWS::FSx::FileSystem")
    assert file_system.startswith("TheirStorageFileSystem")  # of the app's path: the library pins no id
    # The guide's grant_submit_job and connections: the CI role may submit; the data hosts' group reaches Lustre.
    submitting = [p["Properties"]["Roles"] for p in resources(template, "AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]
                  if "batch:SubmitJob" in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])]
    assert submitting == [["ci"]]
    (data_prep,) = [k for k in resources(template, "AWS::EC2::SecurityGroup") if k.startswith("TheirDataPrep")]
    rules = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]
    assert {(r["FromPort"], r["ToPort"]) for r in rules
            if r["SourceSecurityGroupId"] == {"Fn::GetAtt": [data_prep, "GroupId"]}} == {(988, 988), (1018, 1023)}


def test_an_imported_file_system_is_a_construct_of_the_tree_as_aws_cdk_libs_imports_are():
    """``from_file_system_attributes(scope, id, ...)``, as ``TrainiumCluster.from_cluster_attributes``: under its id,
    an IConnectable whose default port is Lustre's (it took no scope and returned a dataclass)."""
    stack = cdk.Stack(cdk.App(), STACK, env=ENV)
    imported = Imported(stack).file_system(stack)
    assert stack.node.find_child("TheirFileSystem") is imported
    assert imported.connections.default_port.to_string() == "988"
    assert imported.file_system_id == "fs-0123456789abcdef0" and imported.capacity_gib == 2400


def test_the_librarys_acknowledgments_are_the_importing_apps_to_take():
    """The acknowledgments are an opt-in (issue 48: every importing app inherited 96 of them): without the
    NagAcknowledgments aspect, cdk-nag reports what the library would have acknowledged; with it, nothing."""
    def synth(opt_in: bool) -> None:
        app = cdk.App(outdir=str(new_outdir()), context=CDK_CONTEXT)
        add_nag_packs(app)
        if opt_in:
            cdk.Aspects.of(app).add(NagAcknowledgments())
        stack = cdk.Stack(app, STACK, env=ENV)
        imported = Imported(stack)
        ApiAccessHost(stack, "Bastion", vpc=imported.vpc, subnets=imported.vpc.private_subnets,
                      api=ec2.SecurityGroup.from_security_group_id(stack, "TheirApiGroup", CLUSTER_GROUP))
        app.synth()

    with pytest.raises(Exception, match="NIST.800.53.R5-IAMNoInlinePolicy"):
        synth(opt_in=False)
    synth(opt_in=True)
