"""Kubernetes namespaces shared by the charts, the EKS stack and the CLI (pure Python: the CLI imports it)."""

# The training workloads, their FSx claim and the data pods (Pod Security Admission baseline).
TRAINING_NAMESPACE = "training"
