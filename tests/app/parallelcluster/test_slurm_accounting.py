"""Slurm accounting and fair share from the config's teams (issue 46): the slurm.conf settings and sacctmgr commands
(trainium_cdk/parallelcluster/accounting.py), the config's members, and what a cluster without teams keeps.

The settings and commands run on a real Slurm in tests/e2e/test_slurm_fair_share.py."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json

import pytest
from aws_cdk.assertions import Match

from tests.app.parallelcluster.test_parallelcluster_provider import UPSTREAM
from tests.support.helpers import cfn_lint_errors, config_with, nag_violations, quality_synth, resources, synth
from tests.support.pcluster_schema import update_changes, validate_many, venv_or_skip
from trainium_cdk.app.adapters.parallelcluster import slurm_accounting
from trainium_cdk.app.config import ConfigError
from trainium_cdk.app.stacks.parallelcluster_stack import DATABASE_LOGICAL_IDS
from trainium_cdk.facts.versions import AURORA_MYSQL_VERSION
from trainium_cdk.parallelcluster import cluster_configuration
from trainium_cdk.parallelcluster.accounting import (
    SlurmAccount,
    SlurmAccounting,
    custom_slurm_settings,
    database_name,
    render_commands,
    sacctmgr_commands,
)
from trainium_cdk.parallelcluster.parts import S3Object, SlurmDatabase

TEAMS = [{"name": "research", "share": 3, "slurm_users": ["alice", "carol"]},
         {"name": "platform-eng", "share": 1, "slurm_users": ["bob", "carol"]}]
ACCOUNTING = SlurmAccounting(
    accounts=(SlurmAccount("research", 3, ("alice", "carol")), SlurmAccount("platform-eng", 1, ("bob", "carol"))),
    submitter="ubuntu",
)


def _associations(commands: list[tuple[str, ...]]) -> dict[str, tuple[list[str], str]]:
    """User -> (its accounts, its default account), as the `add user` and `modify user` commands leave them."""
    found: dict[str, tuple[list[str], str]] = {}
    for command in commands:
        if command[:2] == ("add", "user"):
            fields = dict(word.split("=", 1) for word in command[3:])
            found[command[2]] = (fields["Account"].split(","), fields["DefaultAccount"])
        elif command[:2] == ("modify", "user") and command[3] != "name=root":
            user = command[3].removeprefix("name=")
            assert found[user][1] == command[-1].removeprefix("DefaultAccount=")  # the same default, set again
    return found


def test_one_account_per_team_with_its_share_as_fairshare():
    commands = sacctmgr_commands(ACCOUNTING)
    added = {c[2]: dict(w.split("=", 1) for w in c[3:]) for c in commands if c[:2] == ("add", "account")}
    assert {name: fields["Fairshare"] for name, fields in added.items()} == {"research": "3", "platform-eng": "1"}
    assert {fields["Organization"] for fields in added.values()} == {"trainium-cdk"}
    # A share changed in the config reaches an account that exists (`add` leaves it as it was).
    modified = [c for c in commands if c[:2] == ("modify", "account")]
    assert modified == [("modify", "account", "where", "name=research", "set", "Fairshare=3"),
                        ("modify", "account", "where", "name=platform-eng", "set", "Fairshare=1")]
    # Every account exists before a user is added to it; root's own association takes no share.
    first_user = next(i for i, c in enumerate(commands) if c[:2] == ("add", "user"))
    assert all(c[:2] != ("add", "account") for c in commands[first_user:])
    assert commands[0] == ("modify", "user", "where", "name=root", "account=root", "set", "Fairshare=parent")


def test_members_and_the_submitter_get_their_teams_accounts():
    assert _associations(sacctmgr_commands(ACCOUNTING)) == {
        # trn submit runs sbatch --account=TEAM as the OS user: it belongs to every team.
        "ubuntu": (["research", "platform-eng"], "research"),
        "alice": (["research"], "research"),
        "bob": (["platform-eng"], "platform-eng"),
        # In two teams: both accounts, the first team that lists the user its default.
        "carol": (["research", "platform-eng"], "research"),
    }


def test_the_commands_file_is_the_commands_a_line_each_words_by_tabs():
    text = render_commands(ACCOUNTING)
    assert [tuple(line.split("\t")) for line in text.splitlines()] == sacctmgr_commands(ACCOUNTING)
    assert text.endswith("\n") and "\n\n" not in text


def test_the_slurm_conf_settings_are_multifactor_fair_share_with_enforced_accounting():
    settings = custom_slurm_settings()
    assert all(len(s) == 1 for s in settings)  # ParallelCluster's form: one setting per mapping
    merged = {k: v for s in settings for k, v in s.items()}
    assert merged["PriorityType"] == "priority/multifactor"
    assert merged["AccountingStorageEnforce"] == "associations,limits,qos"
    # Fair share decides; age adds at most a tenth of it; usage decays (a half-life of 0 would keep it forever).
    assert int(merged["PriorityWeightFairshare"]) == 10 * int(merged["PriorityWeightAge"]) > 0
    assert merged["PriorityDecayHalfLife"] == "1-0"
    assert not {k.lower() for k in merged} & {"accountingstoragetype", "accountingstoragehost", "jobacctgathertype"}


@pytest.mark.parametrize(("team", "words"), [
    ({"name": "a", "share": 1, "slurm_users": ["root"]}, ["teams[0].slurm_users", "'root'", "other than root"]),
    ({"name": "a", "share": 1, "slurm_users": ["Alice"]}, ["teams[0].slurm_users", "'Alice'", "POSIX user name"]),
    ({"name": "a", "share": 1, "slurm_users": ["al ice"]}, ["teams[0].slurm_users", "'al ice'"]),
    ({"name": "a", "share": 1, "slurm_users": ["al", "al"]}, ["teams[0].slurm_users", "each user once"]),
    ({"name": "a", "share": 1, "slurm_users": "alice"}, ["teams[0].slurm_users", "'alice'"]),
])
def test_members_that_are_no_posix_user_name_are_refused_in_one_line(team, words):
    with pytest.raises(ConfigError) as caught:
        config_with(backends=["parallelcluster"], teams=[team])
    message = str(caught.value)
    assert "\n" not in message
    assert all(word in message for word in words), message


def test_two_teams_with_a_name_and_a_share_are_a_complete_config():
    config = config_with(backends=["parallelcluster"], teams=[{"name": "research", "share": 3},
                                                              {"name": "platform-eng", "share": 1}])
    assert [t.slurm_users for t in config.teams] == [(), ()]


def test_accounting_refuses_what_sacctmgr_would_misread():
    with pytest.raises(ConfigError, match="POSIX user name other than root"):
        SlurmAccount("research", 3, ("root",))
    with pytest.raises(ConfigError, match="at least one team"):
        SlurmAccounting(accounts=(), submitter="ubuntu")
    with pytest.raises(ConfigError, match="a team name"):
        SlurmAccount("a\tb", 1)


# -- the cluster with teams: its database, its configuration, ParallelCluster's checks --------------------------------

TWO_TEAMS = config_with(backends=["parallelcluster"], teams=TEAMS)
SECRET_ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:t-slurm-db-AbCdEf"
CLIENT_GROUP = "sg-0aaaaaaaaaaaaaaaa"


def _concrete(config):
    """Ids as they look after deploy (ParallelCluster's schema checks their form), with a database for teams."""
    from tests.app.parallelcluster.test_parallelcluster import concrete_ids

    ids = concrete_ids(config)
    return dataclasses.replace(
        ids,
        database=SlurmDatabase(uri="t-db.cluster-abc.us-west-2.rds.amazonaws.com:3306", user_name="slurm",
                               password_secret_arn=SECRET_ARN, database_name=database_name("t-cluster"),
                               client_security_group_id=CLIENT_GROUP),
        accounting=S3Object(ids.setup_script.bucket, "t-cluster/" + "5" * 64 + ".tsv", "6" * 64),
    )


@pytest.fixture(scope="module")
def teams_app():
    return quality_synth(TWO_TEAMS)


@pytest.fixture(scope="module")
def pcluster():
    return venv_or_skip("ParallelCluster's schema")


def _configuration(result) -> dict:
    (cluster,) = resources(result.template_json("parallelcluster"), "Custom::PclusterCluster").values()
    return cluster["Properties"]["ClusterConfiguration"]


def test_with_teams_the_configuration_passes_parallelcluster_s_schema_and_deny_lists(pcluster):
    with_teams = cluster_configuration(TWO_TEAMS, _concrete(TWO_TEAMS))
    # Each deny-list, shown to catch what it lists: one setting ParallelCluster owns, one its accounting owns.
    denied = copy.deepcopy(with_teams)
    denied["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"] += [{"SlurmctldHost": "x"},
                                                                      {"AccountingStorageType": "accounting_storage/none"}]
    schemed = validate_many({"t-teams": with_teams, "t-denied": denied})
    assert schemed["t-teams"].errors == [] and schemed["t-teams"].warnings == []
    errors = schemed["t-denied"].errors
    assert [e.split(" is not allowed: ")[-1] for e in errors] == ["SlurmctldHost", "AccountingStorageType"], errors


def test_with_teams_the_cluster_keeps_its_accounting_in_the_stack_s_database(teams_app):
    configuration = _configuration(teams_app)
    settings = configuration["Scheduling"]["SlurmSettings"]
    database = settings["Database"]
    assert database["UserName"] == "slurm" and database["DatabaseName"] == "slurm_t_cluster"
    assert database["PasswordSecretArn"] == {"Ref": DATABASE_LOGICAL_IDS["secret"]}
    assert database["Uri"] == {"Fn::Join": ["", [
        {"Fn::GetAtt": [DATABASE_LOGICAL_IDS["cluster"], "Endpoint.Address"]}, ":3306"]]}
    assert settings["CustomSlurmSettings"] == custom_slurm_settings()
    assert settings["QueueUpdateStrategy"] == "DRAIN"
    # Aurora Serverless v2 (MySQL, the pinned long-term release) in the private subnets, encrypted, snapshot on delete.
    cluster = teams_app.template_json("parallelcluster")["Resources"][DATABASE_LOGICAL_IDS["cluster"]]
    assert (cluster["DeletionPolicy"], cluster["UpdateReplacePolicy"]) == ("Snapshot", "Snapshot")
    assert Match.object_like({
        "Engine": "aurora-mysql", "EngineVersion": f"8.0.mysql_aurora.{AURORA_MYSQL_VERSION}", "StorageEncrypted": True,
        "Port": 3306, "ServerlessV2ScalingConfiguration": {"MinCapacity": 0.5, "MaxCapacity": 4},
        "MasterUsername": "slurm",
    }).test(cluster["Properties"]).is_success
    (writer,) = resources(teams_app.template_json("parallelcluster"), "AWS::RDS::DBInstance").values()
    assert writer["Properties"]["DBInstanceClass"] == "db.serverless"
    assert writer["Properties"]["PubliclyAccessible"] is False
    (subnets,) = resources(teams_app.template_json("parallelcluster"), "AWS::RDS::DBSubnetGroup").values()
    network = teams_app.template_json("network")
    private = {k for k, r in network["Resources"].items() if r["Type"] == "AWS::EC2::Subnet"
               and {"Key": "aws-cdk:subnet-type", "Value": "Private"} in r["Properties"].get("Tags", [])}
    assert len(subnets["Properties"]["SubnetIds"]) == len(private) >= 2
    # The password: a plain string (ParallelCluster writes the secret's string into slurmdbd.conf), kept with the
    # snapshot, letters and digits only.
    secret = resources(teams_app.template_json("parallelcluster"), "AWS::SecretsManager::Secret")
    generate = secret[DATABASE_LOGICAL_IDS["secret"]]["Properties"]["GenerateSecretString"]
    assert "SecretStringTemplate" not in generate and "GenerateStringKey" not in generate
    assert generate["ExcludePunctuation"] is True and generate["PasswordLength"] == 32


def test_only_the_head_node_reaches_the_database_and_only_on_3306(teams_app):
    template = teams_app.template_json("parallelcluster")
    configuration = _configuration(teams_app)
    client = {"Fn::GetAtt": [DATABASE_LOGICAL_IDS["client_security_group"], "GroupId"]}
    assert client in configuration["HeadNode"]["Networking"]["AdditionalSecurityGroups"]
    assert all(client not in q["Networking"]["AdditionalSecurityGroups"]
               for q in configuration["Scheduling"]["SlurmQueues"])
    database = {"Fn::GetAtt": [DATABASE_LOGICAL_IDS["security_group"], "GroupId"]}
    ingress = [{k: r["Properties"].get(k) for k in ("IpProtocol", "FromPort", "ToPort", "SourceSecurityGroupId")}
               for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()
               if r["Properties"]["GroupId"] == database]
    assert ingress == [{"IpProtocol": "tcp", "FromPort": 3306, "ToPort": 3306, "SourceSecurityGroupId": client}]
    groups = resources(template, "AWS::EC2::SecurityGroup")
    database_group = groups[DATABASE_LOGICAL_IDS["security_group"]]["Properties"]
    assert "SecurityGroupIngress" not in database_group  # no other way in
    # Neither group opens anything to the internet.
    for group in (database_group, groups[DATABASE_LOGICAL_IDS["client_security_group"]]["Properties"]):
        assert all(rule.get("CidrIp") in (None, "255.255.255.255/32") for rule in group.get("SecurityGroupEgress", []))


def test_the_head_node_applies_the_teams_accounts_it_fetches_checked(teams_app):
    configuration = _configuration(teams_app)
    args = configuration["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]
    accounting = args[args.index("--accounting") + 1]
    # SHA256@s3://...: the file of the teams' commands, its digest known at synth.
    parts = accounting["Fn::Join"][1]
    digest = hashlib.sha256(render_commands(slurm_accounting(TWO_TEAMS)).encode()).hexdigest()
    assert parts[0] == f"{digest}@s3://"
    # Compute nodes get none of it.
    for queue in configuration["Scheduling"]["SlurmQueues"]:
        assert "--accounting" not in queue["CustomActions"]["OnNodeConfigured"]["Args"]


def test_without_teams_the_cluster_has_no_database_and_no_accounting():
    lone = config_with(backends=["parallelcluster"])
    configuration = cluster_configuration(lone, _concrete(lone))
    assert configuration["Scheduling"]["SlurmSettings"] == {"QueueUpdateStrategy": "DRAIN"}
    assert "--accounting" not in configuration["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"]
    assert CLIENT_GROUP not in configuration["HeadNode"]["Networking"]["AdditionalSecurityGroups"]
    result = synth(lone, nag=False)
    template = result.template_json("parallelcluster")
    assert resources(template, "AWS::RDS::DBCluster") == {} and resources(template, "AWS::SecretsManager::Secret") == {}


def test_the_provider_may_describe_the_database_secret_and_no_other(teams_app):
    from tests.app.parallelcluster.test_parallelcluster_provider import provider_role
    from tests.support.iam_model import Statements

    template = teams_app.template_json("parallelcluster")
    (provider,) = resources(template, "AWS::CloudFormation::Stack").values()
    refs = {"AWS::AccountId": "123456789012", "AWS::Region": "us-west-2", DATABASE_LOGICAL_IDS["secret"]: SECRET_ARN}
    for logical_id in resources(template, "AWS::IAM::ManagedPolicy"):
        refs[logical_id] = f"arn:aws:iam::123456789012:policy/t-parallelcluster-{logical_id}-A1B2C3"
    role = provider_role(template, provider, refs)
    assert role.allows("secretsmanager:DescribeSecret", SECRET_ARN)
    assert not role.allows("secretsmanager:GetSecretValue", SECRET_ARN)
    assert not role.allows("secretsmanager:DescribeSecret", SECRET_ARN.replace("t-slurm-db", "other"))
    # ParallelCluster's own statements do not: without the stack's policy, a WARNING in validationMessages.
    upstream = Statements(json.loads(UPSTREAM.read_text())["statements"], refs)
    assert not upstream.allows("secretsmanager:DescribeSecret", SECRET_ARN)


def test_the_database_keeps_its_logical_ids(teams_app):
    template = teams_app.template_json("parallelcluster")
    kinds = {"cluster": "AWS::RDS::DBCluster", "writer": "AWS::RDS::DBInstance", "subnets": "AWS::RDS::DBSubnetGroup",
             "parameters": "AWS::RDS::DBClusterParameterGroup", "secret": "AWS::SecretsManager::Secret",
             "security_group": "AWS::EC2::SecurityGroup", "client_security_group": "AWS::EC2::SecurityGroup"}
    assert {name: template["Resources"][logical_id]["Type"] for name, logical_id in DATABASE_LOGICAL_IDS.items()} == kinds


def test_a_running_cluster_takes_teams_with_its_compute_fleet_stopped(pcluster):
    lone = config_with(backends=["parallelcluster"])
    ids = _concrete(TWO_TEAMS)
    before = cluster_configuration(lone, dataclasses.replace(ids, database=None, accounting=None))
    after = cluster_configuration(TWO_TEAMS, ids)
    changes = update_changes({"teams": (before, after)}, cluster_name="t-cluster")["teams"]
    policies = {c.path.split(".")[2] if c.path.startswith("Scheduling.SlurmSettings") else c.path: c.policy
                for c in changes}
    assert [c.path for c in changes if c.policy == "UNSUPPORTED"] == []
    assert policies["Database"] == "COMPUTE_FLEET_STOP"
    assert policies["CustomSlurmSettings"] == "SUPPORTED"


def test_cfn_lint_and_cdk_nag_clean_with_teams(teams_app):
    assert nag_violations(teams_app) == []
    for path in teams_app.template_paths():
        assert cfn_lint_errors(path, teams_app.config.region) == []


def test_the_bill_counts_the_accounting_database_at_its_least_capacity():
    from trainium_cdk.app.cost import bill

    (line,) = [line for line in bill(TWO_TEAMS).idle if "accounting database" in line.item]
    assert (line.quantity, round(line.hourly, 3), line.assumed) == (0.5, 0.06, True)  # 0.5 ACU x $0.12
    assert not any("accounting database" in line.item for line in bill(config_with(backends=["parallelcluster"])).idle)
