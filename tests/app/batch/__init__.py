"""The AWS Batch backend, synthesized."""
