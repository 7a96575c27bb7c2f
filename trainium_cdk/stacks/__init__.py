from trainium_cdk.stacks.composition import TrainingApp, compose
from trainium_cdk.stacks.network_stack import NetworkStack
from trainium_cdk.stacks.storage_stack import StorageStack

__all__ = ["NetworkStack", "StorageStack", "TrainingApp", "compose"]
