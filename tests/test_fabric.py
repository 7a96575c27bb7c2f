"""The fabric check: report parsing against real nccom-test output (tests/data, with its source), the
verdict against the catalog's EFA line rate, and the job's launch rehearsed on the deployed Batch job
definition with the CLI's overrides and with the Slurm fabric script (stand-ins for neuron-ls and nccom-test, listed in
tests/rehearsal.py: on the container's PATH for Batch, in the host's Neuron tools folder for Slurm)."""

from __future__ import annotations

import io
import shlex
from pathlib import Path

import pytest

from tests.helpers import resources
from tests.rehearsal import Stage, neuron_ls, nccom_test, run_nodes
from tests.test_rehearsal import app, config, run_slurm_script  # noqa: F401
from trainium_cdk.catalog import DEFAULT_CATALOG
from trainium_cdk.cli import main
from trainium_cdk.cli.check import batch_request, eks_job
from trainium_cdk.fabric import fabric_command, node_reports, parse_report, single_host_verdict, verdict
from trainium_cdk.parallelcluster.sbatch import fabric_script_name, render_all

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e

DATA = Path(__file__).resolve().parent / "data"
TWO_TRN1 = DATA / "nccom_test_allr_2x_trn1.txt"
FAILED = DATA / "nccom_test_failure.txt"


def test_parses_the_real_two_node_report():
    rows = parse_report(TWO_TRN1.read_text())
    assert len(rows) == 28 and rows[0].size == 8 and rows[-1].size == 1073741824
    assert rows[-1].busbw_gib_s == 47.09
    assert rows[-1].gbps == pytest.approx(47.09 * 8 * 1.073741824)  # GiB/s -> Gbps


def test_verdict_against_the_line_rate_of_the_catalog():
    rows = parse_report(TWO_TRN1.read_text())
    result, lines = verdict(rows, DEFAULT_CATALOG.get("trn1.32xlarge"))
    assert result == "PASS" and "of the trn1.32xlarge EFA line rate (800 Gbps)" in lines[-1] and "51%" in lines[-1]
    assert verdict(rows, DEFAULT_CATALOG.get("trn1n.32xlarge"))[0] == "WARN"  # 1600 Gbps
    assert verdict(rows, DEFAULT_CATALOG.get("trn2.48xlarge"))[0] == "WARN"  # 3200 Gbps
    assert verdict(rows, DEFAULT_CATALOG.get("trn1.32xlarge"), min_fraction=0.6)[0] == "WARN"


def test_a_failed_run_is_a_failure():
    assert parse_report(FAILED.read_text()) == []
    assert verdict([], DEFAULT_CATALOG.get("trn1.32xlarge"))[0] == "FAIL"


def test_trn_check_fabric_report_prints_pass(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "fabric", "--report", str(TWO_TRN1), "-c", "instance_type=trn1.32xlarge"], out=out, err=err)
    assert code == 0, err.getvalue()
    assert "PASS: best bus bandwidth 405 Gbps" in out.getvalue()


def test_eks_fabric_job_is_one_process_per_node_on_every_node(config):
    (job,) = eks_job(config, name="fabric", nodes=2, group_name=config.compute_groups[0].name, image="i")
    assert job["kind"] == "Job" and job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["NPROC_PER_NODE"] == "1"
        assert container["command"][:2] == ["/bin/sh", "-c"] and "python3" in container["command"]


def test_batch_fabric_job_runs_through_the_launcher_on_every_node(tmp_path, app, config):
    """The deployed definition with the CLI's overrides, as Batch applies them, on 2 nodes."""
    stage = Stage(tmp_path)
    neuron_ls(stage.bin, 16)
    calls = tmp_path / "nccom.log"
    nccom_test(stage.bin, TWO_TRN1, calls)
    (definition,) = resources(app.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
    container = definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    request = batch_request(name="f", queue="q", definition="d", nodes=2, config=config,
                            group_name=config.compute_groups[0].name)
    (override,) = request["nodeOverrides"]["nodePropertyOverrides"]
    assert override["targetNodes"] == "0:"
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    env.update({e["name"]: e["value"] for e in override["containerOverrides"]["environment"]})
    argvs, envs = [], []
    for index in range(2):
        node = {"AWS_BATCH_JOB_ID": f"fabric#{index}", "AWS_BATCH_JOB_NUM_NODES": "2",
                "AWS_BATCH_JOB_NODE_INDEX": str(index), "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0"}
        if index:
            node["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = "127.0.0.1"
        e = stage.environment({**env, **node})
        e["NPROC_PER_NODE"] = "1"  # the fabric job's own count, not the NeuronCores the rehearsal substitutes
        argvs.append([stage.substitute(a) for a in override["containerOverrides"]["command"]])
        envs.append(e)
    results = run_nodes(argvs, envs, cwd=stage.root)
    assert [r.code for r in results] == [0, 0], "\n".join(r.output[-3000:] for r in results)
    assert "batch: node 1 of 2, 1 processes" in results[1].output
    assert "16 of 16 Neuron devices" in results[1].output
    # No launch across hosts (MPI, ssh) from a Batch container: each node all-reduces over its own 32
    # NeuronCores, with no root communicator, and node 0 reports both.
    calls_made = calls.read_text().splitlines()
    assert calls_made == [" -r 32 -N 1 -b 1MB -e 1GB -f 32 -d fp32 allr"] * 2
    reports = node_reports(results[0].output)
    assert sorted(reports) == [0, 1] and all(len(rows) == 28 for rows in reports.values())
    result, lines = single_host_verdict(reports, DEFAULT_CATALOG.get("trn1.32xlarge"))
    assert result == "PARTIAL" and "EFA between the hosts is not measured" in lines[0]
    log = tmp_path / "fabric.log"
    log.write_text(results[0].output)
    out, err = io.StringIO(), io.StringIO()
    assert main(["check", "fabric", "--report", str(log), "-c", "instance_type=trn1.32xlarge"], out=out, err=err) == 0
    assert "PARTIAL: 2 nodes passed on their own" in out.getvalue() and "PASS" not in out.getvalue()


def test_a_single_host_report_with_a_failed_node_fails():
    rows = parse_report(TWO_TRN1.read_text())
    result, lines = single_host_verdict({0: rows, 1: []}, DEFAULT_CATALOG.get("trn1.32xlarge"))
    assert result == "FAIL" and "node 1: nccom-test reported no bandwidth" in lines


def test_a_node_short_of_devices_fails_the_check(tmp_path, app, config):
    stage = Stage(tmp_path)
    neuron_ls(stage.bin, 15)
    request = batch_request(name="f", queue="q", definition="d", nodes=1, config=config,
                            group_name=config.compute_groups[0].name)
    command = request["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"]["command"]
    env = stage.environment({"NPROC_PER_NODE": "1", "MASTER_PORT": "1"})
    env["NPROC_PER_NODE"] = "1"
    (result,) = run_nodes([command], [env], cwd=stage.root)
    assert result.code != 0 and "FAIL devices: node 0 (127.0.0.1): 15" in result.output


def test_slurm_fabric_script_runs_through_the_launcher_on_every_node(tmp_path, config):
    """`sbatch -N 2 ~/trainium/fabric-<group>.sbatch`: the script the head node gets, on 2 nodes."""
    group = config.compute_groups[0]
    script = render_all(config)[fabric_script_name(group)]
    assert "#SBATCH --nodes=2\n" in script and "--requeue" not in script  # a check is not retried
    assert "export NPROC_PER_NODE=1\n" in script
    stage = Stage(tmp_path)
    # Installed where the Neuron packages put them on a host, not on the PATH srun gives the job: the script
    # must find them itself (sbatch and srun read no /etc/profile.d).
    neuron_ls(stage.neuron_bin, 16)
    calls = tmp_path / "nccom.log"
    nccom_test(stage.neuron_bin, TWO_TRN1, calls)
    (result,) = run_slurm_script(stage, script, 2, processes_per_node=1)
    assert result.code == 0, result.output[-3000:]
    assert "slurm: node 1 of 2, 1 processes" in result.output
    assert result.output.count("16 of 16 Neuron devices") == 2
    (call,) = calls.read_text().splitlines()
    assert call.startswith("127.0.0.1:45654 -r 64 -N 2 -b 1MB -e 1GB -f 32 -d fp32 allr --hosts 127.0.0.1 127.0.0.1")
    assert verdict(parse_report(result.output), DEFAULT_CATALOG.get("trn1.32xlarge"))[0] == "PASS"


def test_slurm_fabric_script_runs_the_fabric_program_itself(config):
    """The srun line hands the launcher exactly fabric_command (the program is the heredoc's text)."""
    group = config.compute_groups[0]
    script = render_all(config)[fabric_script_name(group)]
    program = script.split("TRN_FABRIC=$(cat <<'TRAINIUM_FABRIC'\n", 1)[1].split("\nTRAINIUM_FABRIC\n", 1)[0]
    srun = script.rstrip("\n").rsplit("\n", 1)[1]
    words = shlex.split(srun.replace('"$TRN_FABRIC"', "PROGRAM"))
    python, flag, code, *args = fabric_command(config.spec(group))
    assert program == code.strip("\n")
    assert words[words.index("trainium-launch") + 1:] == [python, flag, "PROGRAM", *args]


def test_slurm_fabric_script_only_for_types_with_efa():
    from tests.helpers import config_with

    one = {"name": "single", "instance_type": "trn1.2xlarge", "nodes": 1, "max_nodes": 1, "az_ids": ["usw2-az4"]}
    scripts = render_all(config_with(compute_groups=[one]))
    assert list(scripts) == ["train-single.sbatch"]


def test_trn_check_fabric_parallelcluster_prints_the_sbatch_command():
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "fabric", "--backend", "parallelcluster", "--nodes", "4", "-c", "instance_type=trn1.32xlarge"],
                out=out, err=err)
    assert code == 0, err.getvalue()
    assert "sbatch -N 4 ~/trainium/fabric-" in out.getvalue() and "trn check fabric --report" in out.getvalue()
