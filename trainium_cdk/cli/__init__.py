"""`trn`: the operations CLI of trainium-cdk (AZ offerings, preflight, training jobs).

    trn azs --instance-type trn1.32xlarge --region us-west-2 [--write] [--dry-run]
    trn doctor [--config PATH] [-c key=value ...]
    trn connect [--port 8443] [--stop]
    trn submit [--backend B] [--group G] [--nodes N] [--name NAME] [--image URI] [--env K=V]... [--dry-run]
               [--skip-fit] [-- SCRIPT [ARGS...] | --job WORKLOAD]
    trn fit [--group G] [--nodes N] [--config PATH] [-c K=V]... [--env K=V]... (--job NAME | -- SCRIPT [ARGS...])
    trn rehearse [--backend B] [--nodes N] [--procs-per-node P] [--env K=V]... [--skip-fit]
                 [-- SCRIPT [ARGS...] | --job NAME]
    trn status JOB [--wait]
    trn logs JOB [--rank N] [--follow]
    trn cancel JOB
    trn jobs [--group G]
    trn cost [--config PATH] [--region REGION] [--blocks]
    trn block list|status [--group G]
    trn block extend --group G --days N [--yes]
    trn check fabric --nodes N [--backend batch|eks] [--min-fraction F] [--report LOG]
    trn image init [DIR]
    trn image push [--dockerfile PATH] [--context DIR] [--tag TAG] [--backend eks|batch] [--dry-run]
    trn sync LOCAL_DIR [--to PREFIX] [--dry-run]
    trn --version

Import has no side effects and makes no AWS call; the synth path (app.py, trainium_cdk.app.stacks) never
imports this package. Errors a user can fix print one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from trainium_cdk.cli._common import PROG

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from trainium_cdk.cli import azs, block, check, connect, cost, doctor, fit, image, jobs, rehearse, sync, usage

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Operate trainium-cdk deployments: find AZs, check an account before deploy, run jobs.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    azs.add_parser(sub)
    doctor.add_parser(sub)
    connect.add_parser(sub)
    jobs.add_parsers(sub)
    fit.add_parser(sub)
    rehearse.add_parser(sub)
    cost.add_parser(sub)
    usage.add_parser(sub, jobs._common)
    block.add_parser(sub)
    check.add_parser(sub)
    image.add_parser(sub)
    sync.add_parser(sub)
    _no_abbreviations(parser)
    return parser


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """argparse takes a prefix of an option for the option (``--name`` for ``--namespace``): off, on every
    command and sub-command, so that a mistyped flag is refused rather than taken for another."""
    parser.allow_abbrev = False
    for action in parser._actions:  # noqa: SLF001 - argparse lists its subparsers nowhere else
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                _no_abbreviations(sub)


def version() -> str:
    """The installed distribution's version (the package's own when run from a checkout)."""
    from importlib import metadata

    try:
        return metadata.version("trainium-cdk")
    except metadata.PackageNotFoundError:
        from trainium_cdk import __version__

        return __version__


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 1 a check or job failed, 2 a usage or environment error)."""
    from trainium_cdk.cli._common import notices_to
    from trainium_cdk.cli._errors import explain
    from trainium_cdk.node_runtime import use_bundled_node

    use_bundled_node()  # EKS jobs render with cdk8s (jsii): Node 24, no end-of-life banner
    out = out or sys.stdout
    err = err or sys.stderr
    notices_to(err)
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exit_:  # --help and usage errors: argparse already printed
        return int(exit_.code or 0) if isinstance(exit_.code, int) else 2
    try:
        return int(args.func(args, out, err))
    except KeyboardInterrupt:
        err.write(f"{PROG}: interrupted\n")
        return 130
    except Exception as error:  # noqa: BLE001 - every known kind becomes one line; the rest is a bug
        explained = explain(error)
        if explained is None:
            raise
        message, code = explained
        out.flush()
        err.write(f"{PROG} {args.command}: {message}\n")
        return code
