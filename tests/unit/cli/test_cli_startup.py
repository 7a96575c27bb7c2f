"""`trn` starts without the CDK: no jsii, no Node process, for every subcommand's --help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.helpers import ROOT

HEAVY = ("aws_cdk", "jsii", "cdk8s", "constructs", "kubernetes", "boto3", "torch")


@pytest.mark.parametrize("argv", [["--help"], ["submit", "--help"], ["status", "--help"], ["doctor", "--help"]])
def test_help_loads_no_cdk_and_no_aws_sdk(argv):
    code = (
        "import json, sys\n"
        "from trainium_cdk.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main({argv!r})\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_rendering_an_eks_job_loads_no_cdk():
    """`trn submit --backend eks` renders the job chart with cdk8s (and its jsii runtime), never aws_cdk."""
    code = (
        "import json, sys\n"
        "from trainium_cdk.cli.eks_jobs import render\n"
        "from trainium_cdk.app.config import load_config\n"
        "config = load_config(None)\n"
        "from trainium_cdk.cli.jobs import UserJob\n"
        "job = UserJob(group=config.compute_groups[0], nodes=None, program=('train.py',), job=None, env={})\n"
        "objects = render(config, job, name='demo', image='123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1')\n"
        "print(json.dumps([len(objects), sorted(m for m in sys.modules if m.split('.')[0] == 'aws_cdk')]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=True)
    count, cdk_modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert count >= 1
    assert cdk_modules == []
