"""Kubernetes' IP and CIDR CEL libraries (k8s.io/apiserver/pkg/cel/library/ip.go, cidr.go).

Enabled for every CEL environment from Kubernetes 1.30 (environment/base.go).
`ip(s)`, `isIP(s)`, `ip.isCanonical(s)` and the `net.IP` methods `family`,
`isUnspecified`, `isLoopback`, `isLinkLocalMulticast`, `isLinkLocalUnicast`,
`isGlobalUnicast`; `cidr(s)`, `isCIDR(s)` and the `net.CIDR` methods
`containsIP` (an IP or a string), `containsCIDR` (a CIDR or a string), `ip`,
`masked`, `prefixLength`; `string()` of both. Parsing is Go's `netip`
(`netaddr.py`) plus Kubernetes' rules: no zone, no IPv4-mapped IPv6 address.
Error texts and costs are upstream's (`library/cost.go`): parsing is one
string traversal, `ip.isCanonical` two, accessors 1, `containsIP` and
`containsCIDR` a traversal of the CIDR's prefix bytes (and of a string
argument they parse).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.gostrings import go_quote
from dra_driver.scheduling.cel.netaddr import Addr, AddrError, Prefix, parse_addr, parse_prefix
from dra_driver.scheduling.cel.types import BOOL, CIDR, INT, IP, STRING
from dra_driver.scheduling.cel.values import register_kind

register_kind(Addr, "net.IP")
register_kind(Prefix, "net.CIDR")

_CIDR_ERROR = "network address parse error during conversion from string: "


def parse_ip(text: str) -> Addr:
    """Kubernetes' `parseIPAddr`: netip's syntax, no zone, no IPv4-mapped IPv6."""
    try:
        addr = parse_addr(text)
    except AddrError as exc:
        raise FunctionError(
            f"IP Address {go_quote(text)} parse error during conversion from string: {exc}"
        ) from None
    if addr.zone:
        raise FunctionError(f"IP address {go_quote(text)} with zone value is not allowed")
    if addr.is4in6:
        raise FunctionError(f"IPv4-mapped IPv6 address {go_quote(text)} is not allowed")
    return addr


def parse_cidr(text: str) -> Prefix:
    """Kubernetes' `parseCIDR` as `cidr()` reports it (the prefix is doubled, as upstream's)."""
    try:
        prefix = parse_prefix(text)
    except AddrError as exc:
        raise FunctionError(f"{_CIDR_ERROR}{_CIDR_ERROR}{exc}") from None
    if prefix.addr.is4in6:
        raise FunctionError(
            f"{_CIDR_ERROR}IPv4-mapped IPv6 address {go_quote(text)} is not allowed"
        )
    return prefix


def _is_ip(text: str) -> bool:
    try:
        parse_ip(text)
    except FunctionError:
        return False
    return True


def _is_cidr(text: str) -> bool:
    try:
        parse_cidr(text)
    except FunctionError:
        return False
    return True


def _is_canonical(text: str) -> bool:
    return str(parse_ip(text)) == text


def _family(ip: Addr) -> int:
    return 4 if ip.is4 else 6


def _contains_ip(cidr: Prefix, ip: Addr) -> bool:
    return cidr.contains(ip)


def _contains_ip_string(cidr: Prefix, text: str) -> bool:
    try:
        ip = parse_ip(text)
    except FunctionError:
        # Upstream passes the parse error on as an argument and then reports the
        # CIDR as having no such overload, dropping the parse message.
        raise FunctionError("no such overload") from None
    return cidr.contains(ip)


def _contains_cidr(cidr: Prefix, other: Prefix) -> bool:
    return cidr.overlaps(other) and cidr.length <= other.length


def _contains_cidr_string(cidr: Prefix, text: str) -> bool:
    return _contains_cidr(cidr, parse_cidr(text))


def _cidr_ip(cidr: Prefix) -> Addr:
    return cidr.addr


def _masked(cidr: Prefix) -> Prefix:
    return cidr.masked()


def _prefix_length(cidr: Prefix) -> int:
    return cidr.length


def _to_string(value: Addr | Prefix) -> str:
    return str(value)


# -- costs (library/cost.go) ------------------------------------------------------------


def _size(value: Any) -> int:
    """Kubernetes' `actualSize`: an IP's bytes, a CIDR's prefix bytes, a string's length."""
    if isinstance(value, Addr):
        return math.ceil(value.bit_len / 8)
    if isinstance(value, Prefix):
        return math.ceil(value.length / 8)
    return costs.size_of(value)


def _traverse(args: Sequence[Any], _result: Any) -> int:
    return costs.traversal(costs.size_of(args[0]))


def _traverse_twice(args: Sequence[Any], _result: Any) -> int:
    return costs.traversal(2 * costs.size_of(args[0]))


def _contains_ip_cost(args: Sequence[Any], _result: Any) -> int:
    cost = costs.traversal(2 * _size(args[0]))
    if isinstance(args[1], str):
        cost += costs.traversal(_size(args[1]))
    return cost


def _contains_cidr_cost(args: Sequence[Any], _result: Any) -> int:
    cidr_size = _size(args[0])
    cost = costs.traversal(2 * cidr_size) + costs.traversal(cidr_size) + 1
    if isinstance(args[1], str):
        cost += costs.traversal(_size(args[1]))
    return cost


register(
    "ip",
    glob("string_to_ip", (STRING,), IP, parse_ip, _traverse),
    member("cidr_ip", (CIDR,), IP, _cidr_ip),
)
register("isIP", glob("is_ip", (STRING,), BOOL, _is_ip, _traverse))
register("ip.isCanonical", glob("ip_is_canonical", (STRING,), BOOL, _is_canonical, _traverse_twice))
register("family", member("ip_family", (IP,), INT, _family))
register("isUnspecified", member("ip_is_unspecified", (IP,), BOOL, Addr.is_unspecified))
register("isLoopback", member("ip_is_loopback", (IP,), BOOL, Addr.is_loopback))
register(
    "isLinkLocalMulticast",
    member("ip_is_link_local_multicast", (IP,), BOOL, Addr.is_link_local_multicast),
)
register(
    "isLinkLocalUnicast",
    member("ip_is_link_local_unicast", (IP,), BOOL, Addr.is_link_local_unicast),
)
register("isGlobalUnicast", member("ip_is_global_unicast", (IP,), BOOL, Addr.is_global_unicast))
register("cidr", glob("string_to_cidr", (STRING,), CIDR, parse_cidr, _traverse))
register("isCIDR", glob("is_cidr", (STRING,), BOOL, _is_cidr, _traverse))
register(
    "containsIP",
    member("cidr_contains_ip_string", (CIDR, STRING), BOOL, _contains_ip_string, _contains_ip_cost),
    member("cidr_contains_ip_ip", (CIDR, IP), BOOL, _contains_ip, _contains_ip_cost),
)
register(
    "containsCIDR",
    member(
        "cidr_contains_cidr_string",
        (CIDR, STRING),
        BOOL,
        _contains_cidr_string,
        _contains_cidr_cost,
    ),
    member("cidr_contains_cidr", (CIDR, CIDR), BOOL, _contains_cidr, _contains_cidr_cost),
)
register("masked", member("cidr_masked", (CIDR,), CIDR, _masked))
register("prefixLength", member("cidr_prefix_length", (CIDR,), INT, _prefix_length))
register(
    "string",
    glob("ip_to_string", (IP,), STRING, _to_string),
    glob("cidr_to_string", (CIDR,), STRING, _to_string),
)
