"""`trn` starts without the CDK: no jsii, no Node process, for every subcommand's --help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

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
