"""Static CEL types, as the checker sees them.

Kubernetes compiles selectors with a type checker: `device.driver` is a
string, `device.capacity[d][n]` a Quantity, attribute values are of the
unknown type. The checker needs those types to reject what cel-go rejects at
compile time (an undefined field, a call with no matching overload, a result
that is not a bool) and to print them the way cel-go prints them.

Types are small immutable values. `DYN` and `ANY` mean "unknown until run
time"; a type whose kind starts with an underscore is a type parameter used
in generic overloads (`_A` in `_==_(A, A)`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CelType:
    """A static CEL type: a kind plus type parameters (list element, map key/value)."""

    kind: str
    params: tuple[CelType, ...] = ()

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list({self.params[0]})"
        if self.kind == "map":
            return f"map({self.params[0]}, {self.params[1]})"
        if self.kind == "type" and self.params:
            return f"type({self.params[0]})"
        if self.kind == "optional_type" and self.params:
            return f"optional_type({self.params[0]})"
        if self.is_param:
            return self.kind[1:]
        return self.kind

    @property
    def is_param(self) -> bool:
        return self.kind.startswith("_")

    @property
    def is_dynamic(self) -> bool:
        """True for types whose values are only known at run time."""
        return self.kind in ("dyn", "any")


DYN = CelType("dyn")
ANY = CelType("any")
NULL = CelType("null_type")
BOOL = CelType("bool")
INT = CelType("int")
UINT = CelType("uint")
DOUBLE = CelType("double")
STRING = CelType("string")
BYTES = CelType("bytes")
DURATION = CelType("google.protobuf.Duration")
TIMESTAMP = CelType("google.protobuf.Timestamp")
SEMVER = CelType("kubernetes.Semver")
QUANTITY = CelType("kubernetes.Quantity")
DEVICE = CelType("kubernetes.DRADevice")
IP = CelType("net.IP")
CIDR = CelType("net.CIDR")
URL = CelType("kubernetes.URL")
NAMED_FORMAT = CelType("kubernetes.NamedFormat")
TYPE = CelType("type")

PARAM_A = CelType("_A")
PARAM_B = CelType("_B")


def list_of(elem: CelType) -> CelType:
    return CelType("list", (elem,))


def map_of(key: CelType, value: CelType) -> CelType:
    return CelType("map", (key, value))


def optional_of(elem: CelType) -> CelType:
    """`optional_type(elem)`, the static type of `optional.of(x)` (cel.OptionalTypes())."""
    return CelType("optional_type", (elem,))


LIST_DYN = list_of(DYN)
OPTIONAL_DYN = optional_of(DYN)
MAP_DYN = map_of(DYN, DYN)

# Names that evaluate to type values when used as identifiers (`type(x) == int`).
TYPE_IDENTIFIERS: dict[str, CelType] = {
    "bool": BOOL,
    "int": INT,
    "uint": UINT,
    "double": DOUBLE,
    "string": STRING,
    "bytes": BYTES,
    "list": LIST_DYN,
    "map": MAP_DYN,
    "null_type": NULL,
    "type": TYPE,
    "optional_type": OPTIONAL_DYN,
    "google.protobuf.Duration": DURATION,
    "google.protobuf.Timestamp": TIMESTAMP,
    # Declared by Kubernetes' IP and CIDR libraries (`cel.Types(IPType)`); the URL and
    # format libraries declare no type names.
    "net.IP": IP,
    "net.CIDR": CIDR,
}


def bind_params(param: CelType, arg: CelType, bindings: dict[str, CelType]) -> bool:
    """Whether a value of static type `arg` may be passed where `param` is declared.

    Unknown types (`dyn`, `any`) are accepted anywhere and accept anything;
    type parameters are bound on first use and must agree afterwards.
    """
    if arg.is_dynamic or param.is_dynamic:
        if param.is_param and param.kind not in bindings:
            bindings[param.kind] = arg
        return True
    if param.is_param:
        bound = bindings.get(param.kind)
        if bound is None:
            bindings[param.kind] = arg
            return True
        if bound.is_dynamic:
            bindings[param.kind] = arg
            return True
        return bind_params(bound, arg, bindings)
    if param.kind != arg.kind or len(param.params) != len(arg.params):
        return False
    return all(bind_params(p, a, bindings) for p, a in zip(param.params, arg.params, strict=True))


def substitute(t: CelType, bindings: dict[str, CelType]) -> CelType:
    """`t` with its type parameters replaced by what they were bound to (or dyn)."""
    if t.is_param:
        return bindings.get(t.kind, DYN)
    if not t.params:
        return t
    return CelType(t.kind, tuple(substitute(p, bindings) for p in t.params))


def join_types(types: list[CelType]) -> CelType:
    """The one type all of `types` share, or dyn when they differ or are unknown."""
    if not types:
        return DYN
    first = types[0]
    if all(t == first for t in types[1:]):
        return first
    return DYN
