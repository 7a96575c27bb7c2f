"""The EKS backend, synthesized."""
