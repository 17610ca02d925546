"""Generates the upstream CEL library test tables this directory's test runs.

Reads the Go test tables of the libraries Kubernetes compiles DRA selectors
with and writes each as JSON under `data/`, with `data/SOURCE.json` naming
the repositories, paths and commits:

* kubernetes/apiserver `pkg/cel/library/`: `ip_test.go` (TestIP),
  `cidr_test.go` (TestCIDR), `format_test.go` (TestFormat, whose loop over
  `ConstantFormats` reads the format names from `format.go`) and
  `cost_test.go` (TestURLsCost, TestIPCost, TestIPIsCanonicalCost,
  TestCIDRCost, TestNameFormatCost, TestStringLibrary);
* kubernetes/apiextensions-apiserver `pkg/apiserver/schema/cel/validation_test.go`
  (TestValidationExpressions): the sections on URLs, IPs and CIDRs, formats,
  and the compile-time checks of duration and timestamp literals;
* google/cel-go `ext/formatting_test.go` (TestStringFormat,
  TestStringFormatHeterogeneousLiterals): `string.format()` below strings
  version 4, which Kubernetes uses.

Nothing is copied by hand: `gosource.py` parses the Go source and runs the
table-building statements; the test helpers they call (`testIP`,
`testCost`, ...) record each case. CI has no network, so the generated files
are committed; rerun this script to refresh them:

    python tests/dra_driver/scheduling/cel/upstream/generate.py \\
        --apiserver /path/to/kubernetes-apiserver.git \\
        --apiextensions /path/to/kubernetes-apiextensions-apiserver.git \\
        --cel-go /path/to/cel-go.git

Each argument is a git directory (a clone or a bare mirror) of the staging
repository (or `--kubernetes` for kubernetes/kubernetes, whose
`staging/src/k8s.io/...` holds the same files); `REPO@COMMIT` picks a commit
other than HEAD.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gosource

DATA = Path(__file__).parent / "data"

APISERVER_LIBRARY = "pkg/cel/library"
APISERVER_FUNCTIONS = {
    "ip_test.go": ["TestIP"],
    "cidr_test.go": ["TestCIDR"],
    "format_test.go": ["TestFormat"],
    "cost_test.go": [
        "TestURLsCost",
        "TestIPCost",
        "TestIPIsCanonicalCost",
        "TestCIDRCost",
        "TestNameFormatCost",
        "TestStringLibrary",
    ],
}
VALIDATION_TEST = "pkg/apiserver/schema/cel/validation_test.go"
VALIDATION_SECTIONS = (
    "duration format",
    "date-time format",
    "URL parsing",
    "IP and CIDR",
    "format",
    "cost for extended lib calculated correctly: url",
)
CEL_GO_FORMATTING_TEST = "ext/formatting_test.go"


# -- values of the Go libraries the tables call -------------------------------------------


@dataclass(frozen=True)
class Tagged:
    """A CEL value as the JSON data carries it: {"int": 4}, {"ip": "1.2.3.4"}, ..."""

    tag: str
    value: Any

    def json(self) -> dict[str, Any]:
        return {self.tag: _json(self.value)}


class GoUint(int):
    """A Go unsigned integer (`uint(5)`, `uint64(5)`), which CEL receives as a uint."""


@dataclass(frozen=True)
class GoTime:
    rfc3339: str


@dataclass(frozen=True)
class GoDuration:
    nanos: int


@dataclass(frozen=True)
class CostEstimate:
    Min: int
    Max: int

    def Add(self, other: CostEstimate) -> CostEstimate:
        return CostEstimate(self.Min + other.Min, self.Max + other.Max)


def _json(value: Any) -> Any:
    if isinstance(value, Tagged):
        return value.json()
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def encode(value: Any) -> dict[str, Any]:
    """A Go value handed to CEL (a table's dynamic argument) as tagged JSON."""
    if isinstance(value, Tagged):
        return value.json()
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, GoUint):
        return {"uint": int(value)}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"double": value if math.isfinite(value) else str(value)}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, GoTime):
        return {"timestamp": value.rfc3339}
    if isinstance(value, GoDuration):
        return {"duration_ns": value.nanos}
    if isinstance(value, list):
        return {"list": [encode(v) for v in value]}
    if isinstance(value, gosource.Struct):
        raise ValueError(f"no CEL value for a {value.type_name}")
    if isinstance(value, dict):
        return {"map": [[encode(k), encode(v)] for k, v in value.items()]}
    raise ValueError(f"no CEL value for {value!r}")


_GO_DURATION = re.compile(r"(\d+)(h|m|s)")
_UNIT = {"h": 3600, "m": 60, "s": 1}


def _must_parse_duration(text: str) -> GoDuration:
    seconds = sum(int(n) * _UNIT[u] for n, u in _GO_DURATION.findall(text))
    if "".join(f"{n}{u}" for n, u in _GO_DURATION.findall(text)) != text:
        raise ValueError(f"unsupported duration {text}")
    return GoDuration(seconds * 1_000_000_000)


_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def _time_date(*args: Any) -> GoTime:
    """`time.Date(year, month, day, hour, min, sec, nsec, loc)`."""
    year, month, day, hour, minute, sec, nsec, loc = args
    if loc != "UTC" or nsec:
        raise ValueError("only UTC times without nanoseconds are supported")
    return GoTime(f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{sec:02d}Z")


def _sprintf(fmt: str, *args: Any) -> str:
    out = []
    values = iter(args)
    i = 0
    while i < len(fmt):
        if fmt[i] != "%":
            out.append(fmt[i])
            i += 1
            continue
        verb = fmt[i + 1]
        i += 2
        if verb == "%":
            out.append("%")
        elif verb in "sdv":
            out.append(str(next(values)))
        elif verb == "q":
            out.append(go_quote(str(next(values))))
        else:
            raise ValueError(f"unsupported verb %{verb}")
    return "".join(out)


def go_quote(text: str) -> str:
    """Go's `%q` for the strings the tables quote (printable text and C escapes)."""
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in escapes:
            out.append(escapes[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


class _T:
    """Go's `*testing.T`, as the tables use it: `t.Run(name, func(t) {...})` runs the body."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def Run(self, name: str, body: Any) -> None:
        self.names.append(name)
        try:
            body(self)
        finally:
            self.names.pop()

    def name(self) -> str:
        """The subtest name Go would print (`TestIP/parse_ipv4`), minus the function."""
        return "/".join(n.replace(" ", "_") for n in self.names)


def go_globals() -> dict[str, Any]:
    """The Go library functions and constants the tables call."""
    optional_none = Tagged("optional", None)
    return {
        "t": _T(),
        "append": lambda items, *more: [*items, *more],
        "len": len,
        "int64": int,
        "int": int,
        "uint": GoUint,
        "uint64": GoUint,
        "float64": float,
        "fmt.Sprintf": _sprintf,
        "strings.Repeat": lambda s, n: s * n,
        "math.NaN": lambda: math.nan,
        "math.Inf": lambda sign: math.inf if sign >= 0 else -math.inf,
        "math.MaxInt64": 2**63 - 1,
        "time.UTC": "UTC",
        **{f"time.{name}": i + 1 for i, name in enumerate(_MONTHS)},
        "time.Date": _time_date,
        "mustParseDuration": _must_parse_duration,
        "netip.ParseAddr": lambda text: (Tagged("ip", text), None),
        "netip.ParsePrefix": lambda text: (Tagged("cidr", text), None),
        "netip.PrefixFrom": lambda addr, bits: Tagged("cidr", f"{addr.value}/{bits}"),
        "types.Bool": lambda b: Tagged("bool", bool(b)),
        "types.True": Tagged("bool", True),
        "types.False": Tagged("bool", False),
        "types.Int": lambda n: Tagged("int", int(n)),
        "types.String": lambda s: Tagged("string", s),
        "types.OptionalNone": optional_none,
        "types.OptionalOf": lambda v: Tagged("optional", v),
        "types.DefaultTypeAdapter": None,
        "types.NewStringList": lambda _adapter, items: Tagged(
            "list", [Tagged("string", s) for s in items]
        ),
    }


def go_constructors() -> dict[str, Any]:
    def ip(_type: Any, pairs: list[tuple[Any, Any]]) -> Tagged:
        return Tagged("ip", dict(pairs)["Addr"].value)

    def cidr(_type: Any, pairs: list[tuple[Any, Any]]) -> Tagged:
        return Tagged("cidr", dict(pairs)["Prefix"].value)

    def cost(_type: Any, pairs: list[tuple[Any, Any]]) -> CostEstimate:
        fields = dict(pairs)
        return CostEstimate(fields.get("Min", 0), fields.get("Max", 0))

    return {"apiservercel.IP": ip, "apiservercel.CIDR": cidr, "checker.CostEstimate": cost}


# -- Kubernetes' library tests ---------------------------------------------------------------


def _recorder(cases: list[dict[str, Any]], function: str) -> dict[str, Any]:
    """The test helpers of library/*_test.go, each recording the case it is given."""

    def result_case(
        t: _T, expr: str, result: Any, runtime_err: str, compile_errs: Any
    ) -> dict[str, Any]:
        case: dict[str, Any] = {"function": function, "name": t.name(), "expr": expr}
        if compile_errs:
            case["compile_error_patterns"] = list(compile_errs)
        elif runtime_err:
            case["runtime_error"] = runtime_err
        else:
            case["result"] = encode(result)
        return case

    def test_ip(t: _T, expr: str, result: Any, runtime_err: str, compile_errs: Any) -> None:
        cases.append(result_case(t, expr, result, runtime_err, compile_errs))

    def test_quantity(t: _T, expr: str, result: Any, pattern: str, compile_errs: Any) -> None:
        case = result_case(t, expr, result, "", compile_errs)
        if pattern:
            case.pop("result", None)
            case["runtime_error_pattern"] = pattern
        cases.append(case)

    def test_cost(t: _T, expr: str, estimated: CostEstimate, runtime: Any) -> None:
        cases.append(
            {
                "function": function,
                "name": t.name(),
                "expr": expr,
                "runtime_cost": int(runtime),
                "estimated_cost": [estimated.Min, estimated.Max],
            }
        )

    return {
        "testIP": test_ip,
        "testCIDR": test_ip,
        "testQuantity": test_quantity,
        "testCost": test_cost,
    }


def constant_format_names(format_go: str) -> list[str]:
    """The keys of `ConstantFormats` in library/format.go."""
    start = format_go.index("var ConstantFormats = ")
    body = format_go[start : format_go.index("\n}\n", start)]
    return re.findall(r'^\t"(\w+)": \{', body, re.MULTILINE)


def apiserver_tables(read: Any) -> dict[str, list[dict[str, Any]]]:
    formats = constant_format_names(read(f"{APISERVER_LIBRARY}/format.go"))
    library = {"library.ConstantFormats": dict.fromkeys(formats)}
    tables: dict[str, list[dict[str, Any]]] = {}
    for file, functions in APISERVER_FUNCTIONS.items():
        source = read(f"{APISERVER_LIBRARY}/{file}")
        cases: list[dict[str, Any]] = []
        for function in functions:
            before = len(cases)
            globals_ = {**go_globals(), **library, **_recorder(cases, function)}
            gosource.Evaluator(globals_, go_constructors()).run(
                gosource.function_body(source, function)
            )
            if len(cases) == before:
                raise ValueError(f"{file} {function}: no cases found")
        tables[file] = cases
    return tables


# -- apiextensions' validation tests ---------------------------------------------------------

_COMPILE_ERROR = re.compile(r"^compilation failed: ERROR: <input>:(\d+):(\d+): (.*)$")


def validation_table(source: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    evaluator = gosource.Evaluator(go_globals(), go_constructors())
    for section in VALIDATION_SECTIONS:
        entries = gosource.composite_entries(source, "{name: " + go_quote(section) + ",")
        if len(entries) != 1:
            raise ValueError(f"validation_test.go: {len(entries)} sections named {section!r}")
        entry = evaluator.eval(entries[0], {})
        obj = entry.get("obj")
        self_value = (
            obj if isinstance(obj, dict) and all(isinstance(v, str) for v in obj.values()) else None
        )
        for rule in entry.get("valid", []):
            if not isinstance(rule, str):
                continue  # ValsEqualThemselvesAndDataLiteral(...): rules about self.val*
            case: dict[str, Any] = {"section": section, "expr": rule}
            if "self" in rule or "oldSelf" in rule:
                if self_value is None:
                    continue  # needs the section's object and schema, which selectors lack
                case["self"] = self_value
            cost = entry.get("expectedCost")
            if isinstance(cost, int) and cost:
                case["runtime_cost"] = cost
            case["result"] = {"bool": True}
            cases.append(case)
        for rule, message in sorted(entry.get("errors", {}).items()):
            if "self" in rule:
                continue
            match = _COMPILE_ERROR.match(message)
            if match is None:
                raise ValueError(f"validation_test.go: unexpected error {message!r}")
            line, column, text = match.groups()
            cases.append(
                {
                    "section": section,
                    "expr": rule,
                    "compile_error": text,
                    "line": int(line),
                    "column": int(column),
                }
            )
    return cases


# -- cel-go's formatting tests ---------------------------------------------------------------


def cel_go_format_table(source: str) -> list[dict[str, Any]]:
    evaluator = gosource.Evaluator(go_globals(), go_constructors())
    env = evaluator.run([gosource.defined_in(source, "TestStringFormat", "tests")])
    cases = []
    for test in env["tests"]:
        # runCase: fmt.Sprintf("%q.format([%s])", format, formatArgs), dynArgs as variables.
        case: dict[str, Any] = {
            "function": "TestStringFormat",
            "name": test["name"],
            "expr": f"{go_quote(test['format'])}.format([{test.get('formatArgs', '')}])",
        }
        locale = test.get("locale", "")
        if locale:
            case["locale"] = locale
        dyn_args = test.get("dynArgs") or {}
        try:
            case["bindings"] = {name: encode(value) for name, value in dyn_args.items()}
        except ValueError:
            case["unsupported"] = "an argument is a protocol buffer message"
        if test.get("err"):
            case["error"] = test["err"]
        else:
            case["result"] = {"string": test.get("expectedOutput", "")}
        runtime_cost = test.get("expectedRuntimeCost")
        if isinstance(runtime_cost, int) and runtime_cost:
            case["runtime_cost"] = runtime_cost
        cases.append(case)
    env = evaluator.run(
        [gosource.defined_in(source, "TestStringFormatHeterogeneousLiterals", "tests")]
    )
    for test in env["tests"]:
        cases.append(
            {
                "function": "TestStringFormatHeterogeneousLiterals",
                "name": test["expr"],
                "expr": test["expr"],
                "result": {"string": test["out"]},
            }
        )
    return cases


# -- main ---------------------------------------------------------------------------------------


class Repo:
    """A git directory at one commit; `prefix` is the staging path inside kubernetes/kubernetes."""

    def __init__(self, spec: str, url: str, prefix: str = "") -> None:
        self.git_dir, _, commit = spec.partition("@")
        self.url = url
        self.prefix = prefix
        self.commit = self._git("rev-parse", commit or "HEAD").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", self.git_dir, *args], check=True, capture_output=True, text=True
        ).stdout

    def read(self, path: str) -> str:
        return self._git("show", f"{self.commit}:{self.prefix}{path}")

    def source(self, paths: list[str]) -> dict[str, Any]:
        return {
            "repository": self.url,
            "commit": self.commit,
            "paths": [self.prefix + p for p in paths],
        }


def _write(name: str, source: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    document = {"source": source, "cases": cases}
    (DATA / name).write_text(
        json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apiserver", help="kubernetes/apiserver git dir[@commit]")
    parser.add_argument(
        "--apiextensions", help="kubernetes/apiextensions-apiserver git dir[@commit]"
    )
    parser.add_argument(
        "--kubernetes", help="kubernetes/kubernetes git dir[@commit] (instead of both)"
    )
    parser.add_argument("--cel-go", required=True, help="google/cel-go git dir[@commit]")
    args = parser.parse_args(argv[1:])
    if args.kubernetes:
        apiserver = Repo(
            args.kubernetes,
            "https://github.com/kubernetes/kubernetes",
            "staging/src/k8s.io/apiserver/",
        )
        apiextensions = Repo(
            args.kubernetes,
            "https://github.com/kubernetes/kubernetes",
            "staging/src/k8s.io/apiextensions-apiserver/",
        )
    else:
        apiserver = Repo(args.apiserver, "https://github.com/kubernetes/apiserver")
        apiextensions = Repo(
            args.apiextensions, "https://github.com/kubernetes/apiextensions-apiserver"
        )
    cel_go = Repo(args.cel_go, "https://github.com/google/cel-go")

    DATA.mkdir(exist_ok=True)
    sources = []
    for file, cases in apiserver_tables(apiserver.read).items():
        paths = [f"{APISERVER_LIBRARY}/{file}"]
        if file == "format_test.go":
            paths.append(f"{APISERVER_LIBRARY}/format.go")
        source = apiserver.source(paths)
        _write(f"apiserver_{file.removesuffix('.go')}.json", source, cases)
        sources.append(source)
    source = apiextensions.source([VALIDATION_TEST])
    _write(
        "apiextensions_validation_test.json",
        source,
        validation_table(apiextensions.read(VALIDATION_TEST)),
    )
    sources.append(source)
    source = cel_go.source([CEL_GO_FORMATTING_TEST])
    _write(
        "celgo_formatting_test.json",
        source,
        cel_go_format_table(cel_go.read(CEL_GO_FORMATTING_TEST)),
    )
    sources.append(source)
    summary = {
        "sources": sources,
        "generator": "tests/dra_driver/scheduling/cel/upstream/generate.py",
    }
    (DATA / "SOURCE.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
