#!/usr/bin/env python3
"""The trainium-cdk app: `cdk synth -c config=PATH [-c region=R] [-c backends=a,b] [-c instance_type=T] [-c nodes=N]`."""

from __future__ import annotations

import sys

import aws_cdk as cdk

from trainium_cdk.config import OVERRIDES, ConfigError, load_config
from trainium_cdk.dist import write_dist
from trainium_cdk.stacks import compose
from trainium_cdk.stacks.pipeline_stack import PipelineStack


def main() -> None:
    app = cdk.App()
    try:
        config = load_config(
            app.node.try_get_context("config"), {k: app.node.try_get_context(k) for k in OVERRIDES}
        )
        if str(app.node.try_get_context("pipeline")).lower() == "true":
            if config.pipeline is None:
                raise ConfigError("pipeline", None, "-c pipeline=true needs a pipeline section in the config")
            PipelineStack(app, config.stack_name("pipeline"), config=config, env=cdk.Environment(region=config.region))
        else:
            compose(app, config)
        write_dist(config)
    except ConfigError as err:
        print(f"trainium-cdk: {err}", file=sys.stderr)
        sys.exit(2)
    app.synth()


if __name__ == "__main__":
    main()
