"""The ParallelCluster backend built from the config: cluster and image configuration, health prolog, batch scripts."""
