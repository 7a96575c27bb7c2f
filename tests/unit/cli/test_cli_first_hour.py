"""`trn` for a new user: --version, cancel on both backends, and a config found outside the repository
(or a one-line error naming --config, never a read of the copy inside site-packages)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tests.support.cli_support import REGION, ROOT, assert_one_clean_line, copy_default_config, run_cli
from tests.unit.cli.test_cli_jobs import DEFINITION, NAMESPACE, QUEUE, batch, config, job, kube, pod, pods  # noqa: F401 - fixtures
from trainium_cdk import __version__
from trainium_cdk.cli._common import find_config_path
from trainium_cdk.cli.jobs import CANCEL_REASON


def test_version(capsys):
    assert run_cli("--version").code == 0
    assert capsys.readouterr().out == f"trn {__version__}\n"


# -- cancel: Batch (moto) ----------------------------------------------------------------------------


def batch_calls(aws):
    return [(op, params) for service, op, params in aws.calls if service == "batch"]


def running_job(aws, batch) -> str:  # noqa: F811
    """A job moto knows; shown RUNNING (moto without Docker finishes every job at once)."""
    job_id = boto3.client("batch", region_name=REGION).submit_job(
        jobName="demo", jobQueue=batch[QUEUE], jobDefinition=batch[DEFINITION],
    )["jobId"]
    aws.fake("DescribeJobs", {"jobs": [{"jobId": job_id, "jobName": "demo", "status": "RUNNING"}]})
    aws.calls.clear()
    return job_id


def test_cancel_terminates_a_running_batch_job(aws, batch, config):  # noqa: F811
    job_id = running_job(aws, batch)
    result = run_cli("cancel", job_id, "--config", str(config))
    assert result.code == 0, result.err
    assert batch_calls(aws) == [
        ("DescribeJobs", {"jobs": [job_id]}),
        ("TerminateJob", {"jobId": job_id, "reason": CANCEL_REASON}),
    ]
    assert result.out == f"terminating job {job_id} (demo, was RUNNING)\n  trn status {job_id} --backend batch --config {config} --wait\n"


def test_cancel_with_a_reason(aws, batch, config):  # noqa: F811
    job_id = running_job(aws, batch)
    assert run_cli("cancel", job_id, "--reason", "wrong data", "--config", str(config)).code == 0
    assert aws.of("TerminateJob") == [{"jobId": job_id, "reason": "wrong data"}]


def test_cancel_a_finished_batch_job_sends_nothing(aws, config):  # noqa: F811
    aws.fake("DescribeJobs", {"jobs": [{"jobId": "j1", "jobName": "demo", "status": "SUCCEEDED"}]})
    result = run_cli("cancel", "j1", "--config", str(config))
    assert result.code == 0 and result.out == "job j1 (demo) is already SUCCEEDED: nothing to cancel\n"
    assert aws.of("TerminateJob") == []


def test_cancel_an_unknown_batch_job_is_one_line(aws, config):  # noqa: F811
    assert_one_clean_line(run_cli("cancel", "nope", "--config", str(config)), "no AWS Batch job nope")
    assert aws.of("TerminateJob") == []


# -- cancel: EKS (the kubernetes client mocked at its API edge) ------------------------------------


def test_cancel_deletes_a_kubernetes_job_with_its_pods(kube, config):  # noqa: F811
    kube.batch.read_namespaced_job_status.return_value = job()
    result = run_cli("cancel", "demo", "--backend", "eks", "--config", str(config))
    assert result.code == 0, result.err
    assert result.out == f"deleted Job {NAMESPACE}/demo and its pods\n"
    kube.batch.delete_namespaced_job.assert_called_once_with(
        name="demo", namespace=NAMESPACE, propagation_policy="Background"
    )
    kube.custom.delete_namespaced_custom_object.assert_not_called()


def test_cancel_deletes_a_volcano_job(kube, config):  # noqa: F811
    from kubernetes.client.exceptions import ApiException

    kube.batch.read_namespaced_job_status.side_effect = ApiException(status=404, reason="Not Found")
    kube.custom.get_namespaced_custom_object.side_effect = None
    kube.custom.get_namespaced_custom_object.return_value = {"status": {"state": {"phase": "Running"}}}
    result = run_cli("cancel", "demo", "--backend", "eks", "--namespace", "team", "--config", str(config))
    assert result.code == 0, result.err
    assert result.out == "deleted Volcano Job team/demo and its pods\n"
    kube.custom.delete_namespaced_custom_object.assert_called_once_with(
        "batch.volcano.sh", "v1alpha1", "team", "jobs", "demo", propagation_policy="Background"
    )
    kube.batch.delete_namespaced_job.assert_not_called()


def test_cancel_a_missing_eks_job_is_one_line_and_deletes_nothing(kube, config):  # noqa: F811
    from kubernetes.client.exceptions import ApiException

    kube.batch.read_namespaced_job_status.side_effect = ApiException(status=404, reason="Not Found")
    assert_one_clean_line(run_cli("cancel", "demo", "--backend", "eks", "--config", str(config)),
                          f"no job demo in namespace {NAMESPACE}")
    kube.batch.delete_namespaced_job.assert_not_called()
    kube.custom.delete_namespaced_custom_object.assert_not_called()


# -- which config ------------------------------------------------------------------------------------


def test_outside_the_repository_without_config_names_config_flag(aws_env, tmp_path):
    result = run_cli("status", "abc")
    assert_one_clean_line(result, "no config found", "--config PATH", "TRN_CONFIG")


def test_the_installed_trn_does_not_read_the_packages_own_config(tmp_path):
    """As the pip-installed entry point runs: outside the repository, from another directory."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "AWS_EC2_METADATA_DISABLED": "true"}
    done = subprocess.run([sys.executable, "-m", "trainium_cdk.cli", "status", "abc"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("trn status: no config found: pass --config PATH") and "site-packages" not in done.stderr


def test_config_lookup_order(tmp_path, monkeypatch):
    monkeypatch.delenv("TRN_CONFIG", raising=False)
    assert find_config_path(tmp_path) is None
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "default.yaml").write_text("project: a\n")
    assert find_config_path(tmp_path) == tmp_path / "config" / "default.yaml"
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"config": "config/prod.yaml"}}))
    assert find_config_path(tmp_path) == tmp_path / "config" / "prod.yaml"  # what cdk synth uses
    monkeypatch.setenv("TRN_CONFIG", "/elsewhere/ml.yaml")
    assert find_config_path(tmp_path) == Path("/elsewhere/ml.yaml")


def test_trn_config_env_is_used(aws_env, tmp_path, monkeypatch):
    path = copy_default_config(tmp_path)
    path.write_text(path.read_text().replace("nodes: 2", "nodes: 9"))  # above max_nodes: proves it was read
    monkeypatch.setenv("TRN_CONFIG", str(path))
    assert_one_clean_line(run_cli("status", "abc"), "configuration error", str(path), "compute_groups[0].nodes = 9")


def test_a_directory_as_config_is_one_line(aws_env, tmp_path):
    assert_one_clean_line(run_cli("doctor", "--config", str(tmp_path)), "configuration error", "not a directory")


def test_trn_c_accepts_the_new_overrides(aws_env, tmp_path):
    path = copy_default_config(tmp_path)
    result = run_cli("submit", "--config", str(path), "-c", "nodes=8", "--dry-run", "-c", "backends=eks,batch")
    assert "max_nodes (4)" in result.err  # without -c max_nodes the group stops at 4
    result = run_cli("status", "x", "--config", str(path), "-c", "max_nodes=x")
    assert_one_clean_line(result, "max_nodes = 'x'")
