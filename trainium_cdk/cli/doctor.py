"""`trn doctor`: what would stop a deploy, checked against the account before `make deploy`.

Each check prints PASS, WARN or FAIL and, unless it passed, what to do. Exit code 1 when any check
FAILs. A check whose API call is denied becomes a WARN naming the IAM action: doctor should run with
read-only permissions. Any other API error a check meets is that check's FAIL line (WARN where the check is
advisory), naming the API and the error code (doctor_errors.py): every check runs.

On a Trainium node (or the development instance), doctor also compares the Neuron software the machine
has with the pins of the configured track (versions.py): driver, runtime and collectives packages, and
torch-neuronx and torch in the active Python; a disagreement is a WARN. Elsewhere (no ``neuron-ls``)
that check is one SKIP line, not counted in the summary.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import (
    BAD_CREDENTIAL_CODES,
    ON_DEMAND_QUOTAS,
    client,
    error_code,
    error_message,
    is_denied,
    natural_az_key,
    parse_overrides,
    read_config,
    session,
)
from trainium_cdk.cli._errors import CREDENTIALS_HINT
from trainium_cdk.cli.doctor_amis import amis
from trainium_cdk.cli.doctor_capacity import capacity
from trainium_cdk.cli.doctor_deploy import addons, eks_nodes_ami, kubernetes, write_record
from trainium_cdk.cli.doctor_errors import is_api_error, unexpected
from trainium_cdk.cli.doctor_images import images
from trainium_cdk.cli.doctor_local import (
    FAIL,
    PASS,
    WARN,
    Check,
    CommandRunner,
    container_engine,
    neuron_versions,
    run_command,
    session_manager_plugin,
)

DEFAULT_BOOTSTRAP_QUALIFIER = "hnb659fds"
# Synthesized templates refuse bootstrap versions 1-5 (the CheckBootstrapVersion rule).
MIN_BOOTSTRAP_VERSION = 6
TOOLKIT_STACK = "CDKToolkit"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="preflight before a deploy: credentials, AZ offerings, vCPU quota, reservations, CDK bootstrap, AMIs, "
        "container engine",
        description="Check the account against the config before `make deploy`. Exit code 1 when a check FAILs.",
    )
    p.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
    p.add_argument(
        "-c", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
        help="override like `cdk synth -c`: region, backends, instance_type, nodes (repeatable)",
    )
    p.add_argument(
        "--preflight", action="store_true",
        help="what `make deploy` runs first: the account and region checks, and the container engine when the deploy "
        "builds images; records the version EKS installs of each add-on without a pin (.trn-preflight.json, for "
        "`make pins`)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = read_config(args.config, parse_overrides(args.overrides))
    preflight = getattr(args, "preflight", False)
    doctor = Doctor(config, session(config.region), preflight=preflight)
    out.write(f"trn doctor{' --preflight' if preflight else ''}: project {config.project} in {config.region}\n")
    checks = doctor.run(lambda check: _print(check, out))
    if preflight:
        write_record(config, doctor.record, doctor.now())
    counts = {s: sum(c.status == s for c in checks) for s in (FAIL, WARN, PASS)}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    if counts[FAIL]:
        tail = ("`make deploy` stops here; PREFLIGHT=warn deploys anyway" if preflight
                else "fix every FAIL before `make deploy`")
        out.write(f"{summary}: {tail}\n")
        return 1
    out.write(f"{summary}: ready to deploy" + (" (read the WARN lines)" if counts[WARN] else "") + "\n")
    return 0


def _print(check: Check, out: TextIO) -> None:
    out.write(f"{check.status}  {check.name:<22} {check.detail}\n")
    if check.fix and check.status != PASS:
        out.write(f"      -> {check.fix}\n")
    out.flush()


class Doctor:
    """The checks, in the order a deploy would trip over them."""

    def __init__(
        self, config: Config, sess: Any, *, now: Callable[[], dt.datetime] | None = None,
        runner: CommandRunner | None = None, preflight: bool = False,
    ) -> None:
        self.config = config
        self.session = sess
        self.preflight = preflight
        self.record: dict[str, str] = {}  # add-on -> the version EKS installs where the pins leave it to EKS
        self.account: str | None = None
        self.caller = ""
        self.now = now or (lambda: dt.datetime.now(dt.UTC))
        self._run = runner or run_command
        self._clients: dict[str, Any] = {}
        self.no_credentials = False  # set by credentials(): the checks that call AWS are skipped

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = client(self.session, service)
        return self._clients[service]

    def run(self, report: Callable[[Check], None]) -> list[Check]:
        checks: list[Check] = []

        def emit(items: list[Check]) -> None:
            for item in items:
                checks.append(item)
                report(item)

        emit([self.credentials()])
        if self.no_credentials:
            emit([Check(WARN, "other checks", "skipped: they need working credentials", "fix the credentials first")])
        else:
            # Advisory: an unknown quota, or reservations listed for an on-demand group, stop no deploy.
            reserved = any(g.capacity.reserved for g in self.config.compute_groups)
            for name, action, check, advisory in (
                ("availability zones", "ec2:DescribeAvailabilityZones", self.availability_zones, False),
                ("instance offerings", "ec2:DescribeInstanceTypeOfferings", self.offerings, False),
                ("vCPU quota", "servicequotas:GetServiceQuota and ListServiceQuotas", self.quotas, True),
                ("capacity", "ec2:DescribeCapacityReservations", self.capacity, not reserved),
                ("CDK bootstrap", "ssm:GetParameter", self.bootstrap, False),
                ("AMI", "ssm:GetParameter and ec2:DescribeImages", self.amis, False),
                ("AMI eks", "ssm:GetParameter", lambda: eks_nodes_ami(self.config, self.client), False),
                ("kubernetes", "eks:DescribeClusterVersions", lambda: kubernetes(self.config, self.client), False),
                ("add-ons", "eks:DescribeAddonVersions",
                 lambda: addons(self.config, self.client, self.record), False),
                ("images", "ecr:BatchGetImage", self.images, False),
            ):
                emit(self._guard(name, action, check, advisory=advisory))
            emit(self.cluster_access())
        # Local: need no credentials (a compute node often has none of the deployer's). The preflight asks only what
        # the deploy needs of this machine.
        emit(container_engine(self.config, self._run))
        if not self.preflight:
            emit(session_manager_plugin(self.config, self._run))
            emit(neuron_versions(self.config.neuron_track, self._run))
        return checks

    @staticmethod
    def _guard(name: str, action: str, check: Callable[[], list[Check]], *, advisory: bool) -> list[Check]:
        try:
            return check()
        except Exception as error:  # noqa: BLE001 - an API error is this check's line; anything else is a bug
            if not is_api_error(error):
                raise
            return [unexpected(name, action, error, advisory=advisory)]

    # -- checks ------------------------------------------------------------------------------------

    def credentials(self) -> Check:
        from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

        try:
            identity = self.client("sts").get_caller_identity()
        except (NoCredentialsError, PartialCredentialsError) as error:
            self.no_credentials = True
            return Check(FAIL, "credentials", f"no AWS credentials ({error})", CREDENTIALS_HINT)
        except ClientError as error:
            if error_code(error) not in BAD_CREDENTIAL_CODES and not is_denied(error):
                return unexpected("credentials", "sts:GetCallerIdentity", error)  # the other checks may still work
            self.no_credentials = True
            detail = f"rejected: {error_code(error)}: {error_message(error)}"
            return Check(FAIL, "credentials", detail, CREDENTIALS_HINT)
        except Exception as error:  # noqa: BLE001 - no answer at all (network, SSO token): nothing else can run
            if not is_api_error(error):
                raise
            self.no_credentials = True
            return unexpected("credentials", "sts:GetCallerIdentity", error)
        self.account = identity["Account"]
        self.caller = identity["Arn"]
        return Check(PASS, "credentials", f"account {identity['Account']} as {identity['Arn']}")

    def cluster_access(self) -> list[Check]:
        """EKS: the caller's role is among eks.admin_role_arns (the cluster's only admins besides CDK's kubectl provider)."""
        from trainium_cdk.cli.connect import caller_role_among

        if "eks" not in self.config.backends:
            return []
        principal, name, listed = caller_role_among(self.caller, self.config.eks.admin_role_arns)
        if listed:
            return [Check(PASS, "cluster access", f"{name} is in eks.admin_role_arns")]
        return [Check(
            WARN, "cluster access", f"{principal} is not in eks.admin_role_arns: kubectl and `trn submit` on EKS would "
            "be refused", f"add the ARN `aws iam get-role --role-name {name} --query Role.Arn` prints to "
            "eks.admin_role_arns in the config, then `make synth`",
        )]

    def availability_zones(self) -> list[Check]:
        zones = self.client("ec2").describe_availability_zones()["AvailabilityZones"]
        by_id = {z["ZoneId"]: z for z in zones}
        group_az_ids = (a for g in self.config.compute_groups for a in g.az_ids)
        wanted = list(dict.fromkeys([*self.config.vpc_az_ids, *group_az_ids]))
        missing = [a for a in wanted if a not in by_id]
        if missing:
            known = ", ".join(sorted(by_id, key=natural_az_key))
            return [Check(
                FAIL, "availability zones", f"{', '.join(missing)} not in {self.config.region} for this account",
                f"use AZ IDs of this region in network.az_ids and compute_groups[].az_ids: {known}",
            )]
        down = [a for a in wanted if by_id[a].get("State", "available") != "available"]
        names = ", ".join(f"{a}={by_id[a]['ZoneName']}" for a in wanted)
        if down:
            return [Check(WARN, "availability zones", f"not available now: {', '.join(down)} ({names})",
                          "check the AWS Health Dashboard before deploying")]
        return [Check(PASS, "availability zones", names)]

    def offerings(self) -> list[Check]:
        ec2 = self.client("ec2")
        checks = []
        offered_by_type: dict[str, list[str]] = {}
        placed = [(g.name, g.instance_type, g.az_ids, f"compute_groups[{g.name}].az_ids") for g in self.config.compute_groups]
        if "instance" in self.config.backends:
            placed.append(("instance", self.config.instance.instance_type, (self.config.dev_instance_az_id(),),
                           "instance.az_id"))
        for unit, itype, az_ids, field in placed:
            if itype not in offered_by_type:
                ids: set[str] = set()
                pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
                    LocationType="availability-zone-id", Filters=[{"Name": "instance-type", "Values": [itype]}]
                )
                for page in pages:
                    offerings = page.get("InstanceTypeOfferings", [])
                    ids |= {o["Location"] for o in offerings if o.get("InstanceType") == itype}
                offered_by_type[itype] = sorted(ids, key=natural_az_key)
            offered = offered_by_type[itype]
            name = f"offering {unit}"
            missing = [a for a in az_ids if a not in offered]
            refresh = f"`trn azs --instance-type {itype} --region {self.config.region} --write`"
            if not offered:
                checks.append(Check(
                    FAIL, name, f"{itype} is not offered in any AZ of {self.config.region}",
                    f"pick a region that offers it, then run {refresh} there",
                ))
            elif missing:
                checks.append(Check(
                    FAIL, name, f"{itype} is not offered in {', '.join(missing)}",
                    f"set {field} to one of {', '.join(offered)} (see {refresh})",
                ))
            else:
                checks.append(Check(PASS, name, f"{itype} is offered in {', '.join(az_ids)}"))
        return checks

    def _launched(self) -> list[tuple[str, Any, int, int]]:
        """(name, spec, nodes at deploy, nodes at most) of what the deploy launches: every compute group and, with
        the instance backend, the development instance (launched by the deploy itself: a quota of 0 rolls its
        stack back)."""
        grouped = set(self.config.backends) - {"instance"}  # the backends whose nodes are the compute groups
        launched = [(g.name, self.config.spec(g), g.nodes, g.maximum) for g in self.config.compute_groups if grouped]
        if "instance" in self.config.backends:
            spec = self.config.catalog.get(self.config.instance.instance_type)
            launched.append(("instance", spec, 1, 1))
        return launched

    def quotas(self) -> list[Check]:
        needs: dict[str, dict[str, Any]] = {}
        checks = []
        for unit, spec, nodes, maximum in self._launched():
            quota = _quota_for(spec.family)
            if quota is None:
                checks.append(Check(WARN, f"quota {unit}", f"no known On-Demand quota for family {spec.family}",
                                    "check the EC2 vCPU quota of this family in the Service Quotas console"))
                continue
            need = needs.setdefault(quota[0], {"name": quota[1], "nodes": 0, "max": 0, "groups": []})
            need["nodes"] += nodes * spec.vcpus
            need["max"] += maximum * spec.vcpus
            need["groups"].append(f"{unit}: {nodes}-{maximum} x {spec.name} ({spec.vcpus} vCPUs)")
        for code, need in needs.items():
            checks.append(self._quota_check(code, need))
        return checks

    def _quota_check(self, code: str, need: dict[str, Any]) -> Check:
        name = f"quota {code}"
        value, source = self._quota_value(code, need["name"])
        asked = f"{need['nodes']} vCPUs for {'; '.join(need['groups'])}"
        increase = (
            f"request at least {need['max']} vCPUs: aws service-quotas request-service-quota-increase "
            f"--service-code ec2 --quota-code {code} --desired-value {need['max']} --region {self.config.region}"
        )
        if value is None:
            return Check(WARN, name, f"could not read '{need['name']}' (needs {asked})", increase)
        label = f"'{need['name']}' is {value:g} vCPUs ({source})"
        if value < need["nodes"]:
            return Check(FAIL, name, f"{label}, below the {asked}", increase)
        if value < need["max"]:
            return Check(WARN, name, f"{label}: enough for nodes ({need['nodes']}), not for max_nodes ({need['max']})",
                         increase)
        in_use = self._vcpus_in_use(code)
        if in_use and value - in_use < need["max"]:
            return Check(
                WARN, name, f"{label}, but {in_use} vCPUs of it are in use by running instances "
                f"({value - in_use:g} left for {need['nodes']}-{need['max']} vCPUs)",
                "if those are not this cluster's nodes, stop them or raise the quota: " + increase,
            )
        return Check(PASS, name, f"{label} >= {need['max']} vCPUs asked at most")

    def _quota_value(self, code: str, name: str) -> tuple[float | None, str]:
        from botocore.exceptions import ClientError

        sq = self.client("service-quotas")
        try:
            return float(sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), "applied"
        except ClientError as error:
            if error_code(error) not in ("NoSuchResourceException", "ResourceNotFoundException"):
                raise
        # Quota codes have changed before: fall back to the quota's name.
        try:
            for page in sq.get_paginator("list_service_quotas").paginate(ServiceCode="ec2"):
                for quota in page.get("Quotas", []):
                    if quota.get("QuotaName", "").lower().startswith(name.lower()) and "Value" in quota:
                        return float(quota["Value"]), f"{quota.get('QuotaCode', '?')} by name"
        except ClientError as error:
            if error_code(error) not in ("NoSuchResourceException", "ResourceNotFoundException"):
                raise
        try:
            default = sq.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)
            return float(default["Quota"]["Value"]), "AWS default"
        except ClientError as error:
            if error_code(error) not in ("NoSuchResourceException", "ResourceNotFoundException"):
                raise
        return None, "unknown"

    def _vcpus_in_use(self, code: str) -> int:
        """vCPUs of running instances of the families that share quota ``code``."""
        from botocore.exceptions import ClientError

        families = [prefix for prefix, (c, _) in ON_DEMAND_QUOTAS.items() if c == code]
        try:
            pages = self.client("ec2").get_paginator("describe_instances").paginate(Filters=[
                {"Name": "instance-type", "Values": [f"{f}*" for f in families]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ])
            total = 0
            for page in pages:
                for reservation in page.get("Reservations", []):
                    for instance in reservation.get("Instances", []):
                        total += self._vcpus_of(instance)
            return total
        except ClientError as error:
            if is_denied(error):
                return 0
            raise

    def _vcpus_of(self, instance: dict[str, Any]) -> int:
        itype = instance.get("InstanceType", "")
        if itype in self.config.catalog:
            return self.config.catalog.get(itype).vcpus
        cpu = instance.get("CpuOptions") or {}
        return int(cpu.get("CoreCount", 0)) * int(cpu.get("ThreadsPerCore", 1))

    def capacity(self) -> list[Check]:
        return capacity(self.config, self.client, self.now())

    def bootstrap(self) -> list[Check]:
        from botocore.exceptions import ClientError

        qualifier = bootstrap_qualifier()
        parameter = f"/cdk-bootstrap/{qualifier}/version"
        target = f"aws://{self.account or 'ACCOUNT'}/{self.config.region}"
        fix = f"run `make bootstrap` in the project directory (the project's CDK CLI: cdk bootstrap {target})"
        try:
            value = self.client("ssm").get_parameter(Name=parameter)["Parameter"]["Value"]
        except ClientError as error:
            if error_code(error) != "ParameterNotFound" and not is_denied(error):
                raise
            return [self._toolkit_stack(parameter, fix, denied=is_denied(error))]
        try:
            version = int(value)
        except ValueError:
            return [Check(WARN, "CDK bootstrap", f"{parameter} = {value!r} is not a version number", fix)]
        if version < MIN_BOOTSTRAP_VERSION:
            detail = f"version {version} is too old (need >= {MIN_BOOTSTRAP_VERSION})"
            return [Check(FAIL, "CDK bootstrap", detail, fix)]
        return [Check(PASS, "CDK bootstrap", f"version {version} ({parameter})")]

    def _toolkit_stack(self, parameter: str, fix: str, *, denied: bool) -> Check:
        from botocore.exceptions import ClientError

        try:
            stacks = self.client("cloudformation").describe_stacks(StackName=TOOLKIT_STACK)["Stacks"]
        except ClientError as error:
            if error_code(error) == "ValidationError":
                return Check(FAIL, "CDK bootstrap", f"{self.config.region} is not bootstrapped "
                             f"(no {parameter}, no {TOOLKIT_STACK} stack)", fix)
            raise
        status = stacks[0].get("StackStatus", "?") if stacks else "?"
        if denied:
            return Check(WARN, "CDK bootstrap", f"{TOOLKIT_STACK} stack is {status}; reading {parameter} was denied",
                         "allow ssm:GetParameter on /cdk-bootstrap/* to check its version")
        return Check(WARN, "CDK bootstrap", f"{TOOLKIT_STACK} stack is {status} but {parameter} is missing",
                     "a custom qualifier? set @aws-cdk/core:bootstrapQualifier in cdk.json, or " + fix)

    def amis(self) -> list[Check]:
        """The AMI each deployed backend that picks one will boot, found in the region as the deploy will."""
        return amis(self.config, self.client)

    def images(self) -> list[Check]:
        """Every image in a private ECR registry the deploy pulls exists (doctor_images.py)."""
        return images(self.config, lambda region: self.session.client("ecr", region_name=region))


def _quota_for(family: str) -> tuple[str, str] | None:
    for prefix, quota in ON_DEMAND_QUOTAS.items():
        if family.startswith(prefix):
            return quota
    return None


def bootstrap_qualifier(cdk_json: Path = Path("cdk.json")) -> str:
    """The bootstrap qualifier of cdk.json in the working directory, else CDK's default."""
    try:
        context = json.loads(cdk_json.read_text()).get("context", {})
    except (OSError, ValueError, AttributeError):
        return DEFAULT_BOOTSTRAP_QUALIFIER
    return str(context.get("@aws-cdk/core:bootstrapQualifier") or DEFAULT_BOOTSTRAP_QUALIFIER)
