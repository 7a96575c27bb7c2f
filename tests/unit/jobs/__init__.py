"""What runs in jobs: the launcher, the job environment, your own job, recipes."""
