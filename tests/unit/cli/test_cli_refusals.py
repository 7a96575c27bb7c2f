"""Inputs the CLI took silently, or answered with a traceback or a line of megabytes (issue 49, "The refusals"): each is
now one line naming the flag or field, the value (bounded) and what is allowed, through the verb as a user types it.
Nothing here reaches AWS or runs a job: each is refused before."""

from __future__ import annotations

import re

import pytest

from tests.support.cli_support import assert_one_clean_line, run_cli


@pytest.fixture
def eks_only(default_config):
    return default_config("eks", name="eks-only.yaml")


@pytest.mark.parametrize("argv, words", [
    (["submit", "--name", "", "--", "train.py"], "--name = '': a job name, or leave --name out"),
    (["submit", "--name", "  ", "--dry-run", "--", "train.py"], "--name = '  ': a job name"),
    (["submit", "--backend", "batch", "--dry-run", "--", "train.py"],
     "--backend = 'batch': a backend the config deploys; allowed: eks"),
    (["rehearse", "--timeout", "0", "--", "train.py"], "--timeout = 0.0: more than 0 seconds"),
    (["rehearse", "--timeout", "-5", "--", "train.py"], "--timeout = -5.0: more than 0 seconds"),
    (["rehearse", "--procs-per-node", "1000", "--", "train.py"],
     "--procs-per-node = 1000: 1 to 32: the processes stand for the NeuronCores of a trn1.32xlarge node"),
])
def test_each_input_is_refused_in_one_line(eks_only, argv, words):
    result = run_cli(*argv[:1], "--config", str(eks_only), *argv[1:])
    assert result.code == 2, result
    assert words in result.err
    assert_one_clean_line(result)


def test_a_file_given_for_fsx_is_refused_not_a_traceback(eks_only, tmp_path):
    afile = tmp_path / "data.bin"
    afile.write_bytes(b"x")
    result = run_cli("rehearse", "--config", str(eks_only), "--fsx", str(afile), "--", "train.py")
    assert result.code == 2 and f"--fsx = '{afile}': a directory (it stands for /fsx), not a file" in result.err
    assert_one_clean_line(result)


def test_a_prefix_of_a_flag_is_not_taken_for_the_flag(eks_only, capsys):
    """argparse took `--name x` for `--namespace x` on `trn rehearse` (which has no --name)."""
    result = run_cli("rehearse", "--config", str(eks_only), "--name", "x", "--", "train.py")
    assert result.code == 2 and "unrecognized arguments: --name" in capsys.readouterr().err  # argparse's own


def test_a_yaml_alias_bomb_is_refused_in_a_bounded_line(tmp_path):
    """Nine levels of nine aliases: a few hundred bytes whose repr is 28 MB; the refusal stays a few KB."""
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefg"):
        previous = "abcdefg"[i]
        levels.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join([*levels, "project: *g", "region: us-west-2"]) + "\n")
    result = run_cli("submit", "--config", str(bomb), "--dry-run", "--", "train.py")
    assert result.code == 2 and "project = [[[[...]" in result.err
    assert len(result.err) < 10_000  # each of its few problems a bounded value (errors.SHOWN_CHARACTERS)
    assert_one_clean_line(result)


def test_two_default_names_in_one_second_differ(eks_only):
    """The default job name gained a random tail: two submits in the same second no longer collide."""
    names = set()
    for _ in range(2):
        result = run_cli("submit", "--config", str(eks_only), "--dry-run", "--", "train.py")
        assert result.code == 0, result
        (name,) = set(re.findall(r"^  name: (train-\d{4}-\d{6}-[0-9a-f]{4})$", result.out, re.M))
        names.add(name)
    assert len(names) == 2


@pytest.mark.parametrize("script, words", [
    ("nosuch.py", "invalid argument: -- SCRIPT = 'nosuch.py': a script that exists here: "),
    ("/fsx/code/nosuch.py", "invalid argument: -- SCRIPT = '/fsx/code/nosuch.py': a script that exists here: "),
])
def test_a_script_that_is_not_there_is_one_line_not_a_traceback_per_rank(eks_only, tmp_path, monkeypatch, script,
                                                                         words):
    """`trn rehearse -- nosuch.py` printed 112 lines of torchrun tracebacks and no summary."""
    monkeypatch.chdir(tmp_path)
    result = run_cli("rehearse", "--config", str(eks_only), "--", script, "--lr", "0.1")
    assert words in result.err, result
    assert_one_clean_line(result)


def test_a_bad_slurm_job_id_names_the_argument_not_the_config(default_config, no_credentials):
    """`trn status NAME` on ParallelCluster said "configuration error ... (fix the config file or the -c override)"."""
    config = default_config("parallelcluster", name="slurm.yaml")
    result = run_cli("status", "--config", str(config), "my-job")
    assert result.err.strip() == ("trn status: invalid argument: JOB = 'my-job': a Slurm job id, such as 101 (as `trn "
                                  "submit` printed it)"), result
    assert_one_clean_line(result)
