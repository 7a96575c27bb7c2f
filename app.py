#!/usr/bin/env python3
"""The trainium-cdk app: `cdk synth -c config=PATH [-c region=R] [-c backends=a,b] [-c instance_type=T] [-c nodes=N]`."""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk

from trainium_cdk.config import DEFAULT_CONFIG_PATH, OVERRIDES, ConfigError, load_config
from trainium_cdk.cost import bill, render
from trainium_cdk.dist import write_dist
from trainium_cdk.stacks import compose
from trainium_cdk.stacks.pipeline_stack import PipelineStack

ROOT = Path(__file__).resolve().parent


def repository_path(config: str | None) -> str:
    """The config file as a path in the repository: the pipeline's synth step reads the same file."""
    path = Path(config) if config else DEFAULT_CONFIG_PATH
    try:
        return (ROOT / path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        raise ConfigError("config", str(path), "a file in the repository: the pipeline synthesizes from its checkout") from None


def main() -> None:
    app = cdk.App()
    try:
        config = load_config(
            app.node.try_get_context("config"), {k: app.node.try_get_context(k) for k in OVERRIDES}
        )
        if str(app.node.try_get_context("pipeline")).lower() == "true":
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
            # The bill before the deploy, on every synth (stderr: stdout may carry the template).
            print(render(bill(config)), file=sys.stderr)
        write_dist(config)
    except ConfigError as err:
        print(f"trainium-cdk: {err}", file=sys.stderr)
        sys.exit(2)
    app.synth()


if __name__ == "__main__":
    main()
