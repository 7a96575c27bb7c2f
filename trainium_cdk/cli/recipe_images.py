"""A recipe's image: the newest one `trn image push --recipe NAME` pushed to a stack's training image repository.

Recipe images are built by the user when a recipe is used (`trn image push --recipe NAME`, on the track's Neuron
image), not on every deploy: a recipe's image is large and most deployments run none of them.
"""

from __future__ import annotations

import re
from typing import Any

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import CliError, client, deployed_output, session
from trainium_cdk.facts.names import OUTPUT_TRAINING_IMAGE_REPOSITORY_URI
from trainium_cdk.recipes import Recipe

# What a dry run shows for a recipe's image it did not look up (it asks AWS nothing).
PLACEHOLDER = "${RECIPE_IMAGE}"
# The time `trn image push --recipe` appends to the prefix (image.py): recipe-hf-lora-<this> is hf-lora's, never
# recipe-hf-lora-data-<...> (another recipe's name that starts with it).
PUSHED_AT = re.compile(r"\d{8}-\d{6}")


def recipe_image(config: Config, recipe: Recipe, backend: str, *, given: str | None, dry_run: bool) -> str:
    """``given`` (--image), else the newest image of ``recipe`` in the ``backend`` stack's repository."""
    if given:
        return given
    if dry_run:
        return PLACEHOLDER
    repository = deployed_output(config, backend, OUTPUT_TRAINING_IMAGE_REPOSITORY_URI)
    tag = newest_tag(client(session(config.region), "ecr"), repository.split("/", 1)[1], recipe.image_tag_prefix)
    if tag is None:
        builds = recipe.image_from or recipe.name
        raise CliError(
            f"no image of recipe {recipe.name} in {repository}: `trn image push --recipe {builds}` builds and pushes it "
            "(on the track's Neuron image), or pass --image"
        )
    return f"{repository}:{tag}"


def newest_tag(ecr: Any, repository: str, prefix: str) -> str | None:
    """The tag ``<prefix><time pushed>`` of the image pushed last, or None."""
    newest: tuple[Any, str] | None = None
    for page in ecr.get_paginator("describe_images").paginate(repositoryName=repository, filter={"tagStatus": "TAGGED"}):
        for image in page.get("imageDetails", []):
            for tag in image.get("imageTags") or []:
                pushed = tag.startswith(prefix) and PUSHED_AT.fullmatch(tag[len(prefix):])
                if pushed and (newest is None or image["imagePushedAt"] > newest[0]):
                    newest = (image["imagePushedAt"], tag)
    return newest[1] if newest else None
