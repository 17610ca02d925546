"""The string formats of Kubernetes' `format` CEL library, with apimachinery's messages.

`format.dns1123Label().validate(s)` returns the messages the API server
gives for a bad name (`a lowercase RFC 1123 label must consist of ...`), so
the validators here follow apimachinery's `pkg/api/validation`
(`NameIsDNSLabel` and friends, with their `prefix` form that masks a trailing
dash), `pkg/util/validation` and `pkg/api/validate/content` (label keys and
values), and kube-openapi's `strfmt` for `uuid`, `byte`, `date` and
`datetime`. `dra_driver.kube.names` answers only yes or no; these also say
why, with apimachinery's words, which is what the library returns.

Lengths count UTF-8 bytes, as Go's `len` does. Each format records the
regex size Kubernetes' cost model charges for it (`MaxRegexSize`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from dra_driver.scheduling.cel import gotime
from dra_driver.scheduling.cel.goneturl import URLError, parse_request_uri

_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)
_DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_MSG: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_FMT: Final = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253
LABEL_MAX: Final = 63

# kube-openapi strfmt's patterns (their lengths are Kubernetes' cost estimates).
UUID_PATTERN: Final = "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"
DATE_TIME_PATTERN: Final = "^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$"
# govalidator's base64 pattern.
_BASE64: Final = re.compile(
    r"(?:[A-Za-z0-9+\/]{4})*(?:[A-Za-z0-9+\/]{2}==|[A-Za-z0-9+\/]{3}=|[A-Za-z0-9+\/]{4})"
)
# Go's `^...$` matches the whole text: fullmatch, and `.` stops at a newline as in Go.
_UUID: Final = re.compile(UUID_PATTERN.removeprefix("(?i)^")[:-1], re.IGNORECASE | re.ASCII)
_DATE_TIME: Final = re.compile(DATE_TIME_PATTERN[1:-1])

_DNS1123_LABEL: Final = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN: Final = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL: Final = re.compile(_DNS1035_LABEL_FMT)
_LABEL_KEY: Final = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE: Final = re.compile(_LABEL_VALUE_FMT)


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's `RegexError`."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(length: int, unit: str) -> str:
    # util/validation says "characters", api/validate/content "bytes".
    return f"must be no more than {length} {unit}"


def is_dns1123_label(value: str) -> list[str]:
    """util/validation `IsDNS1123Label`."""
    errors = []
    if _byte_len(value) > DNS1123_LABEL_MAX:
        errors.append(_max_len_error(DNS1123_LABEL_MAX, "characters"))
    if not _DNS1123_LABEL.fullmatch(value):
        if _DNS1123_SUBDOMAIN.fullmatch(value):
            errors.append("must not contain dots")
        else:
            errors.append(regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errors


def is_dns1123_subdomain(value: str, unit: str = "characters") -> list[str]:
    """util/validation (`unit` "characters") or content (`unit` "bytes") `IsDNS1123Subdomain`."""
    errors = []
    if _byte_len(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(_max_len_error(DNS1123_SUBDOMAIN_MAX, unit))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def is_dns1035_label(value: str) -> list[str]:
    """util/validation `IsDNS1035Label`."""
    errors = []
    if _byte_len(value) > DNS1123_LABEL_MAX:
        errors.append(_max_len_error(DNS1123_LABEL_MAX, "characters"))
    if not _DNS1035_LABEL.fullmatch(value):
        errors.append(regex_error(_DNS1035_LABEL_MSG, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errors


def is_qualified_name(value: str) -> list[str]:
    """content `IsLabelKey` (util/validation's `IsQualifiedName`)."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += ["prefix part " + m for m in is_dns1123_subdomain(prefix, "bytes")]
    else:
        return [
            "a valid label key "
            + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_len(name) > LABEL_MAX:
        errors.append("name part " + _max_len_error(LABEL_MAX, "bytes"))
    if not _LABEL_KEY.fullmatch(name):
        errors.append(
            "name part "
            + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def is_label_value(value: str) -> list[str]:
    """content `IsLabelValue`."""
    errors = []
    if _byte_len(value) > LABEL_MAX:
        errors.append(_max_len_error(LABEL_MAX, "bytes"))
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(
            regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errors


def _mask_trailing_dash(name: str) -> str:
    """api/validation's `maskTrailingDash`, which (by its slice) drops the dash and one byte."""
    data = name.encode("utf-8", "surrogatepass")
    if len(data) > 1 and data.endswith(b"-"):
        data = data[:-2] + b"a"
    return data.decode("utf-8", "replace")


def _prefixed(check: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """The `prefix` form of a name check (`NameIsDNSLabel(name, true)`)."""
    return lambda value: check(_mask_trailing_dash(value))


def _uri(value: str) -> list[str]:
    try:
        parse_request_uri(value)
    except URLError as exc:
        return [str(exc)]
    return []


def _uuid(value: str) -> list[str]:
    return [] if _UUID.fullmatch(value) else ["does not match the UUID format"]


def _byte(value: str) -> list[str]:
    return [] if _BASE64.fullmatch(value) else ["invalid base64"]


def is_date(value: str) -> bool:
    """strfmt `IsDate`: Go's `time.Parse("2006-01-02", value)`."""
    try:
        gotime.parse_date(value)
    except gotime.TimeError:
        return False
    return True


def _go_lower(text: str) -> str:
    # Go's strings.ToLower maps each rune alone (Python's lower() can expand one).
    return "".join(
        c.lower() if len(c.lower()) == 1 else ("i" if c == "\u0130" else c) for c in text
    )


def is_date_time(value: str) -> bool:
    """strfmt `IsDateTime`."""
    if len(value.encode("utf-8", "surrogatepass")) < 4:
        return False
    parts = _go_lower(value).split("t")
    if len(parts) < 2 or not is_date(parts[0]):
        return False
    match = _DATE_TIME.fullmatch(parts[1])
    if match is None:
        return False
    return match.group(1) <= "23" and match.group(2) <= "59" and match.group(3) <= "59"


def _date(value: str) -> list[str]:
    return [] if is_date(value) else ["invalid date"]


def _date_time(value: str) -> list[str]:
    return [] if is_date_time(value) else ["invalid datetime"]


@dataclass(frozen=True, slots=True)
class NamedFormat:
    """A value of CEL type `kubernetes.NamedFormat`; equal when the names are."""

    name: str
    validate: Callable[[str], list[str]]
    max_regex_size: int

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NamedFormat) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


# Go's `len(strfmt.UUIDPattern)` and `len(strfmt.DateTimePattern)`.
_GOVALIDATOR_URL_LENGTH: Final = 1103
_GOVALIDATOR_BASE64_LENGTH: Final = 84

# library/format.go ConstantFormats: the key, the format's Name, its check, MaxRegexSize.
FORMATS: Final[dict[str, NamedFormat]] = {
    "dns1123Label": NamedFormat("DNS1123Label", is_dns1123_label, 30),
    "dns1123Subdomain": NamedFormat("DNS1123Subdomain", is_dns1123_subdomain, 60),
    "dns1035Label": NamedFormat("DNS1035Label", is_dns1035_label, 30),
    "qualifiedName": NamedFormat("QualifiedName", is_qualified_name, 60),
    "dns1123LabelPrefix": NamedFormat("DNS1123LabelPrefix", _prefixed(is_dns1123_label), 30),
    "dns1123SubdomainPrefix": NamedFormat(
        "DNS1123SubdomainPrefix", _prefixed(is_dns1123_subdomain), 60
    ),
    "dns1035LabelPrefix": NamedFormat("DNS1035LabelPrefix", _prefixed(is_dns1035_label), 30),
    "labelValue": NamedFormat("LabelValue", is_label_value, 40),
    "uri": NamedFormat("URI", _uri, _GOVALIDATOR_URL_LENGTH),
    "uuid": NamedFormat("uuid", _uuid, len(UUID_PATTERN)),
    "byte": NamedFormat("byte", _byte, _GOVALIDATOR_BASE64_LENGTH),
    "date": NamedFormat("date", _date, len(DATE_TIME_PATTERN)),
    "datetime": NamedFormat("datetime", _date_time, len(DATE_TIME_PATTERN)),
}
