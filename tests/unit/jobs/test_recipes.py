"""Recipes (trainium_cdk.recipes) through the verbs: `trn submit --job NAME` and `trn rehearse --job NAME` on the
backends a recipe runs on, its image found in the stack's repository (`trn image push --recipe NAME`).

A toy recipe, registered by the test: the plumbing every shipped recipe uses (tests of the shipped recipes run their
real code: tests/test_recipe_*.py).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chart_helpers import as_run
from tests.support.cli_support import DEFAULT_YAML, assert_one_clean_line, client_error, run_cli
from trainium_cdk import recipes
from trainium_cdk.app.config import TrainingJobSettings
from trainium_cdk.runtime.launcher import launch_command

TOY_SCRIPT = """import json, os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
print("TOY " + json.dumps({"rank": dist.get_rank(), "argv": sys.argv[1:], "toy": os.environ.get("TOY"),
                           "cache": os.environ.get("TRN_CACHE_DIR")}), flush=True)
dist.destroy_process_group()
"""


@pytest.fixture
def toy(tmp_path: Path) -> Any:
    folder = tmp_path / "toy_recipe"
    folder.mkdir()
    (folder / "train.py").write_text(TOY_SCRIPT)

    def job(ctx: recipes.RecipeContext) -> TrainingJobSettings:
        return TrainingJobSettings(
            name="toy", group=ctx.group.name, nodes=ctx.nodes or 2, command=(f"{ctx.code}/train.py", "--steps", "5"),
            env={"TOY": "1"}, cache_set="toy",
        )

    recipe = recipes.register(recipes.Recipe(name="toy", summary="a toy", tracks=("xla",), job=job, folder=folder))
    yield recipe
    recipes.unregister("toy")


@pytest.fixture
def config(default_config) -> Path:
    return default_config("eks", "batch", "parallelcluster")


def test_a_recipe_on_eks_renders_its_command_env_and_cache_set(no_credentials, toy, config):
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--job", "toy", "--name", "t1",
                     "--dry-run", "--image", "example.com/toy:1", "--env", "EXTRA=2")
    assert result.code == 0, result.err
    (job,) = [o for o in yaml.safe_load_all(result.out) if o]
    (container,) = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert container["image"] == "example.com/toy:1"
    assert as_run(container) == launch_command(["/opt/trainium-cdk/recipes/toy_recipe/train.py", "--steps", "5"])
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["TOY"], env["EXTRA"], env["TRN_CACHE_DIR"]) == ("1", "2", "/fsx/neuron-cache/toy")


def test_a_recipe_on_batch_overrides_only_what_differs_from_the_definition(no_credentials, toy, config):
    result = run_cli("submit", "--backend", "batch", "--config", str(config), "--job", "toy", "--name", "t1",
                     "--dry-run", "--image", "example.com/toy:1")
    assert result.code == 0, result.err
    request = json.loads(result.out.split("SubmitJob:\n", 1)[1])
    overrides = request["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"]
    assert overrides["command"] == launch_command(["/opt/trainium-cdk/recipes/toy_recipe/train.py", "--steps", "5"])
    # The definition already has the rest of the job environment: only the recipe's own differences travel.
    assert {e["name"]: e["value"] for e in overrides["environment"]} == {
        "TRN_CACHE_DIR": "/fsx/neuron-cache/toy", "TOY": "1"}
    assert "with image example.com/toy:1 on every container" in result.out


def test_a_recipe_where_it_does_not_run_is_one_line(no_credentials, toy, config):
    result = run_cli("submit", "--backend", "parallelcluster", "--config", str(config), "--job", "toy", "--dry-run")
    assert_one_clean_line(result, "--job", "toy runs on eks, batch")
    native = run_cli("submit", "--backend", "eks", "--config", str(config), "--job", "nothing-such", "--dry-run")
    assert_one_clean_line(native, "--job", "nothing-such")


def test_without_image_submit_takes_the_newest_recipe_image_of_the_stack(aws, toy, config):
    repository = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainium-batch-trainingimages"

    def outputs(params: dict[str, Any]) -> Any:
        if params["StackName"] != "trainium-batch":
            return client_error("ValidationError", "DescribeStacks", "Stack with id x does not exist")
        return {"Stacks": [{"StackName": "trainium-batch", "StackStatus": "CREATE_COMPLETE",
                            "CreationTime": dt.datetime(2026, 11, 1),
                            "Outputs": [{"OutputKey": "TrainingImageRepositoryUri", "OutputValue": repository}]}]}

    pushed = [("recipe-toy-20261101-000000", 1), ("recipe-toy-20261120-000000", 20), ("other-20261125", 25)]
    aws.fake("DescribeStacks", outputs)
    aws.fake("DescribeImages", {"imageDetails": [
        {"imageTags": [tag], "imagePushedAt": dt.datetime(2026, 11, day, tzinfo=dt.UTC)} for tag, day in pushed]})
    from trainium_cdk.app.config import load_config
    from trainium_cdk.cli.recipe_images import recipe_image

    image = recipe_image(load_config(config), toy, "batch", given=None, dry_run=False)
    assert image == f"{repository}:recipe-toy-20261120-000000"
    assert aws.of("DescribeImages") == [{"repositoryName": "trainium-batch-trainingimages",
                                         "filter": {"tagStatus": "TAGGED"}}]
    aws.fake("DescribeImages", {"imageDetails": []})
    with pytest.raises(Exception, match="trn image push --recipe toy"):
        recipe_image(load_config(config), toy, "batch", given=None, dry_run=False)


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["eks", "batch"])
def test_rehearse_a_recipe_runs_its_folder_as_the_image_has_it(toy, config, tmp_path, monkeypatch, backend):
    monkeypatch.chdir(tmp_path)
    result = run_cli("rehearse", "--backend", backend, "--config", str(config), "--job", "toy")
    assert result.code == 0, result.out[-3000:] + result.err
    found = [json.loads(f) for f in re.findall(r"TOY (\{[^{}]*\})", result.out)]
    assert sorted(r["rank"] for r in found) == [0, 1, 2, 3]
    for r in found:
        assert r["argv"] == ["--steps", "5"] and r["toy"] == "1"
        assert r["cache"].endswith("/.trn-rehearse/fsx/neuron-cache/toy")
