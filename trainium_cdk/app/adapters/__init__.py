"""The config mapped to the library's props where that is more than passing values through: the EKS backend's
(the nodes' user data, the Karpenter node pools, the health gates, the workloads) and the ParallelCluster
backend's (the cluster configuration's settings, which ``trn`` and dist/ render without the CDK).

Every compute group's nodes reach every backend's node construct the same way, built once by
``Config.group_nodes`` (a :class:`trainium_cdk.facts.capacity.GroupNodes`); the other stacks pass config values to
their constructs directly. Constructs and charts never read the config (tests/meta/test_layering.py).
"""
