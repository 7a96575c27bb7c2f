"""The bill of a config before its deploy: what runs while nothing trains, and each group at full size.

The idle floor is what the stacks keep running with no job: the EKS control plane and system nodes,
NAT gateways, interface endpoints, the FSx file system at its capacity and throughput, the Slurm head
node and the development instance. Trainium compute is not in it: every backend starts its compute
groups at zero nodes (Karpenter NodePools, node groups at min 0, Batch minvCpus 0, Slurm MinCount 0).
Prices come from :mod:`trainium_cdk.facts.prices`; the synth path and `trn cost` print the same table. A
capacity-block group is priced at the on-demand rate too, unless the caller read its block's fee from EC2
(`trn cost --blocks`: :class:`BlockRate`), which is then used and said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainium_cdk.app import backends as backend_registry
from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.facts import prices
from trainium_cdk.facts.names import ACCESS_HOST_INSTANCE_TYPE, ACCESS_HOST_ROOT_VOLUME_GIB, SYSTEM_NODE_DISK_GIB
from trainium_cdk.facts.storage_sizing import checkpoint_note

# Where the app writes the bill beside the templates (cdk.out/), for `make synth` to print.
BILL_FILE = "bill.txt"

# The interface endpoints network.INTERFACE_ENDPOINTS creates (a test holds the two together): named
# here so that `trn cost` does not load aws_cdk.
INTERFACE_ENDPOINT_SERVICES = ("ecr.api", "ecr.dkr", "sts", "logs", "ssm", "ssmmessages", "ec2messages")
INTERFACE_ENDPOINT_COUNT = len(INTERFACE_ENDPOINT_SERVICES)


@dataclass(frozen=True)
class Line:
    item: str
    quantity: float
    unit: str
    hourly: float  # USD per hour for the whole line
    assumed: bool
    note: str = ""
    block_fee: bool = False  # priced at a Capacity Block's fee as EC2 told it, not the price table's rate

    @property
    def monthly(self) -> float:
        return self.hourly * prices.HOURS_PER_MONTH


@dataclass(frozen=True)
class Bill:
    region: str
    idle: tuple[Line, ...]
    groups: tuple[Line, ...]

    @property
    def idle_hourly(self) -> float:
        return sum(line.hourly for line in self.idle)

    @property
    def idle_monthly(self) -> float:
        return self.idle_hourly * prices.HOURS_PER_MONTH


@dataclass(frozen=True)
class BlockRate:
    """A capacity-block group's price as EC2 told it (`trn cost --blocks` reads it): USD per node-hour, or None where
    EC2 tells no fee (the group stays at the on-demand rate); ``said`` is the line saying which."""

    usd_per_node_hour: float | None
    said: str


def _line(item: str, quantity: float, unit: str, price: prices.Price, region: str, note: str = "") -> Line:
    price = prices.in_region(price, region)
    notes = "; ".join(n for n in (note, price.note) if n)
    return Line(item, quantity, unit, price.usd * quantity, price.assumed, notes)


def bill(config: Config, region: str | None = None, *, block_rates: Mapping[str, BlockRate] | None = None) -> Bill:
    """The idle floor and full-size group prices of ``config`` in ``region`` (default: the config's); a
    capacity-block group named in ``block_rates`` at its block's fee where EC2 told one."""
    region = region or config.region
    azs = len(config.vpc_az_ids)
    idle = [
        _line("NAT gateways", 1 if config.network.nat_gateways == "one" else azs, "gateway", prices.NAT_GATEWAY_HOURLY,
              region),
    ]
    if config.network.interface_endpoints:
        idle.append(_line(f"interface endpoints ({INTERFACE_ENDPOINT_COUNT} services x {azs} AZs)",
                          INTERFACE_ENDPOINT_COUNT * azs, "endpoint-AZ", prices.INTERFACE_ENDPOINT_HOURLY, region))
    storage = config.storage
    if storage.enabled:
        throughput = f", {storage.throughput_mb_per_tib} MB/s/TiB" if storage.throughput_mb_per_tib else ""
        hourly = _hourly(prices.LUSTRE_GB_MONTH[(storage.deployment_type, storage.throughput_mb_per_tib)])
        idle.append(_line(f"FSx for Lustre {storage.deployment_type} {storage.capacity_gib} GiB{throughput}",
                          storage.capacity_gib, "GB", hourly, region,
                          "; ".join(filter(None, ["billed per GB-month", checkpoint_note(
                              storage.capacity_gib, storage.throughput_mb_per_tib)]))))
    for backend in backend_registry.deployed(config):
        idle += backend.idle_lines(config, region)
    groups = [_group_line(group, region, (block_rates or {}).get(group.name)) for group in config.compute_groups]
    return Bill(region, tuple(idle), tuple(groups))


def _group_line(group: ComputeGroup, region: str, rate: BlockRate | None) -> Line:
    item = f"compute group {group.name}: {group.maximum} x {group.instance_type}"
    kind = group.capacity.type
    if kind == "capacity-block" and rate is not None and rate.usd_per_node_hour is not None:
        # EC2's own fee for this block: neither the table's nor assumed, whatever the region.
        return Line(item, group.maximum, "node", rate.usd_per_node_hour * group.maximum, False, rate.said, True)
    if kind == "capacity-block" and rate is not None:
        note = rate.said
    elif kind == "capacity-block":
        note = "capacity-block: paid up front for the block, shown at the on-demand rate (`trn cost --blocks` reads " \
               "what EC2 tells of its fee)"
    elif kind == "reservation":
        note = "reservation: billed by the reservation, shown at the on-demand rate"
    else:
        note = ""
    return _line(item, group.maximum, "node", prices.instance_price(group.instance_type), region, note)


def _hourly(per_gb_month: prices.Price) -> prices.Price:
    """A price per GB-month as a price per GB-hour (the bill's lines are hourly)."""
    return prices.Price(per_gb_month.usd / prices.HOURS_PER_MONTH, per_gb_month.assumed, per_gb_month.note)


def _volumes(item: str, count: int, gib: int, region: str, note: str = "") -> Line:
    """``count`` gp3 volumes of ``gib`` each, billed per GB-month while they exist."""
    return _line(f"{item} ({count} x {gib} GiB gp3)", count * gib, "GB", _hourly(prices.EBS_GP3_GB_MONTH), region, note)


def eks_idle(config: Config, region: str) -> list[Line]:
    lines = [
        _line("EKS control plane", 1, "cluster", prices.EKS_CLUSTER_HOURLY, region),
        _line(f"EKS system nodes ({config.eks.system_instance_type})", config.eks.system_nodes, "node",
              prices.instance_price(config.eks.system_instance_type), region),
        _volumes("EKS system node volumes", config.eks.system_nodes, SYSTEM_NODE_DISK_GIB, region),
    ]
    if config.eks.access_host_deployed:
        lines.append(_line(f"EKS API access host ({ACCESS_HOST_INSTANCE_TYPE})", 1, "instance",
                           prices.instance_price(ACCESS_HOST_INSTANCE_TYPE), region))
        lines.append(_volumes("EKS API access host volume", 1, ACCESS_HOST_ROOT_VOLUME_GIB, region))
    return lines


def parallelcluster_idle(config: Config, region: str) -> list[Line]:
    from trainium_cdk.parallelcluster.accounting import DATABASE_MIN_CAPACITY_ACU

    settings = config.parallelcluster
    head = settings.head_node_instance_type
    lines = [
        _line(f"Slurm head node ({head})", 1, "node", prices.instance_price(head), region),
        _volumes("Slurm head node root volume", 1, settings.head_node_root_volume_gib, region),
    ]
    if config.teams:  # Slurm's accounting: its database at its least capacity, which slurmdbd's connection keeps up
        acus = DATABASE_MIN_CAPACITY_ACU
        lines.append(_line(f"Slurm accounting database (Aurora Serverless v2, {acus} ACU)", acus, "ACU",
                           prices.AURORA_SERVERLESS_ACU_HOURLY, region))
    return lines


def instance_idle(config: Config, region: str) -> list[Line]:
    dev = config.instance.instance_type
    return [
        _line(f"development instance ({dev})", 1, "instance", prices.instance_price(dev), region,
              "runs until you stop it"),
        _volumes("development instance root volume", 1, config.instance.root_volume_gib, region,
                 "billed while the instance is stopped too"),
    ]


def render(result: Bill) -> str:
    """The bill as text: one line per item, the idle total, the groups, and what is assumed."""
    rows = [f"Cost estimate, {result.region}, on-demand list prices of {prices.PRICES_AS_OF} (trainium_cdk/facts/prices.py)"]
    width = max(len(line.item) for line in (*result.idle, *result.groups)) + 2

    def row(line: Line) -> str:
        mark = " *" if line.assumed else ""
        return f"  {line.item:<{width}} ${line.hourly:>10,.3f}/h  ${line.monthly:>12,.2f}/month{mark}"

    def group_row(line: Line) -> str:
        mark = " *" if line.assumed else " (block fee)" if line.block_fee else ""
        return f"  {line.item:<{width}} ${line.hourly:>10,.3f}/h  (${line.hourly / line.quantity:,.3f} per node-hour){mark}"

    rows.append("Idle floor (nothing training; no Trainium node runs):")
    rows += [row(line) for line in result.idle]
    rows.append(f"  {'total idle floor':<{width}} ${result.idle_hourly:>10,.3f}/h  ${result.idle_monthly:>12,.2f}/month")
    rows.append("Each compute group at full size (max_nodes), while it runs:")
    rows += [group_row(line) for line in result.groups]
    notes = [f"  {line.item}: {line.note}" for line in (*result.idle, *result.groups) if line.note]
    if notes:
        rows.append("Notes:")
        rows += notes
    assumed = [line.item for line in (*result.idle, *result.groups) if line.assumed]
    rows.append("* assumed price (see notes): " + ", ".join(assumed) if assumed else
                "No price in the table is marked assumed for this region and config.")
    rows.append("Not counted: data transfer and NAT/endpoint data processing, running Trainium nodes' volumes, "
                "FSx backups, CloudWatch Logs, "
                "ECR storage, KMS keys, S3.")
    return "\n".join(rows)
