"""LustreStorage: FSx for Lustre settings, Lustre ports, data repository, removal policy, stable IDs."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from tests.support.helpers import config_with, resources, synth
from trainium_cdk.app.stacks.storage_stack import (
    ASSOCIATION_LOGICAL_ID,
    BUCKET_LOGICAL_ID,
    CHECKPOINT_ASSOCIATION_LOGICAL_ID,
    CHECKPOINT_BUCKET_LOGICAL_ID,
    FILE_SYSTEM_LOGICAL_ID,
    SECURITY_GROUP_LOGICAL_ID,
)
from trainium_cdk.facts.names import CHECKPOINT_ROOT


@pytest.fixture(scope="module")
def default():
    return synth(config_with())


@pytest.fixture(scope="module")
def with_repository():
    return synth(config_with(storage={"capacity_gib": 4800, "data_repository": {"s3_prefix": "datasets/"}}))


@pytest.fixture(scope="module")
def linked():
    """The data repository of config/default.yaml: a created bucket linked to /s3."""
    return synth(config_with(storage={"data_repository": {"file_system_path": "/s3"}}))


@pytest.fixture(scope="module")
def scratch_existing_bucket():
    return synth(
        config_with(
            storage={
                "deployment_type": "SCRATCH_2", "throughput_mb_per_tib": None, "compression": "NONE",
                "removal_policy": "destroy",
                "data_repository": {"bucket_name": "my-datasets", "file_system_path": "/datasets", "auto_export": False},
            }
        )
    )


@pytest.fixture(scope="module")
def unlinked():
    """A file system linked to no bucket: FSx's backups are its protection."""
    return synth(config_with(storage={"checkpoint_export": False}))


def test_file_system_defaults(default):
    default.template("storage").has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "FileSystemType": "LUSTRE",
            "FileSystemTypeVersion": "2.15",
            "StorageCapacity": 1200,
            "LustreConfiguration": {
                "DeploymentType": "PERSISTENT_2",
                "PerUnitStorageThroughput": 250,
                "DataCompressionType": "LZ4",
                # Linked to S3 (the checkpoint export): FSx backs up no such file system.
                "AutomaticBackupRetentionDays": 0,
            },
        },
    )


def test_a_file_system_linked_to_no_bucket_keeps_a_week_of_backups(unlinked):
    (fs,) = resources(unlinked.template_json("storage"), "AWS::FSx::FileSystem").values()
    assert fs["Properties"]["LustreConfiguration"]["AutomaticBackupRetentionDays"] == 7
    assert not resources(unlinked.template_json("storage"), "AWS::FSx::DataRepositoryAssociation")


def test_checkpoints_are_exported_to_a_retained_versioned_bucket(default):
    """/fsx/checkpoints (every backend's checkpoint root) outlives the file system: FSx exports each new,
    changed or deleted file to a bucket of the storage stack; a deleted or overwritten checkpoint stays a day."""
    template = default.template_json("storage")
    (association,) = resources(template, "AWS::FSx::DataRepositoryAssociation").items()
    assert association[0] == CHECKPOINT_ASSOCIATION_LOGICAL_ID
    assert association[1]["Properties"] == {
        "FileSystemId": {"Ref": FILE_SYSTEM_LOGICAL_ID},
        "FileSystemPath": "/checkpoints",
        "DataRepositoryPath": {"Fn::Join": ["", ["s3://", {"Ref": CHECKPOINT_BUCKET_LOGICAL_ID}, "/"]]},
        "BatchImportMetaDataOnCreate": True,  # a file system created later lists the checkpoints again
        "S3": {"AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
        "Tags": [{"Key": "project", "Value": "t"}],
    }
    assert CHECKPOINT_ROOT == "/fsx" + association[1]["Properties"]["FileSystemPath"]
    bucket = template["Resources"][CHECKPOINT_BUCKET_LOGICAL_ID]
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    (rule,) = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert template["Outputs"]["CheckpointBucketName"]["Value"] == {"Ref": CHECKPOINT_BUCKET_LOGICAL_ID}


def test_turning_on_the_export_updates_the_file_system_in_place(unlinked, default):
    """A deployment from before the export (backups on), judged by `make plan`'s rule (CloudFormation's create-only
    properties): its file system stops its backups in place before the association that needs it is created (the
    association refers to the file system: CloudFormation updates it first), and nothing is replaced."""
    from tools.plan import changes

    lines = changes(unlinked.outdir, default.outdir)
    (policy,) = [k for k in resources(default.template_json("storage"), "AWS::S3::BucketPolicy")
                 if k.startswith(CHECKPOINT_BUCKET_LOGICAL_ID)]
    assert lines[:4] == [
        "t-storage:",
        f"  + {CHECKPOINT_BUCKET_LOGICAL_ID} (AWS::S3::Bucket)",
        f"  + {policy} (AWS::S3::BucketPolicy)",
        f"  + {CHECKPOINT_ASSOCIATION_LOGICAL_ID} (AWS::FSx::DataRepositoryAssociation)",
    ]
    assert f"  ~ {FILE_SYSTEM_LOGICAL_ID} (AWS::FSx::FileSystem)" in lines
    assert not [line for line in lines if line.lstrip().startswith(("!", "-"))]


@pytest.mark.parametrize("storage, message", [
    ({"backup_retention_days": 7},
     "storage.backup_retention_days = 7: 0 or unset with checkpoint_export: FSx backs up no file system linked to S3"),
    ({"backup_retention_days": 7, "checkpoint_export": False, "data_repository": {}},
     "storage.backup_retention_days = 7: 0 or unset with data_repository: FSx backs up"),
    ({"data_repository": {"file_system_path": "/"}},
     "storage.data_repository.file_system_path = '/': a path apart from /checkpoints"),
    ({"data_repository": {"file_system_path": "/checkpoints/imported"}},
     "storage.data_repository.file_system_path = '/checkpoints/imported': a path apart from /checkpoints"),
])
def test_the_config_refuses_what_fsx_refuses_in_one_line(storage, message):
    from trainium_cdk.app.config import ConfigError

    with pytest.raises(ConfigError) as error:
        config_with(storage=storage)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_file_system_sits_in_the_compute_subnet(default):
    (fs,) = resources(default.template_json("storage"), "AWS::FSx::FileSystem").values()
    (subnet,) = fs["Properties"]["SubnetIds"]
    assert "privateSubnet1" in str(subnet)  # the usw2-az4 private subnet, imported from the network stack
    assert default.stacks.network.network.compute_subnet("train").availability_zone == "usw2-az4"


def test_stateful_resources_keep_pinned_logical_ids_and_retain(default, with_repository):
    template = default.template_json("storage")
    assert template["Resources"][FILE_SYSTEM_LOGICAL_ID]["Type"] == "AWS::FSx::FileSystem"
    assert template["Resources"][FILE_SYSTEM_LOGICAL_ID]["DeletionPolicy"] == "Retain"
    assert template["Resources"][FILE_SYSTEM_LOGICAL_ID]["UpdateReplacePolicy"] == "Retain"
    assert template["Resources"][SECURITY_GROUP_LOGICAL_ID]["Type"] == "AWS::EC2::SecurityGroup"
    repo = with_repository.template_json("storage")["Resources"]
    assert repo[BUCKET_LOGICAL_ID]["Type"] == "AWS::S3::Bucket"
    assert repo[BUCKET_LOGICAL_ID]["DeletionPolicy"] == "Retain"
    assert repo[ASSOCIATION_LOGICAL_ID]["Type"] == "AWS::FSx::DataRepositoryAssociation"
    assert (FILE_SYSTEM_LOGICAL_ID, BUCKET_LOGICAL_ID, ASSOCIATION_LOGICAL_ID) == (
        "LustreFileSystem", "DataRepositoryBucket", "DataRepositoryAssociation",
    )


def _lustre_rules(template, kind):
    return sorted(
        (r["Properties"]["FromPort"], r["Properties"]["ToPort"])
        for r in resources(template, f"AWS::EC2::SecurityGroup{kind}").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [SECURITY_GROUP_LOGICAL_ID, "GroupId"]}
    )


def test_lustre_ports_open_to_clients_and_itself(default):
    template = default.template_json("storage")
    # 988 and 1018-1023 from the EFA group; from itself the L2 file system opens 988-1023.
    assert _lustre_rules(template, "Ingress") == [(988, 988), (988, 1023), (1018, 1023)]
    assert _lustre_rules(template, "Egress") == [(988, 988), (988, 988), (1018, 1023), (1018, 1023)]
    sources = {
        str(r["Properties"].get("SourceSecurityGroupId"))
        for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()
    }
    assert any("EfaSecurityGroup" in s for s in sources)
    ingress = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]
    assert not any("CidrIp" in r for r in ingress)


def test_clients_accept_lustre_from_the_file_system(default):
    template = default.template_json("storage")
    client_rules = [
        r["Properties"]
        for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()
        if "EfaSecurityGroup" in str(r["Properties"]["GroupId"])
    ]
    assert sorted((r["FromPort"], r["ToPort"]) for r in client_rules) == [(988, 988), (1018, 1023)]


def test_data_repository_association_with_created_bucket(with_repository):
    template = with_repository.template("storage")
    template.has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemPath": "/s3",
            "BatchImportMetaDataOnCreate": True,
            "DataRepositoryPath": {"Fn::Join": ["", ["s3://", {"Ref": BUCKET_LOGICAL_ID}, "/datasets/"]]},
            "S3": {
                "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                "AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
            },
        },
    )
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "PublicAccessBlockConfiguration": Match.object_like({"BlockPublicAcls": True}),
            "VersioningConfiguration": {"Status": "Enabled"},
        },
    )
    template.has_resource_properties("AWS::FSx::FileSystem", {"StorageCapacity": 4800})


def test_scratch_with_existing_bucket(scratch_existing_bucket):
    template = scratch_existing_bucket.template_json("storage")
    (fs,) = resources(template, "AWS::FSx::FileSystem").values()
    assert fs["DeletionPolicy"] == "Delete"
    assert fs["Properties"]["LustreConfiguration"] == {"DeploymentType": "SCRATCH_2", "DataCompressionType": "NONE"}
    assert list(resources(template, "AWS::S3::Bucket")) == [CHECKPOINT_BUCKET_LOGICAL_ID]  # the data's is the user's
    dra = template["Resources"][ASSOCIATION_LOGICAL_ID]
    assert dra["Properties"]["DataRepositoryPath"] == "s3://my-datasets/"
    assert dra["Properties"]["FileSystemPath"] == "/datasets"
    assert "AutoExportPolicy" not in dra["Properties"]["S3"]


def test_the_default_config_links_a_created_bucket_to_s3():
    """`trn sync` works out of the box: config/default.yaml has a data repository (a bucket it creates)."""
    from tests.support.helpers import ROOT
    from trainium_cdk.app.config import DataRepository, load_config

    assert load_config(ROOT / "config" / "default.yaml").storage.data_repository == DataRepository(file_system_path="/s3")


def test_adding_a_data_repository_to_a_deployed_file_system_only_adds(default, linked):
    """A deployment from before the default config had a data repository, judged by `make plan`'s own rule
    (tools/plan.py: create-only properties from CloudFormation's resource schemas): the deploy adds the bucket,
    its policy and the association; the file system and every other resource of every stack stay as they are."""
    from tools.plan import changes

    (policy,) = [k for k in resources(linked.template_json("storage"), "AWS::S3::BucketPolicy")
                 if k.startswith("StorageDataBucket")]
    assert changes(default.outdir, linked.outdir) == [
        "t-storage:",
        f"  + {BUCKET_LOGICAL_ID} (AWS::S3::Bucket)",
        f"  + {policy} (AWS::S3::BucketPolicy)",
        f"  + {ASSOCIATION_LOGICAL_ID} (AWS::FSx::DataRepositoryAssociation)",
    ]


def test_outputs_name_the_file_system(default):
    outputs = default.template_json("storage")["Outputs"]
    assert {"FileSystemId", "FileSystemDnsName", "FileSystemMountName"} <= set(outputs)


def test_lustre_storage_from_its_own_props_alone():
    import aws_cdk as cdk
    from aws_cdk import assertions
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_fsx as fsx

    from trainium_cdk.constructs.storage import DataRepositoryProps, LustreStorage

    stack = cdk.Stack(cdk.App(), "Bare", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc")
    client = ec2.SecurityGroup(stack, "Client", vpc=vpc)
    storage = LustreStorage(
        stack, "Storage", vpc=vpc, subnet=vpc.private_subnets[0], clients=[client], capacity_gib=2400,
        deployment_type=fsx.LustreDeploymentType.SCRATCH_2, throughput_mb_per_tib=None,
        removal_policy=cdk.RemovalPolicy.DESTROY, data_repository=DataRepositoryProps(s3_prefix="datasets/"),
    )
    template = assertions.Template.from_stack(stack)
    (fs,) = template.find_resources("AWS::FSx::FileSystem").values()
    assert fs["DeletionPolicy"] == "Delete"
    assert fs["Properties"]["StorageCapacity"] == 2400
    assert fs["Properties"]["LustreConfiguration"]["DeploymentType"] == "SCRATCH_2"
    assert "PerUnitStorageThroughput" not in fs["Properties"]["LustreConfiguration"]
    assert "AutomaticBackupRetentionDays" not in fs["Properties"]["LustreConfiguration"]  # FSx backs up no scratch
    template.resource_count_is("AWS::S3::Bucket", 1)
    assert (storage.deployment_type, storage.lustre_version, storage.capacity_gib) == ("SCRATCH_2", "2.15", 2400)


@pytest.mark.parametrize(
    "props, field",
    [
        ({"capacity_gib": 1300}, "capacity_gib"),
        ({"throughput_mb_per_tib": 300}, "throughput_mb_per_tib"),
        ({"removal_policy": "SNAPSHOT"}, "removal_policy"),
        ({"backup_retention_days": 91}, "backup_retention_days"),
        ({"backup_retention_days": 7, "deployment_type": "SCRATCH_2"}, "backup_retention_days"),
        ({"backup_retention_days": 7, "data_repository": "datasets/"}, "backup_retention_days"),
    ],
)
def test_lustre_storage_rejects_bad_props_by_name(props, field):
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    from trainium_cdk.constructs.storage import LustreStorage
    from trainium_cdk.errors import ConfigError

    stack = cdk.Stack(cdk.App(), "Bare")
    vpc = ec2.Vpc(stack, "Vpc")
    from aws_cdk import aws_fsx as fsx

    if props.get("data_repository"):
        from trainium_cdk.constructs.storage import DataRepositoryProps

        props = {**props, "data_repository": DataRepositoryProps(s3_prefix=props["data_repository"])}
    if props.get("removal_policy") == "SNAPSHOT":
        props = {"removal_policy": cdk.RemovalPolicy.SNAPSHOT}
    if props.get("deployment_type") == "SCRATCH_2":
        props = {**props, "deployment_type": fsx.LustreDeploymentType.SCRATCH_2, "throughput_mb_per_tib": None,
                 "capacity_gib": 2400}
    with pytest.raises(ConfigError, match=field):
        LustreStorage(stack, "Storage", vpc=vpc, subnet=vpc.private_subnets[0], clients=[], **props)
