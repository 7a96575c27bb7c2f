from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.storage import LustreStorage

__all__ = ["LustreStorage", "TrainingNetwork"]
