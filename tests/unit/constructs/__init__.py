"""The CDK constructs, built from props (no config, no stack of the app)."""
