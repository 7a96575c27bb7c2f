"""The config mapped to props: one adapter module per stack (network, storage) and per backend (eks,
batch, parallelcluster, instance), each returning typed props (frozen dataclasses).

Constructs and charts never read the config (tests/test_layering.py, tests/test_props.py): what they
need reaches them as values through these modules, which the stacks and dist/ call. The modules load
the CDK only where their props are CDK types; ``parallelcluster`` loads none (the pcluster CLI's YAML
is rendered without it).
"""
