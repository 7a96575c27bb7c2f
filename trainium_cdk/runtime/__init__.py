"""What runs in jobs and on nodes, as Python: the job environment, launcher, per-backend job forms."""
