from trainium_cdk.app.stacks.composition import TrainingApp, compose
from trainium_cdk.app.stacks.network_stack import NetworkStack
from trainium_cdk.app.stacks.storage_stack import StorageStack

__all__ = ["NetworkStack", "StorageStack", "TrainingApp", "compose"]
