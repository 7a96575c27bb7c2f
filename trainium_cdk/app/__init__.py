"""The app: the config, its stacks, the backend registry, composition, dist/, cost, Day-2 and docs."""
