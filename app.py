#!/usr/bin/env python3
"""The trainium-cdk app: `cdk synth -c config=PATH [-c region=R] [-c backends=a,b] [-c instance_type=T]
[-c nodes=N] [-c max_nodes=N] [-c az_ids=A[,B]]`. `-c config=default`: the built-in defaults."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from trainium_cdk.node_runtime import use_bundled_node

use_bundled_node()  # before aws_cdk starts its JavaScript process

import aws_cdk as cdk  # noqa: E402

from trainium_cdk.app.app_context import check_context  # noqa: E402
from trainium_cdk.app.config import DEFAULT_CONFIG_PATH, OVERRIDES, ConfigError, load_config  # noqa: E402
from trainium_cdk.app.cost import BILL_FILE, bill, render  # noqa: E402
from trainium_cdk.app.dist import DIST, write_dist  # noqa: E402
from trainium_cdk.app.stacks import compose  # noqa: E402
from trainium_cdk.app.stacks.pipeline_stack import PipelineStack  # noqa: E402

ROOT = Path(__file__).resolve().parent


def repository_path(config: str | None) -> str:
    """The config file as a path in the repository: the pipeline's synth step reads the same file."""
    path = Path(config) if config else DEFAULT_CONFIG_PATH
    try:
        return (ROOT / path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        raise ConfigError("config", str(path), "a file in the repository: the pipeline synthesizes from its checkout") from None


def replace_dist(staged: Path, dist: Path = DIST) -> None:
    """dist/ becomes exactly what this synth wrote (nothing at all when it wrote nothing)."""
    old = dist.with_name(f".{dist.name}.old-{os.getpid()}")
    if dist.exists():
        dist.rename(old)
    if any(staged.iterdir()):
        staged.rename(dist)
    else:
        staged.rmdir()
    shutil.rmtree(old, ignore_errors=True)


def main() -> None:
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
    replace_dist(staged)


if __name__ == "__main__":
    main()
