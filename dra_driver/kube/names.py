"""Kubernetes name rules: DNS labels and subdomains, label keys and values, C identifiers.

Object names, namespaces, device names, driver and pool names, label keys:
the apiserver checks each against one of a few formats from apimachinery's
`pkg/util/validation`, and so do we, in one place, before we publish a
slice, accept a claim's allocation, store an object or serve a driver name.
The Python kubernetes client ships no such validators, so they are written
here, regexes copied from apimachinery.
"""

from __future__ import annotations

import re
from typing import Final

DNS_LABEL_MAX_LENGTH: Final = 63
DNS_SUBDOMAIN_MAX_LENGTH: Final = 253
LABEL_MAX_LENGTH: Final = 63

_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE: Final = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE: Final = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_C_IDENTIFIER_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_NAME_RE: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE_RE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def is_dns_label(name: str) -> bool:
    """RFC 1123 label (`IsDNS1123Label`): namespaces, device names, request names."""
    return len(name) <= DNS_LABEL_MAX_LENGTH and _DNS_LABEL_RE.fullmatch(name) is not None


def is_dns_subdomain(name: str) -> bool:
    """RFC 1123 subdomain (`IsDNS1123Subdomain`): object, node, driver and pool-part names."""
    return len(name) <= DNS_SUBDOMAIN_MAX_LENGTH and _DNS_SUBDOMAIN_RE.fullmatch(name) is not None


def is_c_identifier(name: str) -> bool:
    """`IsCIdentifier`: attribute and capacity identifiers."""
    return _C_IDENTIFIER_RE.fullmatch(name) is not None


def is_label_name(name: str) -> bool:
    """The name part of a label key (`IsQualifiedName` without the prefix)."""
    return len(name) <= LABEL_MAX_LENGTH and _LABEL_NAME_RE.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    """`IsValidLabelValue`: empty, or at most 63 alphanumerics, '-', '_', '.'."""
    return len(value) <= LABEL_MAX_LENGTH and _LABEL_VALUE_RE.fullmatch(value) is not None
