"""Validate ParallelCluster image configurations (`pcluster build-image`) offline, with ParallelCluster's
own code.

Runs inside the aws-parallelcluster virtual environment (.venv-pcluster), as a subprocess:

    .venv-pcluster/bin/python tools/pcluster_validate_image.py < request.json

Request: a JSON list of {"name": image id, "config": image configuration}. Answer: a JSON list, one
{"errors": [...], "warnings": [...], "official_image_name_prefix": str} per request item, each message
"Path.To.Key: text"; the prefix is the one `pcluster list-official-images` searches for the
configuration's OS (request key "os", x86_64) in this ParallelCluster version.

What runs: the marshmallow schema (ImageBuilderSchema().load: types, required and unknown keys, the
ParentImage and component URL formats) and the validators that need no AWS account (image id, number of
components, root volume size). The others describe the parent AMI, the instance type and the network
through AWS at `pcluster build-image`. Every AWS call is refused before it leaves the process.
"""

from __future__ import annotations

import json
import sys

from _pcluster_offline import flatten  # noqa: E402  (first: it cuts AWS off)
from marshmallow import ValidationError  # noqa: E402
from pcluster.aws.ec2 import Ec2Client  # noqa: E402
from pcluster.constants import PCLUSTER_IMAGE_ID_REGEX  # noqa: E402
from pcluster.schemas.imagebuilder_schema import ImageBuilderSchema  # noqa: E402
from pcluster.validators.ebs_validators import EbsVolumeTypeSizeValidator  # noqa: E402
from pcluster.validators.imagebuilder_validators import ComponentsValidator  # noqa: E402

# pcluster/config/imagebuilder_config.py: the image's root volume is gp3.
ROOT_VOLUME_TYPE = "gp3"


def validate(name: str, config: dict) -> dict[str, list[str]]:
    import re

    errors: list[str] = []
    if not re.match(PCLUSTER_IMAGE_ID_REGEX, name):
        errors.append(f"ImageId: {name!r} does not match {PCLUSTER_IMAGE_ID_REGEX}")
    try:
        image = ImageBuilderSchema().load(config)
    except ValidationError as err:
        return {"errors": errors + sorted(flatten(err.messages)), "warnings": []}
    warnings: list[str] = []
    checks = [("Build.Components", ComponentsValidator, {"components": image.build.components})]
    if image.image and image.image.root_volume and image.image.root_volume.size:
        checks.append((
            "Image.RootVolume.Size", EbsVolumeTypeSizeValidator,
            {"volume_type": ROOT_VOLUME_TYPE, "volume_size": image.image.root_volume.size},
        ))
    for where, validator, arguments in checks:
        for failure in validator().execute(**arguments):
            (errors if failure.level.name == "ERROR" else warnings).append(f"{where}: {failure.message}")
    return {"errors": errors, "warnings": warnings}


def main() -> None:
    answers = []
    for item in json.load(sys.stdin):
        answer = validate(item["name"], item["config"])
        answer["official_image_name_prefix"] = Ec2Client._get_official_image_name_prefix(item.get("os"), "x86_64")
        answers.append(answer)
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
