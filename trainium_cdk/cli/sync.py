"""`trn sync LOCAL_DIR [--to PREFIX] [--dry-run]`: a code directory or a dataset onto /fsx, without an image.

The storage stack's data repository association (storage.data_repository) links a prefix of its bucket
(output DataBucketName) to a path of the file system (file_system_path, default /s3), and every backend
mounts the file system at /fsx (names.SHARED_MOUNT). An object uploaded under the prefix shows up at
/fsx<file_system_path>/... once FSx has imported it (automatic import: the listing first, the content on
first read, lazily from S3).

Only what changed is uploaded: a file whose object has the same size and the same content is left alone.
The content is compared by the object's ETag, which for what this command uploads is the MD5 of the file
(or of its parts, at PART_SIZE) in a bucket with S3-managed keys, else by the SHA-256 it stores in the
object's metadata (one HeadObject, only for objects of the same size). ``.git``, ``__pycache__`` and
``.venv`` are skipped, and what ``.trnignore`` in LOCAL_DIR lists. Each object carries the file's mode as
FSx's POSIX metadata (x-amz-meta-file-permissions, FSx for Lustre guide "POSIX metadata support for
data repositories"), so that a script's executable bit survives.

stdout carries only the result, the /fsx path (with --dry-run, what would be uploaded), so that
``CODE=$(trn sync my-job)`` works; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from trainium_cdk.app.config import Config, DataRepository
from trainium_cdk.cli._common import (
    CliError,
    client,
    has_credentials,
    parse_overrides,
    read_config,
    session,
    stack_outputs,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import (
    OUTPUT_DATA_BUCKET_NAME,
    OUTPUT_FILE_SYSTEM_ID,
    REHEARSAL_FSX,
    SHARED_MOUNT,
    output_key,
)
from trainium_cdk.rehearsal.seed import on_fsx, seed

SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv"})
IGNORE_FILE = ".trnignore"
# What a dry run without credentials shows for the storage stack's data bucket.
BUCKET_PLACEHOLDER = "DATA_BUCKET"
# Multipart uploads from this size, in parts of this size: the ETag of what trn uploads is then known here.
PART_SIZE = 16 * 1024 * 1024
# Files uploaded at once (each in up to this many parts at once: memory stays near PART_SIZE x this).
CONCURRENCY = 8
SHA256_METADATA = "sha256"
# FSx for Lustre's POSIX metadata keys (x-amz-meta-...): the mode as <octal file type><octal permissions>.
PERMISSIONS_METADATA = "file-permissions"
_PREFIX = re.compile(r"[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sync", help="upload a code directory or a dataset to the file system's S3 data repository: /fsx on every node",
        description="Upload the files of LOCAL_DIR that changed to the storage stack's data bucket, under the data "
        "repository association's prefix: they show up at /fsx<file_system_path>/PREFIX on every node (EKS, Batch, "
        "Slurm, the development instance). Skips .git, __pycache__, .venv and what LOCAL_DIR/.trnignore lists "
        "(shell patterns: a name at any depth, a path from LOCAL_DIR, a trailing / for directories). Prints the /fsx "
        "path on stdout.",
    )
    p.add_argument("local_dir", metavar="LOCAL_DIR", help="the directory to upload")
    p.add_argument("--to", metavar="PREFIX", help="where under the data repository (default: LOCAL_DIR's name)")
    p.add_argument("--dry-run", action="store_true", help="list what would be uploaded; upload nothing")
    p.add_argument("--rehearsal", action="store_true",
                   help="copy to the rehearsal's /fsx instead (./.trn-rehearse/fsx, where `trn rehearse` runs your "
                   "job), at the path every node would see; no AWS call")
    p.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
    p.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
                   help="override like `cdk synth -c` (region, ...); repeatable")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class LocalFile:
    path: Path
    relative: str  # POSIX path from LOCAL_DIR
    size: int
    mode: int


@dataclass(frozen=True)
class Target:
    """Where LOCAL_DIR goes: the bucket, the key prefix of its files, and the path every node sees."""

    bucket: str
    key_prefix: str  # ends with /
    fsx_path: str


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = read_config(args.config, parse_overrides(args.overrides))
    repository = data_repository(config)
    local = Path(args.local_dir)
    if not local.is_dir():
        raise ConfigError("LOCAL_DIR", str(local), "a directory (the code or dataset to upload)")
    to = destination(args.to, local)
    files, skipped = local_files(local)
    if args.rehearsal:  # the twin of the upload: the same files where the nodes' /fsx would show them
        fsx_path = target_of(repository, "", to).fsx_path
        there = on_fsx(Path(REHEARSAL_FSX), fsx_path, field="--to")
        copied, unchanged = seed(local, there, [Path(f.relative) for f in files])
        err.write(f"copied {_files(copied)} to {there} (the rehearsal's {fsx_path}); {unchanged} unchanged\n")
        out.write(fsx_path + "\n")
        return 0
    sess = session(config.region)
    stack = config.stack_name("storage")
    if args.dry_run and not has_credentials(sess):  # offline: every file, to the stack's bucket by its output's name
        target = target_of(repository, f"${{{BUCKET_PLACEHOLDER}}}", to)
        for file in files:
            out.write(f"compare  {file.relative}  ({_size(file.size)})\n")
        out.write(f"# no AWS credentials: would compare {_files(len(files))} ({_size(sum(f.size for f in files))}) "
                  f"with s3://{target.bucket}/{target.key_prefix} (stack {stack}'s output "
                  f"{output_key(OUTPUT_DATA_BUCKET_NAME)}) and upload the new and changed ones, for {target.fsx_path}; "
                  "nothing was uploaded\n")
        return 0
    outputs = stack_outputs(client(sess, "cloudformation"), stack, config.region, backend="storage",
                            deploy="deploy it with storage.data_repository (`make synth`, then `make deploy`)")
    bucket = outputs.get(output_key(OUTPUT_DATA_BUCKET_NAME))
    if not bucket:
        raise CliError(f"stack {stack} has no output {output_key(OUTPUT_DATA_BUCKET_NAME)}: it was deployed without "
                       "storage.data_repository; deploy the config that has it (`make synth`, then `make deploy`)")
    target = target_of(repository, bucket, to)
    s3 = client(sess, "s3")
    plan = changed(s3, target, files)
    unchanged = len(files) - len(plan)
    if args.dry_run:
        for file, why in plan:
            out.write(f"{why}  {file.relative}  ({_size(file.size)})\n")
        out.write(f"# would upload {len(plan)} of {_files(len(files))} ({_size(sum(f.size for f, _ in plan))}) to "
                  f"s3://{target.bucket}/{target.key_prefix}, for {target.fsx_path}; nothing was uploaded\n")
        return 0
    ignored = f", {skipped} skipped ({', '.join(sorted(SKIPPED_DIRS))}, {IGNORE_FILE})" if skipped else ""
    if not plan:
        err.write(f"nothing to upload to s3://{target.bucket}/{target.key_prefix}: {_files(unchanged)} unchanged"
                  f"{ignored}\n")
        out.write(target.fsx_path + "\n")
        return 0
    for file, why in plan:
        err.write(f"{why}  {file.relative}  ({_size(file.size)})\n")
    upload(s3, target, [file for file, _ in plan])
    err.write(f"uploaded {_files(len(plan))} ({_size(sum(f.size for f, _ in plan))}) to s3://{target.bucket}/"
              f"{target.key_prefix}; {unchanged} unchanged{ignored}\n")
    if repository.auto_import:
        err.write(f"on every node at {target.fsx_path} once FSx has imported them (automatic import; the content "
                  "loads from S3 on first read)\n")
    else:
        file_system = outputs.get(output_key(OUTPUT_FILE_SYSTEM_ID), "<file system id>")
        err.write(f"automatic import is off (storage.data_repository.auto_import): to see them at {target.fsx_path}, "
                  f"aws fsx create-data-repository-task --file-system-id {file_system} --type "
                  f"IMPORT_METADATA_FROM_REPOSITORY --paths s3://{target.bucket}/{target.key_prefix} "
                  "--report Enabled=false\n")
    out.write(target.fsx_path + "\n")
    return 0


def data_repository(config: Config) -> DataRepository:
    if not config.storage.enabled:
        raise CliError("the deployment has no shared file system (storage.enabled is false): set storage.enabled: "
                       "true and storage.data_repository: {} in the config, then `make synth` and `make deploy`")
    if config.storage.data_repository is None:
        raise CliError("the file system has no S3 data repository: set storage.data_repository: {} in the config "
                       "(a bucket, created and retained, linked to /fsx/s3), then `make synth` and `make deploy`")
    return config.storage.data_repository


def destination(to: str | None, local: Path) -> str:
    """The path under the data repository: --to, else LOCAL_DIR's own name."""
    name = (to if to is not None else local.resolve().name).strip("/")
    if not _PREFIX.fullmatch(name) or any(part in (".", "..") for part in name.split("/")):
        raise ConfigError("--to", to if to is not None else name, "a relative path such as code/my-job (letters, "
                          "digits and ! - _ . * ' ( ) /, no . or .. parts)")
    return name


def target_of(repository: DataRepository, bucket: str, to: str) -> Target:
    prefix = repository.s3_prefix
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    fsx_root = SHARED_MOUNT + repository.file_system_path.rstrip("/")
    return Target(bucket=bucket, key_prefix=f"{prefix}{to}/", fsx_path=f"{fsx_root}/{to}")


def local_files(root: Path) -> tuple[list[LocalFile], int]:
    """The regular files under ``root`` to upload (sorted), and how many were skipped."""
    patterns = _ignore_patterns(root / IGNORE_FILE)
    files: list[LocalFile] = []
    skipped = 0
    for directory, dirs, names in os.walk(root):
        here = Path(directory)
        kept = []
        for name in sorted(dirs):
            relative = (here / name).relative_to(root).as_posix()
            if name in SKIPPED_DIRS or _ignored(relative, patterns, directory=True):
                skipped += 1
            else:
                kept.append(name)
        dirs[:] = kept
        for name in sorted(names):
            path = here / name
            relative = path.relative_to(root).as_posix()
            if relative == IGNORE_FILE or _ignored(relative, patterns, directory=False):
                skipped += 1
                continue
            try:
                info = path.stat()
            except OSError:  # a dangling link
                skipped += 1
                continue
            if not stat.S_ISREG(info.st_mode):
                skipped += 1
                continue
            files.append(LocalFile(path, relative, info.st_size, info.st_mode))
    return sorted(files, key=lambda f: f.relative), skipped


def _ignore_patterns(path: Path) -> list[str]:
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _ignored(relative: str, patterns: list[str], *, directory: bool) -> bool:
    name = relative.rsplit("/", 1)[-1]
    for pattern in patterns:
        if pattern.endswith("/"):
            if not directory:
                continue
            pattern = pattern.rstrip("/")
        if "/" in pattern:
            if fnmatch.fnmatchcase(relative, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def digests(path: Path) -> tuple[str, str]:
    """(the ETag S3 gives the object trn uploads from this file, its SHA-256), in one read."""
    sha = hashlib.sha256()
    whole = hashlib.md5(usedforsecurity=False)
    parts: list[bytes] = []
    with path.open("rb") as stream:
        while chunk := stream.read(PART_SIZE):
            sha.update(chunk)
            whole.update(chunk)
            parts.append(hashlib.md5(chunk, usedforsecurity=False).digest())
    size = path.stat().st_size
    if size < PART_SIZE:  # one PutObject below the multipart threshold (s3transfer uploads in parts from it)
        return whole.hexdigest(), sha.hexdigest()
    combined = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
    return f"{combined}-{len(parts)}", sha.hexdigest()


def changed(s3: Any, target: Target, files: list[LocalFile]) -> list[tuple[LocalFile, str]]:
    """The files to upload, each with why: ``new`` (no object) or ``changed`` (another size or content)."""
    remote: dict[str, tuple[int, str]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=target.bucket, Prefix=target.key_prefix):
        for item in page.get("Contents", []):
            remote[item["Key"]] = (int(item["Size"]), str(item.get("ETag", "")).strip('"'))
    plan = []
    for file in files:
        key = target.key_prefix + file.relative
        if key not in remote:
            plan.append((file, "new"))
            continue
        size, etag = remote[key]
        if size != file.size:
            plan.append((file, "changed"))
            continue
        local_etag, sha = digests(file.path)
        if etag == local_etag:
            continue
        # Another uploader's parts, or a bucket whose default key is KMS: the ETag is no MD5 then.
        metadata = s3.head_object(Bucket=target.bucket, Key=key).get("Metadata", {})
        if metadata.get(SHA256_METADATA) != sha:
            plan.append((file, "changed"))
    return plan


def upload(s3: Any, target: Target, files: list[LocalFile]) -> None:
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    config = TransferConfig(multipart_threshold=PART_SIZE, multipart_chunksize=PART_SIZE, max_concurrency=CONCURRENCY)
    with create_transfer_manager(s3, config) as manager:
        futures = [
            manager.upload(str(file.path), target.bucket, target.key_prefix + file.relative, extra_args={"Metadata": {
                SHA256_METADATA: digests(file.path)[1],
                PERMISSIONS_METADATA: f"0{stat.S_IFREG | (file.mode & 0o777):o}",
            }})
            for file in files
        ]
        for future in futures:
            future.result()


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            break
        value /= 1024
    return f"{value:.1f} {unit}"
