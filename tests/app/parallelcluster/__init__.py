"""The ParallelCluster backend, synthesized."""
