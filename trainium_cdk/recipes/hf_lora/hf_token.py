"""A Hugging Face token for gated models and datasets, read from AWS Secrets Manager when the job runs.

The job names the secret (``HF_TOKEN_SECRET``, from the config's ``hugging_face.token_secret``); the token is
never in a template, a manifest or a job definition, and never printed. The job's role may read that one
secret: on Batch the job role, on EKS the service account the recipe's data job runs as (EKS Pod Identity).
The secret holds the token as its string, or as JSON with a ``HF_TOKEN`` or ``token`` key:

    aws secretsmanager create-secret --name hf-token --secret-string "$HF_TOKEN"

Runs in the recipe's image: boto3 and the standard library only.
"""

from __future__ import annotations

import json

KEYS = ("HF_TOKEN", "token", "hf_token")


def token_from_secret(name: str, *, client=None) -> str:  # noqa: ANN001 (a boto3 Secrets Manager client)
    """The token in secret ``name`` (its name or ARN). One line, and no token, on failure."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        secrets = client or boto3.client("secretsmanager")
        answer = secrets.get_secret_value(SecretId=name)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "error")
        raise SystemExit(
            f"hf-token: secret {name}: {code}: the job's role reads only the secret the config names "
            "(hugging_face.token_secret), and the secret must exist in the stack's region"
        ) from None
    except BotoCoreError as err:
        raise SystemExit(f"hf-token: secret {name}: {type(err).__name__}: {err}") from None
    text = answer.get("SecretString")
    if text is None:
        raise SystemExit(f"hf-token: secret {name} holds binary data: store the token as its string")
    text = text.strip()
    if text.startswith("{"):
        try:
            values = json.loads(text)
        except json.JSONDecodeError:
            raise SystemExit(f"hf-token: secret {name} is neither a token nor JSON") from None
        found = next((values[k] for k in KEYS if isinstance(values.get(k), str) and values[k].strip()), None)
        if found is None:
            raise SystemExit(f"hf-token: secret {name} is JSON without a {', '.join(KEYS)} key")
        text = found.strip()
    if not text:
        raise SystemExit(f"hf-token: secret {name} is empty")
    return text
