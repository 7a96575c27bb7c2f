"""End to end (pytest -m e2e, `make test-e2e`): walkthroughs, jobs trained on CPU torch, the wheel."""
