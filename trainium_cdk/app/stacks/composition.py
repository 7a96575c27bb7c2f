"""Compose the app's stacks from one config: what `app.py` and the tests call."""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import Aspects, Environment, Stack, Stage, Tags

from trainium_cdk.app import backends as backend_registry
from trainium_cdk.app.config import Config
from trainium_cdk.app.stacks.network_stack import NetworkStack
from trainium_cdk.app.stacks.storage_stack import StorageStack
from trainium_cdk.constructs.nag import NagAcknowledgments


@dataclass
class TrainingApp:
    """The stacks of one deployment, by role."""

    network: NetworkStack
    storage: StorageStack | None = None
    backends: dict[str, Stack] = field(default_factory=dict)

    @property
    def stacks(self) -> list[Stack]:
        return [self.network, *([self.storage] if self.storage else []), *self.backends.values()]


def compose(app: Stage, config: Config) -> TrainingApp:
    """Add every stack the config asks for to ``app``.

    Stacks name a region but no account: synth stays offline (no lookups), and `cdk deploy` takes
    the account from the caller's credentials.
    """
    env = Environment(region=config.region)
    network = NetworkStack(app, config.stack_name("network"), config=config, env=env)
    result = TrainingApp(network=network)
    if config.storage.enabled:
        result.storage = StorageStack(
            app, config.stack_name("storage"), config=config, network=network.network, env=env
        )
    storage = result.storage.storage if result.storage else None
    # The workspace only when observability.prometheus asks for one: a registered backend's stack that predates it
    # (the registry's contract: scope, construct_id, config, network, storage, alarm_topic) keeps working.
    metrics = {"metrics_workspace": network.metrics} if network.metrics is not None else {}
    for backend in backend_registry.deployed(config):  # in registration order: stack order is stable
        result.backends[backend.name] = backend.load_stack()(
            app, config.stack_name(backend.name), config=config, network=network.network, storage=storage,
            alarm_topic=network.alerts.topic, env=env, **metrics,
        )
    # Every stack with alarms or EventBridge rules: the network stack and the backends (by their deployed names).
    network.alerts.admit([network.stack_name, *(stack.stack_name for stack in result.backends.values())])
    # The library's cdk-nag acknowledgments, taken (an opt-in: the tests run cdk-nag over every app).
    Aspects.of(app).add(NagAcknowledgments())
    Tags.of(app).add("project", config.project)
    for key, value in sorted(config.tags.items()):
        Tags.of(app).add(key, value)
    return result
