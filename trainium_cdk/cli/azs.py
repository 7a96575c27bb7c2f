"""`trn azs`: which Availability Zones of a region offer an instance type, by name and by AZ ID.

AZ names (us-west-2a) are shuffled per account; AZ IDs (usw2-az4) are not, so the config speaks AZ
IDs. ``--write`` records them under ``instance_offerings`` so that synth never has to ask AWS.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from trainium_cdk.app.config import BUILTIN_DEFAULTS, az_id_prefix, load_config
from trainium_cdk.cli import yaml_edit
from trainium_cdk.cli._common import (
    NO_CONFIG,
    CliError,
    client,
    find_config_path,
    natural_az_key,
    session,
    synth_context,
    table,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import DEFAULT_CATALOG


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "azs",
        help="list the AZs (names and AZ IDs) that offer an instance type; --write records them in the config",
        description="List the Availability Zones of a region that offer an instance type. With --write, record "
        "their AZ IDs under instance_offerings in the config, so that `cdk synth` stays offline.",
    )
    p.add_argument("--instance-type", required=True, metavar="TYPE", help="EC2 instance type, e.g. trn1.32xlarge")
    p.add_argument("--region", metavar="REGION", help="AWS region (default: the config's region)")
    p.add_argument("--config", metavar="PATH", help="config YAML to read and --write (default: config/default.yaml)")
    p.add_argument("--write", action="store_true", help="record the AZ IDs under instance_offerings in the config")
    p.add_argument("--dry-run", action="store_true", help="with --write: print the change, write nothing")
    p.set_defaults(func=run)


def offered_zones(ec2: Any, instance_type: str) -> list[str]:
    """AZ names of the client's region that offer ``instance_type``."""
    names: list[str] = []
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )
    for page in pages:
        offerings = page.get("InstanceTypeOfferings", [])
        names += [o["Location"] for o in offerings if o.get("InstanceType") == instance_type]
    return sorted(set(names))


def zone_ids(ec2: Any) -> dict[str, dict[str, str]]:
    """AZ name -> {'id': AZ ID, 'type': availability-zone | local-zone | wavelength-zone}."""
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    return {z["ZoneName"]: {"id": z["ZoneId"], "type": z.get("ZoneType", "availability-zone")} for z in zones}


def _config_region(path: Path) -> str | None:
    try:
        raw = yaml_edit.load_raw(path.read_text(), path)
    except (OSError, ConfigError):
        return None
    region = raw.get("region")
    return str(region) if region else None


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    synth = synth_context(args.config)
    if args.config:
        path: Path | None = Path(args.config)
    elif synth is not None and synth.config not in (None, BUILTIN_DEFAULTS):
        path = Path(str(synth.config))
    else:
        path = find_config_path()
    if path is None and args.write:
        raise CliError(NO_CONFIG)
    region = args.region or (synth.overrides.get("region") if synth else None) or (_config_region(path) if path else None)
    if not region:
        raise ConfigError("--region", None, f"a region such as us-west-2 (none given and none in {path or 'a config'})")
    az_id_prefix(region)  # a typo in the region fails here, not as a connection error
    if args.dry_run and not args.write:
        raise CliError("--dry-run goes with --write: it prints the change to the config instead of writing it")

    ec2 = client(session(region), "ec2")
    names = offered_zones(ec2, args.instance_type)
    if not names:
        raise CliError(
            f"{args.instance_type} is not offered in any Availability Zone of {region}: check the type name "
            f"(`aws ec2 describe-instance-types --instance-types {args.instance_type}`) or try another region",
            code=1,
        )
    zones = zone_ids(ec2)
    rows = []
    az_ids: list[str] = []
    for name in sorted(names):
        zone = zones.get(name)
        if zone is None:
            rows.append((name, "?", "not enabled in this account"))
            continue
        if zone["type"] != "availability-zone":
            rows.append((name, zone["id"], zone["type"] + ": not usable by the config"))
            continue
        rows.append((name, zone["id"], ""))
        az_ids.append(zone["id"])
    az_ids.sort(key=natural_az_key)

    out.write(f"{args.instance_type} in {region}: offered in {len(names)} of {len(zones)} zones\n")
    if any(r[2] for r in rows):
        table(rows, ("AZ name", "AZ ID", "note"), out)
    else:
        table([r[:2] for r in rows], ("AZ name", "AZ ID"), out)
    if args.instance_type not in DEFAULT_CATALOG:
        out.write(
            f"note: {args.instance_type} is not in the catalog: describe it under custom_instance_types to use it\n"
        )

    if not args.write:
        return 0
    assert path is not None  # --write without a config was refused above
    if not az_ids:
        raise CliError(
            f"no regular Availability Zone of {region} offers {args.instance_type}: nothing to write", code=1
        )
    try:
        old = path.read_text()
    except FileNotFoundError:
        raise ConfigError("--config", str(path), "a YAML file that exists") from None
    new = yaml_edit.with_offerings(
        old, instance_type=args.instance_type, region=region, az_ids=az_ids, path=path
    )
    where = f"instance_offerings.{args.instance_type}.{region} = [{', '.join(az_ids)}]"
    if new == old:
        out.write(f"{path} already has {where}: nothing to write\n")
        return 0
    if args.dry_run:
        out.write(f"dry run: would set {where} in {path}:\n")
        out.write(yaml_edit.diff(old, new, path))
        return 0
    yaml_edit.write_atomic(path, new)
    out.write(f"wrote {where} to {path}\n")
    try:
        load_config(path)
    except ConfigError as problem:
        err.write(f"note: {path} does not load yet; fix it before synth: {' '.join(str(problem).split())}\n")
    return 0
