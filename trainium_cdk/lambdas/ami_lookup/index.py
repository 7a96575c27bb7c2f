"""CloudFormation custom resource Custom::AmiLookup: the newest AMI that matches a DescribeImages filter.

Properties: ``Owners`` (a list, e.g. ["amazon"]) and ``Filters`` (DescribeImages filters). The AMI is
resolved on Create in the function's region (the stack's) and kept for the life of the resource: an
Update resolves again only when Owners or Filters changed, so a redeploy (even one that replaces this
function's code) never moves the AMI. Delete does nothing: the AMI belongs to its owner. The resource's
physical id and its ``ImageId`` attribute are the AMI id.

Runs in Lambda with the standard library and boto3 only; `trn doctor` imports :func:`newest_image` to
check the same filter before a deploy.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

QUERY_KEYS = ("Owners", "Filters")
# An AMI pinned long ago may be deprecated (AWS deprecates public AMIs after two years) and is still
# the one the stack runs: DescribeImages leaves deprecated AMIs out unless asked.
INCLUDE_DEPRECATED = True
NO_RESOURCE = "unresolved"


class NoMatchingImage(LookupError):
    pass


def newest_image(ec2: Any, owners: list[str], filters: list[dict[str, Any]]) -> dict[str, Any]:
    """The matching image with the newest CreationDate (ISO 8601: sorts as text); NoMatchingImage if none."""
    images: list[dict[str, Any]] = []
    for page in ec2.get_paginator("describe_images").paginate(
        Owners=owners, Filters=filters, IncludeDeprecated=INCLUDE_DEPRECATED
    ):
        images += page.get("Images", [])
    if not images:
        wanted = ", ".join(f"{f['Name']}={'|'.join(f['Values'])}" for f in filters)
        raise NoMatchingImage(
            f"no AMI owned by {', '.join(owners)} matches {wanted} in {ec2.meta.region_name}: "
            "name an AMI id in the config instead (batch.ami_id, instance.ami_id)"
        )
    return max(images, key=lambda image: (image.get("CreationDate", ""), image["ImageId"]))


def query(properties: dict[str, Any]) -> dict[str, Any]:
    return {k: properties.get(k) for k in QUERY_KEYS}


def resolve(event: dict[str, Any], ec2_client: Any = None) -> tuple[str, dict[str, str]]:
    """(physical id, attributes) for a CloudFormation request."""
    kind = event["RequestType"]
    if kind == "Delete":
        return event["PhysicalResourceId"], {}
    props = event["ResourceProperties"]
    if kind == "Update" and query(props) == query(event["OldResourceProperties"]):
        kept = event["PhysicalResourceId"]
        return kept, {"ImageId": kept}
    if ec2_client is None:
        import boto3

        ec2_client = boto3.client("ec2")
    image = newest_image(ec2_client, list(props["Owners"]), list(props["Filters"]))
    return image["ImageId"], {"ImageId": image["ImageId"], "Name": image.get("Name", "")}


def respond(event: dict[str, Any], status: str, physical_id: str, data: dict[str, str], reason: str = "") -> bytes:
    """The response document CloudFormation waits for, PUT to the request's pre-signed URL."""
    body = json.dumps({
        "Status": status,
        "Reason": reason or "see the function's log",
        "PhysicalResourceId": physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": data,
    }).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - CloudFormation's https URL
        answer.read()
    return body


def handler(event: dict[str, Any], context: Any, ec2_client: Any = None) -> None:
    try:
        physical_id, data = resolve(event, ec2_client)
    except Exception as error:  # noqa: BLE001 - any failure must reach CloudFormation, or it waits an hour
        print(json.dumps({"RequestType": event.get("RequestType"), "error": repr(error)}))
        respond(event, "FAILED", event.get("PhysicalResourceId") or NO_RESOURCE, {}, str(error)[:1000])
        return
    print(json.dumps({"RequestType": event["RequestType"], "PhysicalResourceId": physical_id}))
    respond(event, "SUCCESS", physical_id, data)
