"""The facts the code reads: the instance catalog, sizing tables, the first-step model."""
