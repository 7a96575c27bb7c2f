"""`trn connect`: the kubeconfig it writes, and how it fails, against moto (EKS, STS, CloudFormation).

The forwarding itself (the AWS CLI's `aws ssm start-session`, Session Manager, the plugin) is run end to end
by the README's EKS walkthrough (tests/e2e/test_readme_commands.py), whose kubectl reaches the API server only
through it; here the `aws` program is a script where a test needs one.
"""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.support.cli_support import (
    REGION,
    AwsCalls,
    assert_one_clean_line,
    client_error,
    copy_default_config,
    run_cli,
    write_config,
)
from tests.support.walkthrough import free_port
from trainium_cdk.cli.connect import role_arn_of

EKS_STACK = "trainium-eks"
HOST = "i-0123456789abcdef0"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return home


def deployed(aws: AwsCalls, *, access_host: bool, stack: str = EKS_STACK, cluster_name: str = EKS_STACK) -> dict[str, Any]:
    """The EKS stack's outputs (DescribeStacks) and its cluster (moto's EKS)."""
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="cluster", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    cluster = boto3.client("eks", region_name=REGION).create_cluster(
        name=cluster_name, roleArn=role, resourcesVpcConfig={"subnetIds": []})["cluster"]
    outputs = [{"OutputKey": "ClusterName", "OutputValue": cluster_name}]
    if access_host:
        outputs.append({"OutputKey": "AccessHostId", "OutputValue": HOST})

    def answer(params: dict[str, Any]) -> Any:
        if params["StackName"] != stack:
            return client_error("ValidationError", "DescribeStacks", f"Stack with id {params['StackName']} does not exist")
        return {"Stacks": [{"StackName": stack, "StackStatus": "CREATE_COMPLETE",
                            "CreationTime": dt.datetime(2026, 11, 1), "Outputs": outputs}]}

    aws.fake("DescribeStacks", answer)
    return cluster


def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **scripts: str) -> None:
    """PATH holds only these programs (shell scripts) and the system's."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, body in scripts.items():
        path = folder / name.replace("_", "-")
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")


def test_a_public_endpoint_gets_a_kubeconfig_and_no_forwarding(aws, home, tmp_path, monkeypatch):
    cluster = deployed(aws, access_host=False)
    tools(tmp_path, monkeypatch)  # no aws, no plugin: nothing may be started
    kubeconfig = home / ".kube" / "config"
    kubeconfig.parent.mkdir()
    other = {"name": "other", "cluster": {"server": "https://other.example"}}
    kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [other],
                                          "contexts": [{"name": "other", "context": {"cluster": "other"}}],
                                          "current-context": "other"}))
    result = run_cli("connect", "--config", str(copy_default_config(tmp_path)))
    assert result.code == 0, result.err
    doc = yaml.safe_load(kubeconfig.read_text())
    arn = cluster["arn"]
    assert doc["current-context"] == arn
    assert doc["clusters"] == [other, {"name": arn, "cluster": {
        "server": cluster["endpoint"], "certificate-authority-data": cluster["certificateAuthority"]["data"]}}]
    assert {"name": arn, "context": {"cluster": arn, "user": arn, "namespace": "training"}} in doc["contexts"]
    (user,) = [u for u in doc["users"] if u["name"] == arn]
    assert user["user"]["exec"]["args"] == ["--region", REGION, "eks", "get-token", "--cluster-name", EKS_STACK,
                                            "--output", "json"]
    assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    assert "port forwarding" not in result.out


def test_the_caller_without_an_access_entry_is_told_how_to_get_one(aws, home, tmp_path, monkeypatch):
    deployed(aws, access_host=False)
    tools(tmp_path, monkeypatch)
    aws.fake("ListAccessEntries", lambda params: {"accessEntries": ["arn:aws:iam::123456789012:role/someone"]})
    result = run_cli("connect", "--config", str(copy_default_config(tmp_path)))
    assert result.code == 0
    assert "has no access entry on trainium-eks" in result.err
    assert "eks.admin_role_arns" in result.err and "aws iam get-role --role-name" in result.err


def test_a_private_endpoint_needs_the_session_manager_plugin(aws, home, tmp_path, monkeypatch):
    deployed(aws, access_host=True)
    tools(tmp_path, monkeypatch, aws="exit 0")
    result = run_cli("connect", "--port", str(free_port()), "--config", str(copy_default_config(tmp_path)))
    assert_one_clean_line(result, "session-manager-plugin", "is not on PATH", "session-manager-working-with-install-plugin")
    assert not (home / ".kube" / "config").exists()


def test_a_session_that_does_not_start_is_reported_with_its_output(aws, home, tmp_path, monkeypatch):
    deployed(aws, access_host=True)
    tools(tmp_path, monkeypatch, session_manager_plugin="echo 1.2.707.0",
          aws='echo "An error occurred (TargetNotConnected) when calling the StartSession operation: '
              f'{HOST} is not connected." >&2; exit 254')
    result = run_cli("connect", "--port", str(free_port()), "--config", str(copy_default_config(tmp_path)))
    assert_one_clean_line(result, f"through {HOST} did not start", "TargetNotConnected", "ssm:StartSession")
    assert list((home / ".local" / "state" / "trainium-cdk").glob("*.json")) == []  # nothing left to --stop


def test_a_port_in_use_is_refused_before_anything_starts(aws, home, tmp_path, monkeypatch):
    deployed(aws, access_host=True)
    tools(tmp_path, monkeypatch, aws="exit 0", session_manager_plugin="echo 1.2.707.0")
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = run_cli("connect", "--port", str(port), "--config", str(copy_default_config(tmp_path)))
    assert_one_clean_line(result, f"localhost:{port} is in use", "--port")


def test_stop_without_a_forwarding(aws, home, tmp_path):
    result = run_cli("connect", "--stop", "--config", str(copy_default_config(tmp_path)))
    assert (result.code, result.out) == (0, "no port forwarding was running\n")


def test_a_config_without_eks_has_nothing_to_connect_to(aws, home, tmp_path):
    path = write_config(tmp_path, copy_default_config(tmp_path).read_text().replace("backends: [eks]", "backends: [batch]"))
    assert_one_clean_line(run_cli("connect", "--config", str(path)), "deploys no EKS backend")


@pytest.mark.parametrize(("caller", "role"), [
    ("arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_0123/jane", "arn:aws:iam::123456789012:role/AWSReservedSSO_Admin_0123"),
    ("arn:aws-cn:sts::123456789012:assumed-role/ops/ci", "arn:aws-cn:iam::123456789012:role/ops"),
    ("arn:aws:iam::123456789012:user/jane", None),
])
def test_the_role_behind_a_session(caller, role):
    assert role_arn_of(caller) == role


def test_a_job_command_that_cannot_reach_the_api_server_says_to_connect(aws, home, tmp_path):
    """After the forwarding ends (a reboot, Session Manager's idle timeout), the kubeconfig points at a closed
    local port: `trn status` says what to run, on one line."""
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://localhost:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "c", "user": {"token": "x" * 32}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
    }))
    result = run_cli("status", "first-mlp", "--backend", "eks", "--kubeconfig", str(kubeconfig),
                     "--config", str(copy_default_config(tmp_path)))
    assert_one_clean_line(result, "cannot reach the Kubernetes API server", "run `trn connect`")


# -- a cluster of one's own CDK app (the README's own-app example: TrainiumCluster and ApiAccessHost) -------

OWN_STACK, OWN_CLUSTER = "MyTraining", "MyTrainingEksCluster1234"


def test_the_cluster_of_ones_own_app_by_its_stack_reads_no_config(aws, home, tmp_path, monkeypatch):
    cluster = deployed(aws, access_host=False, stack=OWN_STACK, cluster_name=OWN_CLUSTER)
    tools(tmp_path, monkeypatch)
    result = run_cli("connect", "--stack", OWN_STACK, "--region", REGION)  # no config anywhere (aws_env's tmp dir)
    assert result.code == 0, result.err
    doc = yaml.safe_load((home / ".kube" / "config").read_text())
    assert doc["current-context"] == cluster["arn"]
    (user,) = doc["users"]
    assert user["user"]["exec"]["args"] == ["--region", REGION, "eks", "get-token", "--cluster-name", OWN_CLUSTER,
                                            "--output", "json"]
    assert aws.of("DescribeStacks") == [{"StackName": OWN_STACK}]
    assert aws.of("DescribeCluster") == [{"name": OWN_CLUSTER}]


def test_the_private_endpoint_of_ones_own_app_is_forwarded_through_its_access_host(aws, home, tmp_path, monkeypatch):
    deployed(aws, access_host=True, stack=OWN_STACK, cluster_name=OWN_CLUSTER)
    argv = tmp_path / "argv"
    tools(tmp_path, monkeypatch, session_manager_plugin="echo 1.2.707.0",
          aws=f'printf "%s\\n" "$@" > {argv}; echo "TargetNotConnected" >&2; exit 254')
    result = run_cli("connect", "--stack", OWN_STACK, "--region", REGION, "--port", str(free_port()))
    assert_one_clean_line(result, f"through {HOST} did not start")
    sent = argv.read_text().splitlines()
    assert sent[:7] == ["ssm", "start-session", "--region", REGION, "--target", HOST, "--document-name"]


@pytest.mark.parametrize(("argv", "words"), [
    (("--stack", "Missing", "--region", REGION), "stack Missing does not exist in us-west-2: deploy your app first"),
    (("--region", REGION), "--region goes with --stack"),
    (("--stack", OWN_STACK, "-c", "backends=eks"), "--stack reads no config"),
])
def test_what_stack_mode_refuses(aws, home, tmp_path, argv, words):
    deployed(aws, access_host=False, stack=OWN_STACK, cluster_name=OWN_CLUSTER)
    assert_one_clean_line(run_cli("connect", *argv), words)
