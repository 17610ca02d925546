"""Kubernetes' named-format CEL library (k8s.io/apiserver/pkg/cel/library/format.go).

Enabled for every CEL environment from Kubernetes 1.31 (environment/base.go).
`format.named(name)` is an optional `kubernetes.NamedFormat` (none for an
unknown name); `format.dns1123Label()`, `format.dns1123Subdomain()`,
`format.dns1035Label()`, `format.qualifiedName()`, `format.dns1123LabelPrefix()`,
`format.dns1123SubdomainPrefix()`, `format.dns1035LabelPrefix()`,
`format.labelValue()`, `format.uri()`, `format.uuid()`, `format.byte()`,
`format.date()` and `format.datetime()` return one directly; `f.validate(s)`
is `optional.none()` when `s` is valid, else an optional list of
apimachinery's messages (`named_formats.py`). Costs are upstream's:
`validate` is charged like a regex match against a pattern of the format's
`MaxRegexSize`; the rest cost 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.named_formats import FORMATS, NamedFormat
from dra_driver.scheduling.cel.types import NAMED_FORMAT, STRING, list_of, optional_of
from dra_driver.scheduling.cel.values import NONE, Optional, register_kind

register_kind(NamedFormat, "kubernetes.NamedFormat")


def _named(name: str) -> Optional:
    found = FORMATS.get(name)
    return NONE if found is None else Optional(found)


def _validate(named: NamedFormat, text: str) -> Optional:
    errors = named.validate(text)
    return Optional(list(errors)) if errors else NONE


def _validate_cost(args: Sequence[Any], _result: Any) -> int:
    named, text = args
    regex_size: int = named.max_regex_size
    text_cost = math.ceil((1 + costs.size_of(text)) * costs.STRING_TRAVERSAL_FACTOR)
    return text_cost * math.ceil(regex_size * costs.REGEX_LENGTH_FACTOR)


def _constant(named: NamedFormat) -> Callable[[], NamedFormat]:
    return lambda: named


register(
    "validate",
    member(
        "format-validate",
        (NAMED_FORMAT, STRING),
        optional_of(list_of(STRING)),
        _validate,
        _validate_cost,
    ),
)
register("format.named", glob("format-named", (STRING,), optional_of(NAMED_FORMAT), _named))
for _key, _format in FORMATS.items():
    register(f"format.{_key}", glob(f"format.{_key}", (), NAMED_FORMAT, _constant(_format)))
