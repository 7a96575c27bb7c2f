#!/usr/bin/env python3
"""The trainium-cdk app: `cdk synth -c config=PATH [-c region=R] [-c backends=a,b] [-c instance_type=T]
[-c nodes=N] [-c max_nodes=N] [-c az_ids=A[,B]]`. `-c config=default`: the built-in defaults."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainium_cdk.node_runtime import use_bundled_node

use_bundled_node()  # before a jsii library (aws_cdk, cdk8s) starts its JavaScript process

from trainium_cdk.app.app_context import check_context  # noqa: E402
from trainium_cdk.app.config import DEFAULT_CONFIG_PATH, OVERRIDES, ConfigError, load_config  # noqa: E402

ROOT = Path(__file__).resolve().parent


def repository_path(config: str | None) -> str:
    """The config file as a path in the repository: the pipeline's synth step reads the same file."""
    path = Path(config) if config else DEFAULT_CONFIG_PATH
    try:
        return (ROOT / path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        raise ConfigError("config", str(path), "a file in the repository: the pipeline synthesizes from its checkout") from None


def replace_dist(staged: Path, dist: Path) -> None:
    """dist/ becomes exactly what this synth wrote (nothing at all when it wrote nothing)."""
    old = dist.with_name(f".{dist.name}.old-{os.getpid()}")
    if dist.exists():
        dist.rename(old)
    if any(staged.iterdir()):
        staged.rename(dist)
    else:
        staged.rmdir()
    shutil.rmtree(old, ignore_errors=True)


def context_from_cli() -> dict[str, Any] | None:
    """The context the CDK CLI hands the app (CDK_CONTEXT_JSON), read without the CDK; None when part of it is in
    a file of its own (CONTEXT_OVERFLOW_LOCATION_ENV, for a context too large for the environment)."""
    if os.environ.get("CONTEXT_OVERFLOW_LOCATION_ENV"):
        return None
    try:
        context = json.loads(os.environ.get("CDK_CONTEXT_JSON") or "{}")
    except ValueError:  # the App reads it again and says what is wrong
        return None
    return context if isinstance(context, dict) else None


def check_config_first() -> None:
    """A config error stops the app before aws-cdk-lib loads (0.3 s, not 1.2 s): the same checks as main's, on the
    same context; main checks again on the App's."""
    context = context_from_cli()
    if context is None:
        return
    try:
        check_context(context)
        load_config(context.get("config"), {k: context.get(k) for k in OVERRIDES})
    except ConfigError as err:
        print(f"trainium-cdk: {err}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    check_config_first()
    # aws-cdk-lib, cdk8s and the stacks load after the config checks: they take a second of their own.
    import aws_cdk as cdk

    from trainium_cdk.app.cost import BILL_FILE, bill, render
    from trainium_cdk.app.dist import DIST, write_dist
    from trainium_cdk.app.stacks import compose
    from trainium_cdk.app.stacks.pipeline_stack import PipelineStack

    app = cdk.App()
    # Written beside dist/ and swapped in only after a whole synth: a failed one leaves the last good dist/.
    staged = Path(tempfile.mkdtemp(prefix=f".{DIST.name}.new-", dir=DIST.parent))
    try:
        check_context(app.node.get_all_context())
        config = load_config(
            app.node.try_get_context("config"), {k: app.node.try_get_context(k) for k in OVERRIDES}
        )
        pipeline = str(app.node.try_get_context("pipeline")).lower() == "true"
        if pipeline:
            if config.pipeline is None:
                raise ConfigError("pipeline", None, "-c pipeline=true needs a pipeline section in the config")
            PipelineStack(
                app,
                config.stack_name("pipeline"),
                config=config,
                config_path=repository_path(app.node.try_get_context("config")),
                overrides={k: str(v) for k in OVERRIDES if (v := app.node.try_get_context(k)) is not None},
                env=cdk.Environment(region=config.region),
            )
        else:
            compose(app, config)
        write_dist(config, staged)
        app.synth()
        if not pipeline:
            # The bill before the deploy, beside the templates: `make synth` prints it; a plain
            # `cdk synth` stays quiet.
            (Path(app.outdir) / BILL_FILE).write_text(render(bill(config)) + "\n")
    except ConfigError as err:
        shutil.rmtree(staged, ignore_errors=True)
        print(f"trainium-cdk: {err}", file=sys.stderr)
        sys.exit(2)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    replace_dist(staged, DIST)


if __name__ == "__main__":
    main()
