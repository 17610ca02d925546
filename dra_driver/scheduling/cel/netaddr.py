"""IP addresses and prefixes parsed, printed and classified like Go's `net/netip`.

Kubernetes' IP and CIDR CEL libraries are `netip.ParseAddr` and
`netip.ParsePrefix` plus a few rules of their own, and their errors quote
netip's messages (`ParseAddr("1.2.3.4.5"): IPv4 address too long`). Python's
`ipaddress` parses a different language (it accepts zones and, before 3.9.5,
leading zeros), words its errors differently and classifies addresses
differently (`is_global` is not Go's `IsGlobalUnicast`), so netip's parser,
printer and predicates are written here, following Go's source:

* IPv4 is four decimal fields, no leading zeros, each at most 255;
* IPv6 is up to eight hex groups of at most four digits, one `::`, an
  optional trailing dotted IPv4 in the last 32 bits, an optional `%zone`;
* printing follows RFC 5952 (lowercase, longest run of two or more zero
  groups as `::`), IPv4-mapped addresses as `::ffff:1.2.3.4`;
* a prefix is `addr/bits`, bits without sign or leading zero, no zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dra_driver.scheduling.cel.gostrings import go_quote

_V4_MAPPED_PREFIX: Final = 0xFFFF << 32
_MAX_U16: Final = 0xFFFF
_HEX: Final = "0123456789abcdefABCDEF"


class AddrError(ValueError):
    """The text is not an IP address or prefix; the message is Go's."""


@dataclass(frozen=True, slots=True, repr=False)
class Addr:
    """A `netip.Addr`: 128 bits, the family, and an IPv6 zone.

    IPv4 addresses keep their 32 bits in the low word of the IPv4-mapped
    form, as netip does, so `bits` of `1.2.3.4` is `::ffff:1.2.3.4`'s.
    """

    bits: int
    is6: bool
    zone: str = ""

    @classmethod
    def v4(cls, octets: tuple[int, int, int, int]) -> Addr:
        a, b, c, d = octets
        return cls(_V4_MAPPED_PREFIX | a << 24 | b << 16 | c << 8 | d, False)

    @property
    def is4(self) -> bool:
        return not self.is6

    @property
    def is4in6(self) -> bool:
        """An IPv6 address in ::ffff:0:0/96 (`Is4In6`)."""
        return self.is6 and self.bits >> 32 == 0xFFFF

    @property
    def bit_len(self) -> int:
        return 128 if self.is6 else 32

    def unmap(self) -> Addr:
        return Addr(self.bits, False) if self.is4in6 else self

    def _v4(self, i: int) -> int:
        return (self.bits >> (8 * (3 - i))) & 0xFF

    def _v6u16(self, i: int) -> int:
        return (self.bits >> (16 * (7 - i))) & _MAX_U16

    # -- classification (netip's predicates) ------------------------------------

    def is_unspecified(self) -> bool:
        return self == Addr(_V4_MAPPED_PREFIX, False) or self == Addr(0, True)

    def is_loopback(self) -> bool:
        ip = self.unmap()
        if ip.is4:
            return ip._v4(0) == 127
        return ip.bits == 1

    def is_multicast(self) -> bool:
        ip = self.unmap()
        if ip.is4:
            return ip._v4(0) & 0xF0 == 0xE0
        return ip.bits >> 120 == 0xFF

    def is_link_local_multicast(self) -> bool:
        ip = self.unmap()
        if ip.is4:
            return ip._v4(0) == 224 and ip._v4(1) == 0 and ip._v4(2) == 0
        return ip._v6u16(0) & 0xFF0F == 0xFF02

    def is_link_local_unicast(self) -> bool:
        ip = self.unmap()
        if ip.is4:
            return ip._v4(0) == 169 and ip._v4(1) == 254
        return ip._v6u16(0) & 0xFFC0 == 0xFE80

    def is_global_unicast(self) -> bool:
        ip = self.unmap()
        if ip.is4 and ip.bits in (_V4_MAPPED_PREFIX, _V4_MAPPED_PREFIX | 0xFFFFFFFF):
            return False
        return (
            ip != Addr(0, True)
            and not ip.is_loopback()
            and not ip.is_multicast()
            and not ip.is_link_local_unicast()
        )

    # -- printing --------------------------------------------------------------

    def __repr__(self) -> str:
        return f"ip({str(self)!r})"

    def __str__(self) -> str:
        if self.is4:
            return _string4(self.bits)
        text = "::ffff:" + _string4(self.bits) if self.is4in6 else _string6(self.bits)
        return f"{text}%{self.zone}" if self.zone else text


def _string4(bits: int) -> str:
    return ".".join(str((bits >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def _string6(bits: int) -> str:
    groups = [(bits >> (16 * (7 - i))) & _MAX_U16 for i in range(8)]
    start, end = -1, -1
    i = 0
    while i < 8:
        j = i
        while j < 8 and groups[j] == 0:
            j += 1
        if j - i >= 2 and j - i > end - start:
            start, end = i, j
        i = j + 1 if j == i else j
    if start < 0:
        return ":".join(f"{g:x}" for g in groups)
    head = ":".join(f"{g:x}" for g in groups[:start])
    tail = ":".join(f"{g:x}" for g in groups[end:])
    return f"{head}::{tail}"


@dataclass(frozen=True, slots=True, repr=False)
class Prefix:
    """A `netip.Prefix`: an address (without zone) and a prefix length."""

    addr: Addr
    length: int

    def masked(self) -> Prefix:
        """The prefix with the host bits cleared (`Masked`)."""
        host_bits = self.addr.bit_len - self.length
        bits = self.addr.bits >> host_bits << host_bits
        return Prefix(Addr(bits, self.addr.is6), self.length)

    def contains(self, ip: Addr) -> bool:
        """Whether `ip` is in the network (`Contains`): same family, no zone."""
        if ip.zone or ip.bit_len != self.addr.bit_len:
            return False
        host_bits = self.addr.bit_len - self.length
        mask = (1 << 128) - (1 << host_bits)
        return (ip.bits ^ self.addr.bits) & mask == 0

    def overlaps(self, other: Prefix) -> bool:
        """Whether the two networks share an address (`Overlaps`)."""
        if self == other:
            return True
        if self.addr.is4 != other.addr.is4:
            return False
        shortest = min(self.length, other.length)
        if shortest == 0:
            return True
        mine = Prefix(self.addr, shortest).masked()
        return mine.addr == Prefix(other.addr, shortest).masked().addr

    def __str__(self) -> str:
        return f"{self.addr}/{self.length}"

    def __repr__(self) -> str:
        return f"cidr({str(self)!r})"


# -- parsing ---------------------------------------------------------------------


def _addr_error(text: str, message: str, at: str = "") -> AddrError:
    where = f" (at {go_quote(at)})" if at else ""
    return AddrError(f"ParseAddr({go_quote(text)}): {message}{where}")


def parse_addr(text: str) -> Addr:
    """`netip.ParseAddr`; raises AddrError with Go's message."""
    for ch in text:
        if ch == ".":
            return Addr.v4(_parse_v4_fields(text, text))
        if ch == ":":
            return _parse_v6(text)
        if ch == "%":
            raise _addr_error(text, "missing IPv6 address")
    raise _addr_error(text, "unable to parse IP")


def _parse_v4_fields(whole: str, text: str) -> tuple[int, int, int, int]:
    """The four octets of dotted `text` (a part of `whole`, which errors quote)."""
    fields: list[int] = []
    value = 0
    digits = 0
    for i, ch in enumerate(text):
        if "0" <= ch <= "9":
            if digits == 1 and value == 0:
                raise _addr_error(whole, "IPv4 field has octet with leading zero")
            value = value * 10 + ord(ch) - ord("0")
            digits += 1
            if value > 255:
                raise _addr_error(whole, "IPv4 field has value >255")
        elif ch == ".":
            if i == 0 or i == len(text) - 1 or text[i - 1] == ".":
                raise _addr_error(whole, "IPv4 field must have at least one digit", text[i:])
            if len(fields) == 3:
                raise _addr_error(whole, "IPv4 address too long")
            fields.append(value)
            value = 0
            digits = 0
        else:
            raise _addr_error(whole, "unexpected character", text[i:])
    if len(fields) < 3:
        raise _addr_error(whole, "IPv4 address too short")
    a, b, c = fields
    return a, b, c, value


def _parse_v6(whole: str) -> Addr:
    text = whole
    zone = ""
    percent = text.find("%")
    if percent >= 0:
        text, zone = text[:percent], text[percent + 1 :]
        if not zone:
            raise _addr_error(whole, "zone must be a non-empty string")
    groups: list[int] = []  # 16-bit groups
    ellipsis = -1  # index in groups where `::` stands
    if text.startswith("::"):
        ellipsis = 0
        text = text[2:]
        if not text:
            return Addr(0, True, zone)
    while len(groups) < 8:
        end = 0
        value = 0
        while end < len(text) and text[end] in _HEX:
            value = (value << 4) + int(text[end], 16)
            if end > 3:
                raise _addr_error(whole, "each group must have 4 or less digits", text)
            if value > _MAX_U16:  # pragma: no cover - four hex digits cannot exceed it
                raise _addr_error(whole, "IPv6 field has value >=2^16", text)
            end += 1
        if end == 0:
            raise _addr_error(
                whole, "each colon-separated field must have at least one digit", text
            )
        if end < len(text) and text[end] == ".":
            if ellipsis < 0 and len(groups) != 6:
                raise _addr_error(
                    whole,
                    "embedded IPv4 address must replace the final 2 fields of the address",
                    text,
                )
            if len(groups) + 2 > 8:
                raise _addr_error(
                    whole,
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    text,
                )
            a, b, c, d = _parse_v4_fields(whole, text)
            groups += [a << 8 | b, c << 8 | d]
            text = ""
            break
        groups.append(value)
        text = text[end:]
        if not text:
            break
        if text[0] != ":":
            raise _addr_error(whole, "unexpected character, want colon", text)
        if len(text) == 1:
            raise _addr_error(whole, "colon must be followed by more characters", text)
        text = text[1:]
        if text[0] == ":":
            if ellipsis >= 0:
                raise _addr_error(whole, "multiple :: in address", text)
            ellipsis = len(groups)
            text = text[1:]
            if not text:
                break
    if text:
        raise _addr_error(whole, "trailing garbage after address", text)
    if len(groups) < 8:
        if ellipsis < 0:
            raise _addr_error(whole, "address string too short")
        groups = groups[:ellipsis] + [0] * (8 - len(groups)) + groups[ellipsis:]
    elif ellipsis >= 0:
        raise _addr_error(whole, "the :: must expand to at least one field of zeros")
    bits = 0
    for group in groups:
        bits = bits << 16 | group
    return Addr(bits, True, zone)


def parse_prefix(text: str) -> Prefix:
    """`netip.ParsePrefix`; raises AddrError with Go's message."""

    def error(message: str) -> AddrError:
        return AddrError(f"netip.ParsePrefix({go_quote(text)}): {message}")

    slash = text.rfind("/")
    if slash < 0:
        raise error("no '/'")
    try:
        addr = parse_addr(text[:slash])
    except AddrError as exc:
        raise error(str(exc)) from None
    if addr.zone:
        raise error("IPv6 zones cannot be present in a prefix")
    bits_text = text[slash + 1 :]
    bad_bits = error("bad bits after slash: " + go_quote(bits_text))
    # strconv.Atoi would accept a sign and leading zeros; ParsePrefix does not.
    if len(bits_text) > 1 and not "1" <= bits_text[0] <= "9":
        raise bad_bits
    if not bits_text or not all("0" <= c <= "9" for c in bits_text):
        raise bad_bits
    bits = int(bits_text)
    if bits >= 1 << 63:  # strconv.Atoi's range
        raise bad_bits
    if bits > addr.bit_len:
        raise error("prefix length out of range")
    return Prefix(addr, bits)
