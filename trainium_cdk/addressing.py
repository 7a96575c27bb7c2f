"""VPC address plans: the checks the config and `TrainingNetwork` share (no CDK, no AWS calls)."""

from __future__ import annotations

import ipaddress

from trainium_cdk.errors import ConfigError

# VPC limits: a VPC is /16 to /24; a subnet is at most /28.
VPC_PREFIX_RANGE = (16, 24)
MAX_SUBNET_PREFIX = 28


def check_vpc_cidr(cidr: str, public_subnet_mask: int, private_subnet_mask: int, *, prefix: str = "") -> None:
    """The VPC CIDR is an IPv4 network of /16 to /24 and each subnet mask fits inside it.

    ``prefix`` goes before each field name in errors (``network.`` in the config, empty for props).
    """
    try:
        net = ipaddress.IPv4Network(cidr)
    except ValueError as err:
        raise ConfigError(f"{prefix}cidr", cidr, f"an IPv4 network such as 10.0.0.0/16 ({err})") from None
    low, high = VPC_PREFIX_RANGE
    if not low <= net.prefixlen <= high:
        raise ConfigError(f"{prefix}cidr", cidr, f"a prefix length between /{low} and /{high} (VPC limits)")
    for name, mask in (("public_subnet_mask", public_subnet_mask), ("private_subnet_mask", private_subnet_mask)):
        if not net.prefixlen < mask <= MAX_SUBNET_PREFIX:
            raise ConfigError(
                f"{prefix}{name}", mask, f"longer than the VPC prefix /{net.prefixlen} and at most /{MAX_SUBNET_PREFIX}"
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
