"""The cdk8s charts and the manifests written from them."""
