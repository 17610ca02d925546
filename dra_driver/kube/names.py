"""Kubernetes name rules, all in one place: every name the code checks is checked here.

Object names, namespaces, device, request, driver and pool names, attribute
and capacity names (qualified names), label keys and values, UIDs:
the apiserver checks each against one of a few formats from apimachinery's
`pkg/util/validation` (and resource.k8s.io's own limits), and so do we
before we publish a slice, accept a claim's allocation, store an object,
serve a driver name or name a file or socket after a claim or a pod. The `is_*` functions
answer yes or no; the `*_errors` functions say why not, one message per
broken rule. The Python kubernetes client ships no such validators, so they
are written here, regexes copied from apimachinery.
"""

from __future__ import annotations

import re
from typing import Final

DNS_LABEL_MAX_LENGTH: Final = 63
DNS_SUBDOMAIN_MAX_LENGTH: Final = 253
LABEL_MAX_LENGTH: Final = 63
DRIVER_NAME_MAX_LENGTH: Final = 63
"""resource.k8s.io's DriverNameMaxLength: the plugin's name, a slice's spec.driver."""
POOL_NAME_MAX_LENGTH: Final = 253
DEVICE_MAX_DOMAIN_LENGTH: Final = 63
DEVICE_MAX_ID_LENGTH: Final = 32

_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE: Final = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE: Final = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_C_IDENTIFIER_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_NAME_RE: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE_RE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_UID_RE: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,126}[A-Za-z0-9])?")


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


def is_uid(uid: str) -> bool:
    """An object UID (a claim's, a pod's) the node can name files, sockets and CDI devices
    after.

    The apiserver makes UIDs as RFC 4122 UUIDs; this takes any UID of at most
    128 letters, digits, '_', '-' and '.', starting and ending with a letter
    or digit, which is what a file name and a CDI device name both allow.
    """
    return _UID_RE.fullmatch(uid) is not None


def driver_name_errors(name: str) -> list[str]:
    """Why `name` is not a valid driver name (CSI driver-name rules), or []."""
    if not name:
        return ["required"]
    errors = []
    if len(name) > DRIVER_NAME_MAX_LENGTH:
        errors.append(f"longer than {DRIVER_NAME_MAX_LENGTH} characters")
    if not is_dns_subdomain(name.lower()):
        errors.append(f"{name!r} is not a DNS subdomain")
    return errors


def pool_name_errors(name: str) -> list[str]:
    """Why `name` is not a valid pool name, or []: DNS subdomains joined by '/'."""
    if not name:
        return ["required"]
    errors = []
    if len(name) > POOL_NAME_MAX_LENGTH:
        errors.append(f"longer than {POOL_NAME_MAX_LENGTH} characters")
    for part in name.split("/"):
        if not is_dns_subdomain(part):
            errors.append(f"{part!r} is not a DNS subdomain")
    return errors


def qualified_name_errors(name: str) -> list[str]:
    """Why `name` is not an attribute/capacity name (`id` or `domain/id`), or []."""
    parts = name.split("/")
    if len(parts) == 1:
        return _c_identifier_errors(parts[0])
    if len(parts) > 2:
        return ["must not contain more than one slash"]
    domain, identifier = parts
    errors = []
    if not domain:
        errors.append("the domain must not be empty")
    else:
        if len(domain) > DEVICE_MAX_DOMAIN_LENGTH:
            errors.append(f"domain longer than {DEVICE_MAX_DOMAIN_LENGTH} characters")
        if not is_dns_subdomain(domain.lower()):
            errors.append(f"domain {domain!r} is not a DNS subdomain")
    if not identifier:
        errors.append("the name must not be empty")
    else:
        errors.extend(_c_identifier_errors(identifier))
    return errors


def _c_identifier_errors(identifier: str) -> list[str]:
    errors = []
    if len(identifier) > DEVICE_MAX_ID_LENGTH:
        errors.append(f"identifier longer than {DEVICE_MAX_ID_LENGTH} characters")
    if not is_c_identifier(identifier):
        errors.append(f"{identifier!r} is not a C identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return errors


def label_key_errors(name: str) -> list[str]:
    """Why `name` is not a label key (`[prefix/]name`), or []: taint keys, conditions."""
    if not name:
        return ["required"]
    prefix, slash, short = name.rpartition("/")
    errors = []
    if slash:
        if not prefix:
            errors.append("prefix part must not be empty")
        elif not is_dns_subdomain(prefix):
            errors.append(f"prefix {prefix!r} is not a DNS subdomain")
        if "/" in prefix:
            errors.append("must contain at most one slash")
    if not short:
        errors.append("name part must not be empty")
    elif not is_label_name(short):
        errors.append(
            f"name part {short!r} must be 63 characters or less, alphanumeric, "
            "'-', '_' or '.', starting and ending with an alphanumeric character"
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why `value` is not a label value, or []: taint values."""
    if not is_label_value(value):
        return [
            f"{value!r} is not a label value (63 characters or less, alphanumeric, "
            "'-', '_' or '.', starting and ending with an alphanumeric character)"
        ]
    return []
