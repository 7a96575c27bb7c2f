"""The backend registry: every entry's parts resolve, and a new backend is one entry plus its own files."""

from __future__ import annotations

import inspect
from pathlib import Path

import aws_cdk as cdk
import pytest

from tests.support.helpers import config_with
from trainium_cdk.app import backends
from trainium_cdk.app.backends import Backend


def test_the_built_in_backends_in_stack_order():
    assert backends.names() == ("eks", "batch", "parallelcluster", "instance")
    assert backends.job_backends() == ("eks", "batch", "parallelcluster", "instance")


@pytest.mark.parametrize("name", backends.names())
def test_every_part_of_an_entry_resolves(name):
    entry = backends.backend(name)
    assert issubclass(entry.load_stack(), cdk.Stack)
    assert set(inspect.signature(entry.load_stack().__init__).parameters) >= {"scope", "construct_id", "config", "network", "storage", "alarm_topic"}
    if entry.jobs:
        client = entry.job_client()
        for command in ("submit", "status", "logs", "cancel", "list_jobs"):
            assert list(inspect.signature(getattr(client, command)).parameters)[:4] == ["args", "config", "out", "err"]
    for ref in (entry.dist, entry.check, entry.idle_cost):
        if ref:
            assert callable(backends._load(ref)), ref


class ToyStack(cdk.Stack):
    """The smallest backend stack: what the registry asks of one."""

    def __init__(self, scope, construct_id, *, config, network, storage, alarm_topic, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        cdk.CfnOutput(self, "VpcOfToy", value=network.vpc.vpc_id)


def toy_dist(config, outdir: Path) -> list[Path]:
    path = outdir / "toy" / "hello.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config.project)
    return [path]


def toy_idle(config, region):
    from trainium_cdk.app import cost
    from trainium_cdk.facts import prices

    return [cost._line("toy controller", 1, "node", prices.instance_price("m7i.large"), region)]


@pytest.fixture
def toy(monkeypatch):
    registry = dict(backends._REGISTRY)
    monkeypatch.setattr(backends, "_REGISTRY", registry)
    return backends.register(Backend(
        name="toy", summary="a test backend", stack=f"{__name__}:ToyStack", dist=f"{__name__}:toy_dist",
        idle_cost=f"{__name__}:toy_idle",
    ))


def test_a_registered_backend_is_deployed_written_and_billed_from_its_entry(toy, tmp_path):
    from trainium_cdk.app.cost import bill
    from trainium_cdk.app.dist import write_dist
    from trainium_cdk.app.stacks import compose

    config = config_with(backends=["toy"])
    app = cdk.App(outdir=str(tmp_path / "out"))
    stacks = compose(app, config)
    assert isinstance(stacks.backends["toy"], ToyStack) and stacks.backends["toy"].stack_name == "t-toy"
    assert write_dist(config, tmp_path / "dist") == [tmp_path / "dist" / "toy" / "hello.txt"]
    assert [line.item for line in bill(config).idle][-1] == "toy controller"


def test_an_unregistered_backend_is_refused_by_name():
    from trainium_cdk.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown backend 'toy'"):
        config_with(backends=["toy"])
