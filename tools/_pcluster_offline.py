"""What both ParallelCluster validators (tools/pcluster_validate.py, tools/pcluster_validate_image.py)
share: no AWS call ever leaves the process, and marshmallow's messages as "Path.To.Key: text".

Imported first by each, inside .venv-pcluster (the tools folder is the script's sys.path[0]).
"""

from __future__ import annotations

import os

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

import botocore.client  # noqa: E402
from botocore.exceptions import NoCredentialsError  # noqa: E402


def _offline(self, operation_name, api_params):  # noqa: ANN001
    raise NoCredentialsError()


# A validator that would call AWS fails loudly instead of hanging.
botocore.client.BaseClient._make_api_call = _offline  # type: ignore[method-assign]


def flatten(messages, path=""):  # noqa: ANN001
    if isinstance(messages, dict):
        for key, value in messages.items():
            yield from flatten(value, f"{path}.{key}" if path else str(key))
    elif isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        for message in messages:
            yield f"{path or 'config'}: {message}"
    elif isinstance(messages, list):
        for i, value in enumerate(messages):
            yield from flatten(value, f"{path}.{i}")
    else:
        yield f"{path or 'config'}: {messages}"
