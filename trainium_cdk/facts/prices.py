"""Pinned AWS prices for `trn cost` and the synth-time bill: a data module, read offline.

PRICES_AS_OF and SOURCES say where the figures come from. They are public on-demand list prices
(Linux, USD, no Savings Plans or Reserved Instances) as compiled by hand on that date; nothing here
calls the Price List API. A price marked ``assumed`` was not read from an AWS page for that region:
it is a copy of us-east-1's, or an estimate named in its note. Update the table and the date together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

PRICES_AS_OF = "2026-11-24"
SOURCES = (
    "https://aws.amazon.com/ec2/pricing/on-demand/",
    "https://aws.amazon.com/eks/pricing/",
    "https://aws.amazon.com/vpc/pricing/",
    "https://aws.amazon.com/privatelink/pricing/",
    "https://aws.amazon.com/fsx/lustre/pricing/",
)
HOURS_PER_MONTH = 730  # AWS pricing pages' month
# Regions whose prices the table was compiled for; any other region uses BASE_REGION's, marked assumed.
PRICED_REGIONS = ("us-east-1", "us-east-2", "us-west-2")
BASE_REGION = "us-east-1"


@dataclass(frozen=True)
class Price:
    usd: float
    assumed: bool = False
    note: str = ""


# EC2 on-demand, USD per instance-hour, the same in the three priced regions.
INSTANCE_HOURLY: Mapping[str, Price] = MappingProxyType({
    "trn1.2xlarge": Price(1.34375),
    "trn1.32xlarge": Price(21.50),
    "trn1n.32xlarge": Price(24.78),
    "trn2.48xlarge": Price(
        46.98, assumed=True, note="trn2 sells mostly as Capacity Blocks; on-demand rate is an estimate"
    ),
    "trn2u.48xlarge": Price(
        46.98, assumed=True, note="UltraServer nodes sell as Capacity Blocks; priced as trn2.48xlarge"
    ),
    "inf2.xlarge": Price(0.7582),
    "inf2.8xlarge": Price(1.9679),
    "inf2.24xlarge": Price(6.4906),
    "inf2.48xlarge": Price(12.9813),
    "t4g.nano": Price(0.0042),
    "m6i.large": Price(0.096),
    "m7i.large": Price(0.1008),
    "m7a.large": Price(0.11592),
    "m8i.large": Price(0.10584, assumed=True, note="estimate: m7i plus 5%"),
})
# General-purpose sizes scale linearly with vCPUs from .large (2 vCPUs) on EC2's price list.
SIZE_FACTOR = MappingProxyType({"large": 1, "xlarge": 2, "2xlarge": 4, "4xlarge": 8, "8xlarge": 16})

EKS_CLUSTER_HOURLY = Price(0.10, note="standard support; extended support is 0.60")
NAT_GATEWAY_HOURLY = Price(0.045, note="plus 0.045 per GB processed, not counted")
# gp3, USD per GB-month: billed while the volume exists, a stopped instance's too.
EBS_GP3_GB_MONTH = Price(0.08)
INTERFACE_ENDPOINT_HOURLY = Price(0.01, note="per endpoint per AZ; plus 0.01 per GB, not counted")
# Aurora Serverless v2 (Slurm's accounting database of a ParallelCluster cluster with teams), USD per ACU-hour.
AURORA_SERVERLESS_ACU_HOURLY = Price(
    0.12, assumed=True, note="us-east-1's rate as published compilations give it, not read from AWS's page; plus "
    "storage (0.10 per GB-month) and I/O, not counted",
)
# FSx for Lustre, USD per GB-month of provisioned capacity, by deployment type and MB/s/TiB.
LUSTRE_GB_MONTH: Mapping[tuple[str, int | None], Price] = MappingProxyType({
    ("PERSISTENT_2", 125): Price(0.145),
    ("PERSISTENT_2", 250): Price(0.210),
    ("PERSISTENT_2", 500): Price(0.340),
    ("PERSISTENT_2", 1000): Price(0.600),
    ("SCRATCH_2", None): Price(0.140),
})


def instance_price(instance_type: str) -> Price:
    """The hourly price of an instance type; a general-purpose size is its .large price scaled.

    A type the table cannot price (a config's ``custom_instance_types``, such as a Trn3 type, for which
    AWS lists no price; or a head node type outside the table) costs 0 here, marked assumed with a note
    naming it, so that a bill still adds up everything else and says what it left out."""
    if instance_type in INSTANCE_HOURLY:
        return INSTANCE_HOURLY[instance_type]
    family, _, size = instance_type.partition(".")
    base = INSTANCE_HOURLY.get(f"{family}.large")
    if base is None or size not in SIZE_FACTOR:
        return Price(0.0, assumed=True, note=f"{instance_type} has no price in trainium_cdk/facts/prices.py: not counted")
    return Price(round(base.usd * SIZE_FACTOR[size], 5), base.assumed, base.note)


def in_region(price: Price, region: str) -> Price:
    """``price`` in ``region``: as listed in a priced region, else the base region's, marked assumed."""
    if region in PRICED_REGIONS:
        return price
    note = f"{BASE_REGION} price; {region} is not in the table"
    return Price(price.usd, True, f"{price.note}; {note}" if price.note else note)
