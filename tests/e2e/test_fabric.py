"""The fabric check: report parsing against real nccom-test output (tests/data, with its source), the verdict
against each type's reference figure (the catalog's), and the job's launch rehearsed: on EKS through `trn check
fabric` against the API server stand-in, on Batch with the deployed job definition and the CLI's overrides,
on Slurm with the fabric script (stand-ins for neuron-ls and nccom-test, listed in tests/support/rehearsal.py: on the
container's PATH for Batch and EKS, in the host's Neuron tools folder for Slurm)."""

from __future__ import annotations

import io
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_rehearsal import app, config, run_slurm_script  # noqa: F401
from tests.support import paths
from tests.support.cli_support import assert_one_clean_line, run_cli
from tests.support.helpers import group_resources
from tests.support.rehearsal import Stage, nccom_test, neuron_ls, run_batch_node_properties, run_nodes
from tests.unit.jobs.test_own_job import config as all_backends  # noqa: F401 (the fixture: the default config, every backend)
from trainium_cdk.app.parallelcluster.sbatch import fabric_script_name, render_all
from trainium_cdk.cli import main
from trainium_cdk.cli.check import FABRIC_ENV, batch_request, eks_job
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, FABRIC_REFERENCES, fabric_reference
from trainium_cdk.node.fabric_check import OPERATIONS, framed
from trainium_cdk.runtime.fabric import fabric_command, parse_report, parse_reports, verdict

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e

DATA = paths.DATA
TWO_TRN1 = DATA / "nccom_test_allr_2x_trn1.txt"
FAILED = DATA / "nccom_test_failure.txt"
TRN1 = DEFAULT_CATALOG.get("trn1.32xlarge")
# The sizes the rehearsal sweeps (its substitution table: 64 KiB to 4 MiB, step 8), whole bf16 chunks of 4 ranks.
REHEARSED_SIZES = [65536, 524288, 4194304]


def the_guides_table_for_each_operation(**instead: Path) -> str:
    """A fabric job's log: the nccom-test guide's real 2 x trn1 table as each operation's report (or another)."""
    return "\n".join(framed(op, instead.get(op, TWO_TRN1).read_text()) for op in OPERATIONS)


def test_parses_the_real_two_node_report():
    rows = parse_report(TWO_TRN1.read_text())
    assert len(rows) == 28 and rows[0].size == 8 and rows[-1].size == 1073741824
    assert rows[-1].busbw_gib_s == 47.09
    assert rows[-1].gbps == pytest.approx(47.09 * 8 * 1.073741824)  # GiB/s -> Gbps
    reports = parse_reports(the_guides_table_for_each_operation())
    assert sorted(reports) == sorted(OPERATIONS) and all(len(rows) == 28 for rows in reports.values())


def test_every_efa_type_has_a_reference_with_its_source():
    """trn1.32xlarge: the nccom-test guide's published pair; the others: their line rate, marked provisional."""
    assert fabric_reference(TRN1) == FABRIC_REFERENCES["trn1.32xlarge"]
    assert TRN1.name in fabric_reference(TRN1).source and not fabric_reference(TRN1).provisional
    for name in ("trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge"):
        spec = DEFAULT_CATALOG.get(name)
        reference = fabric_reference(spec)
        assert reference.provisional and f"{spec.network_gbps} Gbps" in reference.source
        assert reference.busbw_gib_s == pytest.approx(spec.network_gbps / 8 / 1.073741824)


def test_verdict_passes_at_the_published_figure_and_fails_below_a_pass_line():
    reports = parse_reports(the_guides_table_for_each_operation())
    result, lines = verdict(reports, TRN1)
    assert result == "PASS" and lines[-1] == ("PASS: all-reduce, all-gather and reduce-scatter at or above 37.67 GB/s "
                                              "(80% of the trn1.32xlarge reference)")
    assert lines[0].startswith("reference: 47.09 GB/s (405 Gbps): Neuron nccom-test guide")
    # trn1n: 1600 Gbps of EFA, no published figure: 40% of its line rate (74.5 GB/s) is above the trn1 pair's 47.09.
    result, lines = verdict(reports, DEFAULT_CATALOG.get("trn1n.32xlarge"))
    assert result == "FAIL" and "(provisional)" in lines[1]
    assert "FAIL: all-reduce best 47.09 GB/s at 1073741824 B is 25% of the reference" in lines[-1]
    assert verdict(reports, TRN1, min_fraction=1.0)[0] == "PASS"  # at the figure itself


def test_an_operation_that_failed_fails_the_check():
    reports = parse_reports(the_guides_table_for_each_operation(allg=FAILED))
    assert reports["allg"] == []
    result, lines = verdict(reports, TRN1)
    assert result == "FAIL" and lines[-1] == "FAIL: all-gather reported no bandwidth (see the job's log)"
    assert verdict(parse_reports("no reports: the job failed before its first"), TRN1)[0] == "FAIL"


def test_trn_check_fabric_report_passes_and_fails_with_its_exit_code(tmp_path):
    log = tmp_path / "fabric.log"
    log.write_text(the_guides_table_for_each_operation())
    good = run_cli("check", "fabric", "--report", str(log), "-c", "instance_type=trn1.32xlarge")
    assert good.code == 0 and "PASS: all-reduce, all-gather and reduce-scatter" in good.out, good.err
    log.write_text(the_guides_table_for_each_operation(redsct=FAILED))
    bad = run_cli("check", "fabric", "--report", str(log), "-c", "instance_type=trn1.32xlarge")
    assert bad.code == 1 and "FAIL: reduce-scatter reported no bandwidth" in bad.out


def test_a_provisional_pass_line_says_so_and_where_a_figure_was_looked_for(tmp_path):
    """trn1n.32xlarge: no published figure (searched, with the date, in the catalog): `trn check fabric` says that its
    pass line is a guess and how to replace it; a type with a published figure says nothing of the kind."""
    log = tmp_path / "fabric.log"
    log.write_text(the_guides_table_for_each_operation())
    result = run_cli("check", "fabric", "--report", str(log), "-c", "instance_type=trn1n.32xlarge")
    assert result.code == 1, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("reference: 186.26 GB/s (1600 Gbps): no published Neuron figure for trn1n.32xlarge "
                               "(searched 2026-11-27: the Neuron nccom-test guide (v2.29.0)")
    assert ("provisional: Neuron publishes no bus bandwidth between trn1n.32xlarge hosts; the pass line is a guess "
            "until a known-good pair's measurement is recorded with its date in FABRIC_REFERENCES "
            "(trainium_cdk/facts/catalog.py); --min-fraction sets another") in lines
    trn1 = run_cli("check", "fabric", "--report", str(log), "-c", "instance_type=trn1.32xlarge")
    assert trn1.code == 0 and "provisional" not in trn1.out


def test_a_type_without_efa_gets_no_between_hosts_check(tmp_path):
    result = run_cli("check", "fabric", "--report", str(TWO_TRN1), "-c", "instance_type=trn1.2xlarge", "-c", "nodes=1")
    assert_one_clean_line(result, "trn1.2xlarge", "a type with EFA", "has none (its nodes talk over ENA at 25 Gbps)")


def _between_hosts_run(results: Any, tmp_path: Path) -> str:
    """Node 0's log of a rehearsed fabric job: the device counts and a report per operation over 4 ranks."""
    assert [r.code for r in results] == [0, 0], "\n".join(r.output[-3000:] for r in results)
    output = results[0].output
    assert "trainium-fabric: every node: 16 of 16 Neuron devices (2 nodes)" in output  # each node asked neuron-ls
    reports = parse_reports(output)
    for op in OPERATIONS:
        assert [r.size for r in reports[op]] == REHEARSED_SIZES, (op, output[-3000:])
        assert reports[op][-1].busbw_gib_s > 0
    return output


def _verdicts(output: str, tmp_path: Path, *flags: str) -> None:
    """On CPU over loopback gloo is far below Trainium's EFA: FAIL at the reference, PASS at a tiny fraction."""
    log = tmp_path / "fabric.log"
    log.write_text(output)
    fail = run_cli("check", "fabric", "--report", str(log), "-c", "instance_type=trn1.32xlarge", *flags)
    assert fail.code == 1 and "FAIL: all-reduce best" in fail.out, fail.out
    low = run_cli("check", "fabric", "--report", str(log), "-c", "instance_type=trn1.32xlarge",
                  "--min-fraction", "0.000001", *flags)
    assert low.code == 0 and "PASS" in low.out, low.out


def test_batch_fabric_job_measures_between_the_hosts_through_the_launcher(tmp_path, app, config):
    """The deployed definition with the CLI's overrides, as Batch applies them, on 2 nodes of 2 NeuronCores."""
    stage = Stage(tmp_path)
    neuron_ls(stage.bin, 16)
    (definition,) = group_resources(app.template_with_nested("batch"), "AWS::Batch::JobDefinition").values()
    container = definition["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    request = batch_request(name="f", queue="q", definition="d", nodes=2, config=config,
                            group_name=config.compute_groups[0].name)
    (override,) = request["nodeOverrides"]["nodePropertyOverrides"]
    assert override["targetNodes"] == "0:"
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert env["NPROC_PER_NODE"] == "32"  # one process per NeuronCore: the definition's, not overridden
    overrides = {e["name"]: e["value"] for e in override["containerOverrides"]["environment"]}
    assert overrides == {"TRN_TORCH_DEVICE": "neuron", "TRN_DIST_BACKEND": "neuron",
                         "TRN_FABRIC_SIZES": "1048576:1073741824:32"}
    results = run_batch_node_properties(stage, command=override["containerOverrides"]["command"],
                                        environment={**env, **overrides}, nodes=2, job_id="fabric")
    assert "batch: node 1 of 2, 2 processes" in results[1].output
    _verdicts(_between_hosts_run(results, tmp_path), tmp_path)


@pytest.fixture
def fabric_cluster(aws, tmp_path, no_sleep, monkeypatch) -> Any:
    """The API server stand-in running each job through the rehearsal (neuron-ls on the pods' PATH)."""
    from tests.support.fake_kube import FakeCluster
    from tests.support.rehearsal import run_volcano_job

    stage = Stage(tmp_path / "nodes")
    neuron_ls(stage.bin, 16)
    fake = FakeCluster(runner=lambda job: [(r.code, r.output) for r in run_volcano_job(stage, job)])
    port = fake.start()
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", port)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    yield fake
    fake.stop()


def test_eks_trn_check_fabric_measures_between_the_hosts(aws, fabric_cluster, all_backends, tmp_path):
    """`trn check fabric --backend eks`, then `trn logs` and `trn check fabric --report`, as a user types them."""
    flags = ("--backend", "eks", "--config", str(all_backends))
    result = run_cli("check", "fabric", *flags, "--name", "fab", "--nodes", "2", "--image", "example.com/t:1")
    assert result.code == 0, result.err
    (job,) = fabric_cluster.created
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert {k: env[k] for k in FABRIC_ENV} == FABRIC_ENV and env["NPROC_PER_NODE"] == "32"
    fabric_cluster.wait_for_jobs()
    status = run_cli("status", "fab", *flags)
    assert status.code == 0 and "SUCCEEDED" in status.out, status.out
    logs = run_cli("logs", "fab", *flags)
    assert logs.code == 0, logs.err
    _verdicts(_between_hosts_run([type("R", (), {"code": 0, "output": logs.out})()] * 2, tmp_path), tmp_path,
              "--config", str(all_backends))


def test_eks_fabric_job_is_one_process_per_neuroncore_on_every_node(config):
    (job,) = eks_job(config, name="fabric", nodes=2, group_name=config.compute_groups[0].name, image="i")
    assert job["kind"] == "Job" and job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["NPROC_PER_NODE"] == str(config.spec(config.compute_groups[0]).neuron_cores)
        assert container["command"][:2] == ["/bin/sh", "-c"] and "python3" in container["command"]


def test_a_node_short_of_devices_fails_the_check(tmp_path, app, config):
    stage = Stage(tmp_path)
    neuron_ls(stage.bin, 15)
    request = batch_request(name="f", queue="q", definition="d", nodes=1, config=config,
                            group_name=config.compute_groups[0].name)
    command = request["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"]["command"]
    env = stage.environment({"NPROC_PER_NODE": "2", "MASTER_PORT": "1", **FABRIC_ENV})
    (result,) = run_nodes([command], [env], cwd=stage.root)
    assert result.code != 0 and "FAIL devices: node 0 (127.0.0.1): 15" in result.output
    assert "report allr begins" not in result.output


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
    assert result.output.count("): 16 of 16 Neuron devices") == 2  # each node's own line, then node 0's summary
    assert "trainium-fabric: every node: 16 of 16 Neuron devices (2 nodes)" in result.output
    # nccom-test across the hosts (MPI over the nodes' sshd), once per operation, in bf16.
    assert calls.read_text().splitlines() == [
        f"127.0.0.1:45654 -r 64 -N 2 -b 1048576 -e 1073741824 -f 32 -d bf16 {op} --hosts 127.0.0.1 127.0.0.1"
        for op in OPERATIONS]
    assert verdict(parse_reports(result.output), TRN1)[0] == "PASS"


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
    from tests.support.helpers import config_with

    one = {"name": "single", "instance_type": "trn1.2xlarge", "nodes": 1, "max_nodes": 1, "az_ids": ["usw2-az4"]}
    scripts = render_all(config_with(compute_groups=[one]))
    assert list(scripts) == ["train-single.sbatch"]


def test_trn_check_fabric_parallelcluster_prints_the_sbatch_command():
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "fabric", "--backend", "parallelcluster", "--nodes", "4", "-c", "instance_type=trn1.32xlarge",
                 "-c", "backends=parallelcluster"], out=out, err=err)  # --backend: one the config deploys
    assert code == 0, err.getvalue()
    assert "sbatch -N 4 ~/trainium/fabric-" in out.getvalue() and "trn check fabric --report" in out.getvalue()
