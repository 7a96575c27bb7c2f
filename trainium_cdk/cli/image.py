"""`trn image init` and `trn image push`: a training image of your own, on the Neuron track's pinned base.

``init`` writes a starter Dockerfile (with its requirements.txt and .dockerignore) that builds FROM the
build argument names.BASE_IMAGE_BUILD_ARG. ``push`` builds a Dockerfile with that argument set to the
public ECR Gallery copy of the track's Neuron training image (versions.py), logs in to ECR and pushes to
the training image repository of the deployed EKS or Batch stack (output TrainingImageRepositoryUri),
with Docker or the engine CDK_DOCKER names (Finch). The repository's tags are immutable: the default tag
is new on every push (the context directory's name and the UTC time), and a tag already there is refused
before anything is built.

stdout carries only the result (the image URI; with --dry-run, the commands), so that
``IMAGE=$(trn image push ...)`` works; progress and the engine's own output go to stderr. The ECR password
goes to the engine on stdin (``login --password-stdin``), never on a command line.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import (
    CliError,
    client,
    error_code,
    find_config_path,
    has_credentials,
    parse_overrides,
    read_config,
    session,
    stack_outputs,
)
from trainium_cdk.cli.doctor_local import CDK_DOCKER
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.names import (
    BASE_IMAGE_BUILD_ARG,
    BASE_TAG_BUILD_ARG,
    OUTPUT_TRAINING_IMAGE_REPOSITORY_URI,
    output_key,
)

# The backends whose stack has a training image repository (the others run code from /fsx: `trn sync`).
IMAGE_BACKENDS = ("eks", "batch")
# Trainium and Inferentia hosts are x86_64: an image built on an arm64 machine (Apple silicon) must say so.
PLATFORM = "linux/amd64"
DEFAULT_DOCKERFILE = "Dockerfile"
# What a dry run without credentials shows for the stack's image repository (${...}, as the EKS dry run's image).
REPOSITORY_PLACEHOLDER = "TRAINING_IMAGE_REPOSITORY"
# Docker's rule for a tag (the ECR limit, 300 characters, is looser).
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE | re.MULTILINE)
# The starter files `trn image init` writes: packaged name -> name written.
STARTER = "trainium_cdk.examples.starter"
STARTER_FILES = {"Dockerfile": "Dockerfile", "requirements.txt": "requirements.txt", "dockerignore": ".dockerignore"}


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# The clock of the default tag: replaced in tests.
NOW: Callable[[], dt.datetime] = _utc_now


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "image", help="your own training image: `init` writes a starter Dockerfile, `push` builds and pushes it",
        description="Build a Dockerfile on the Neuron track's pinned training image and push it to the deployment's "
        "training image repository (EKS or Batch stack), for `trn submit --image`.",
    )
    image = p.add_subparsers(dest="image_command", metavar="SUBCOMMAND", required=True)

    i = image.add_parser(
        "init", help="write a starter Dockerfile, requirements.txt and .dockerignore (never over a file)",
        description=f"Write a starter Dockerfile (FROM the build argument {BASE_IMAGE_BUILD_ARG}), requirements.txt "
        "and .dockerignore into DIR; a file that exists is left as it is.",
    )
    i.add_argument("directory", nargs="?", default=".", metavar="DIR", help="where to write them (default: .)")
    i.add_argument("--config", metavar="PATH", help="config YAML whose Neuron track's image the Dockerfile defaults "
                   "to (default: config/default.yaml)")
    i.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
                   help="override like `cdk synth -c`; repeatable")
    i.set_defaults(func=init)

    q = image.add_parser(
        "push", help="build a Dockerfile on the track's Neuron image and push it to the stack's repository",
        description=f"Build DOCKERFILE (for {PLATFORM}) with --build-arg {BASE_IMAGE_BUILD_ARG}=<the Neuron track's "
        "training image> (and BASE_TAG, the examples' argument, when the Dockerfile declares it), log in to ECR and "
        "push to the TrainingImageRepositoryUri output of the EKS or Batch stack. Docker, or the engine CDK_DOCKER "
        "names (finch). Prints the image URI on stdout.",
    )
    q.add_argument("--dockerfile", metavar="PATH",
                   help=f"the Dockerfile (default: {DEFAULT_DOCKERFILE} of --context, else ./{DEFAULT_DOCKERFILE})")
    q.add_argument("--context", metavar="DIR", help="build context (default: the Dockerfile's directory)")
    q.add_argument("--recipe", metavar="NAME",
                   help="a recipe's image (its folder of trainium_cdk/recipes, tagged recipe-NAME-<time>), which "
                   "`trn submit --job NAME` then finds")
    q.add_argument("--tag", help="image tag (default: <context directory>-<UTC time>, new on every push; the "
                   "repository's tags are immutable)")
    q.add_argument("--backend", choices=IMAGE_BACKENDS,
                   help="whose repository (default: the first of eks, batch that the config deploys)")
    q.add_argument("--dry-run", action="store_true", help="print the commands; build, log in and push nothing")
    q.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
    q.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
                   help="override like `cdk synth -c` (region, backends, ...); repeatable")
    q.set_defaults(func=push)


# -- init --------------------------------------------------------------------------------------------


def init(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    directory = Path(args.directory)
    if directory.exists() and not directory.is_dir():
        raise ConfigError("DIR", str(directory), "a directory (the starter files go in it)")
    if args.config is None and find_config_path() is None:  # no project here: the default track's image
        track = versions.NEURON_TRACKS[versions.DEFAULT_NEURON_TRACK]
        err.write(f"trn image init: no config here: the Dockerfile defaults to the {track.name} track's image "
                  "(--config names yours)\n")
    else:
        track = read_config(args.config, parse_overrides(args.overrides)).neuron_track
    directory.mkdir(parents=True, exist_ok=True)
    starter = resources.files(STARTER)
    # The track's image as the default: a Dockerfile whose FROM has no value builds nowhere but through push.
    base = versions.neuron_public_training_image(track.name)
    for packaged, name in STARTER_FILES.items():
        path = directory / name
        if path.exists():
            out.write(f"kept {path} (it exists)\n")
            continue
        text = starter.joinpath(packaged).read_text()
        path.write_text(text.replace(f"\nARG {BASE_IMAGE_BUILD_ARG}\n", f"\nARG {BASE_IMAGE_BUILD_ARG}={base}\n"))
        out.write(f"wrote {path}\n")
    dockerfile = directory / "Dockerfile"
    out.write(f"next: put your code beside it, then\n  trn image push --dockerfile {shlex.quote(str(dockerfile))}\n")
    return 0


# -- push --------------------------------------------------------------------------------------------


def push(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = read_config(args.config, parse_overrides(args.overrides))
    backend = image_backend(config, args.backend)
    recipe_tag = None
    if args.recipe is not None:
        from trainium_cdk import recipes

        if args.context or args.dockerfile:
            raise ConfigError("--recipe", args.recipe, "without --context or --dockerfile: the recipe's folder is both")
        recipe = recipes.recipe_for(config, args.recipe, backend, field_name="--recipe")
        args.context = str(recipe.build_context)
        args.dockerfile = str(recipe.folder / DEFAULT_DOCKERFILE)
        recipe_tag = f"{recipe.image_tag_prefix}{NOW():%Y%m%d-%H%M%S}"
    if args.context and not Path(args.context).is_dir():
        raise ConfigError("--context", args.context, "a directory (the build context)")
    if args.dockerfile:
        dockerfile = Path(args.dockerfile)
    else:
        dockerfile = Path(args.context) / DEFAULT_DOCKERFILE if args.context else Path(DEFAULT_DOCKERFILE)
    if not dockerfile.is_file():
        raise ConfigError("--dockerfile", str(dockerfile), "a Dockerfile (`trn image init` writes a starter one)")
    context = Path(args.context) if args.context else dockerfile.parent
    if not context.is_dir():
        raise ConfigError("--context", str(context), "a directory (the build context)")
    tag = args.tag or recipe_tag or default_tag(context)
    if not _TAG.fullmatch(tag):
        raise ConfigError("--tag", tag, "an image tag: up to 128 letters, digits, '_', '.' and '-', not starting "
                          "with '.' or '-'")
    track = config.neuron_track
    base = versions.neuron_public_training_image(track.name)
    build_args = base_build_args(dockerfile.read_text(errors="replace"), base=base, tag=track.training_image_tag)
    if not build_args:
        err.write(
            f"trn image push: warning: {dockerfile} declares no ARG {BASE_IMAGE_BUILD_ARG} (nor {BASE_TAG_BUILD_ARG}): "
            f"it is not built on the {track.name} track's Neuron image ({base}), as the Dockerfile `trn image init` "
            "writes is\n"
        )

    engine = os.environ.get(CDK_DOCKER) or "docker"
    if not args.dry_run and shutil.which(engine) is None:
        raise CliError(f"{engine} not found ({CDK_DOCKER}={engine}): start Docker, or install Finch and "
                       f"`export {CDK_DOCKER}=finch`; `trn doctor` checks it")
    sess = session(config.region)
    stack = config.stack_name(backend)
    key = output_key(OUTPUT_TRAINING_IMAGE_REPOSITORY_URI)
    if args.dry_run and not has_credentials(sess):  # offline: the stack's repository by its output's name
        placeholder = f"${{{REPOSITORY_PLACEHOLDER}}}"
        err.write(f"trn image push: no AWS credentials: {placeholder} stands for stack {stack}'s output {key}; a "
                  "push also checks that the tag is new\n")
        return _print_push(out, engine, dockerfile, context, build_args, image=f"{placeholder}:{tag}",
                           registry=placeholder)
    outputs = stack_outputs(client(sess, "cloudformation"), stack, config.region, backend=backend)
    repository = outputs.get(key)
    if not repository:
        raise CliError(f"stack {stack} has no output {key}: redeploy it with this version of trainium-cdk (make "
                       "deploy), which adds the training image repository")
    registry, _, name = repository.partition("/")
    image = f"{repository}:{tag}"
    ecr = client(sess, "ecr")
    if tag_exists(ecr, name, tag):
        raise CliError(f"{image} exists: the repository's tags are immutable; pass another --tag, or leave --tag out "
                       "for a new one")
    build, publish = _build(engine, dockerfile, context, build_args, image), [engine, "push", image]
    if args.dry_run:
        return _print_push(out, engine, dockerfile, context, build_args, image=image, registry=registry)
    err.write(f"trn image push: building {dockerfile} on {base} (Neuron {track.neuron_release}, {track.name} track)\n")
    _run(build, err, what=f"`{engine} build`", code=1)
    user, password, endpoint = authorization(ecr, registry)
    err.write(f"trn image push: logging in to {endpoint}\n")
    _run([engine, "login", "--username", user, "--password-stdin", endpoint], err, what=f"`{engine} login`",
         stdin=password)
    err.write(f"trn image push: pushing {image}\n")
    _run(publish, err, what=f"`{engine} push`", code=1)
    same = [*(["--config", args.config] if args.config else []), *(f for o in args.overrides for f in ("-c", o))]
    err.write(f"pushed {image}\n  {shlex.join(['trn', 'submit', '--backend', backend, *same, '--image', image])}\n")
    out.write(image + "\n")
    return 0


def _build(engine: str, dockerfile: Path, context: Path, build_args: dict[str, str], image: str) -> list[str]:
    return [engine, "build", "--platform", PLATFORM, "--file", str(dockerfile),
            *[item for arg, value in build_args.items() for item in ("--build-arg", f"{arg}={value}")],
            "--tag", image, str(context)]


def _print_push(out: TextIO, engine: str, dockerfile: Path, context: Path, build_args: dict[str, str], *, image: str,
                registry: str) -> int:
    """A dry run: the build, login and push commands a push runs; nothing is run."""
    login = [engine, "login", "--username", "AWS", "--password-stdin", registry.partition("/")[0]]
    for argv in (_build(engine, dockerfile, context, build_args, image), login, [engine, "push", image]):
        out.write(shlex.join(argv) + "\n")
    out.write(f"# the password on stdin: `aws ecr get-authorization-token` for {login[-1]}; nothing was run\n")
    return 0


def image_backend(config: Config, chosen: str | None) -> str:
    if chosen:
        return chosen
    for backend in config.backends:
        if backend in IMAGE_BACKENDS:
            return backend
    raise CliError(
        f"the config deploys no backend with a training image repository (backends: {', '.join(config.backends)}; "
        f"{' and '.join(IMAGE_BACKENDS)} have one): ParallelCluster and the development instance run your code from "
        "/fsx, where `trn sync` puts it; or pass --backend"
    )


def default_tag(context: Path) -> str:
    """<the context directory's name>-<UTC time to the second>: new on every push, and says what it holds."""
    name = re.sub(r"[^a-z0-9_.-]+", "-", context.resolve().name.lower()).strip(".-_")[:64] or "image"
    return f"{name}-{NOW():%Y%m%d-%H%M%S}"


def base_build_args(dockerfile: str, *, base: str, tag: str) -> dict[str, str]:
    """The build arguments naming the base that the Dockerfile declares (an undeclared one would only warn)."""
    declared = set(_ARG.findall(dockerfile))
    offered = {BASE_IMAGE_BUILD_ARG: base, BASE_TAG_BUILD_ARG: tag}
    return {arg: value for arg, value in offered.items() if arg in declared}


def tag_exists(ecr: Any, repository: str, tag: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        ecr.describe_images(repositoryName=repository, imageIds=[{"imageTag": tag}])
    except ClientError as error:
        if error_code(error) == "ImageNotFoundException":
            return False
        raise
    return True


def authorization(ecr: Any, registry: str) -> tuple[str, str, str]:
    """(user, password, registry host) of an ECR authorization token for ``registry`` (valid 12 hours)."""
    account = registry.split(".", 1)[0]
    data = ecr.get_authorization_token(registryIds=[account])["authorizationData"][0]
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    endpoint = str(data.get("proxyEndpoint") or registry).removeprefix("https://")
    return user, password, endpoint


def _run(argv: Sequence[str], err: TextIO, *, what: str, stdin: str | None = None, code: int = 2) -> None:
    """Run an engine command, its output streamed to ``err``; a failure is one line (exit ``code``)."""
    process = subprocess.Popen(
        list(argv), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    )
    if stdin is not None:
        assert process.stdin is not None
        process.stdin.write(stdin)
        process.stdin.close()
    assert process.stdout is not None
    for line in process.stdout:
        err.write(line)
        err.flush()
    returncode = process.wait()
    if returncode != 0:
        raise CliError(f"{what} failed (exit {returncode}): its output is above", code=code)
