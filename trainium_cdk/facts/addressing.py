"""VPC address plans: the checks the config and `TrainingNetwork` share (no CDK, no AWS calls)."""

from __future__ import annotations

import ipaddress

from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import SUBNET_MAX_PREFIX, VPC_MIN_PREFIX

# The longest VPC prefix the project takes (AWS allows /28): room for a public and a private subnet per AZ.
MAX_VPC_PREFIX = 24


def ipv4_network(field: str, value: str, *, example: str) -> ipaddress.IPv4Network:
    """The network ``value`` names, or a ConfigError on ``field`` showing ``example``."""
    try:
        return ipaddress.IPv4Network(value)
    except ValueError as err:
        raise ConfigError(field, value, f"an IPv4 network such as {example} ({err})") from None


# The shortest prefix an ingress from outside the VPC may name (a public API endpoint, SSH): anything wider
# is the internet in all but name (0.0.0.0/1 and 128.0.0.0/1 are the whole of it).
MIN_INGRESS_PREFIX = 8


def check_ingress_cidr(field: str, value: str, *, example: str) -> ipaddress.IPv4Network:
    """An IPv4 network that outsiders may connect from: a /8 or narrower, never the internet."""
    network = ipv4_network(field, value, example=example)
    if network.prefixlen < MIN_INGRESS_PREFIX:
        raise ConfigError(
            field, value, f"a network of /{MIN_INGRESS_PREFIX} or narrower, such as {example}: a shorter prefix "
            "opens it to most of the internet (use SSM Session Manager, or name the network you connect from)"
        )
    return network


def check_vpc_cidr(cidr: str, public_subnet_mask: int, private_subnet_mask: int, *, prefix: str = "") -> None:
    """The VPC CIDR is an IPv4 network of /16 to /24 and each subnet mask fits inside it.

    ``prefix`` goes before each field name in errors (``network.`` in the config, empty for props).
    """
    net = ipv4_network(f"{prefix}cidr", cidr, example="10.0.0.0/16")
    if not VPC_MIN_PREFIX <= net.prefixlen <= MAX_VPC_PREFIX:
        raise ConfigError(
            f"{prefix}cidr", cidr, f"a prefix length between /{VPC_MIN_PREFIX} and /{MAX_VPC_PREFIX} (VPC limits)"
        )
    for name, mask in (("public_subnet_mask", public_subnet_mask), ("private_subnet_mask", private_subnet_mask)):
        if not net.prefixlen < mask <= SUBNET_MAX_PREFIX:
            raise ConfigError(
                f"{prefix}{name}", mask, f"longer than the VPC prefix /{net.prefixlen} and at most /{SUBNET_MAX_PREFIX}"
            )


def check_subnets_fit(
    cidr: str, public_subnet_mask: int, private_subnet_mask: int, az_count: int, *, prefix: str = ""
) -> None:
    """Every AZ gets one public and one private subnet: they must fit in the VPC CIDR."""
    net = ipaddress.IPv4Network(cidr)
    needed = az_count * (2 ** (32 - public_subnet_mask) + 2 ** (32 - private_subnet_mask))
    if needed > net.num_addresses:
        raise ConfigError(
            f"{prefix}cidr", cidr,
            f"too small: {az_count} AZs x (/{public_subnet_mask} public + /{private_subnet_mask} "
            f"private) need {needed} addresses, the VPC has {net.num_addresses}; use a shorter prefix or "
            "longer subnet masks",
        )
