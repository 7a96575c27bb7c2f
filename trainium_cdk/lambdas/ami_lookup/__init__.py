"""The AMI lookup custom resource's handler (``index.handler``)."""
