"""What a container gets from a set of CDI device IDs, to compare two plugins' CDI.

Two plugins generate "the same CDI" for a claim when a container runtime,
given the CDI device IDs each returned from NodePrepareResources, applies the
same edits: the same environment, device nodes, mounts and hooks. The files
may differ (one spec per claim, or a node-wide spec plus a small claim spec;
keys in another order; a device node's numbers written or left for the
runtime to read from the node). `resolved_edits` resolves IDs as a CDI
runtime does, over every spec in a CDI directory: a spec's own
`containerEdits` apply once when any of its devices is used, then each
device's. `differences` lists what only one side gets.

No Python library resolves CDI (the reference is the Go
`container-device-interface` package), so these few lines do it for the
benchmark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dra_driver.errors import CdiError

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class ResolvedEdits:
    """The edits a container gets, as sets (order is the runtime's business, not ours).

    `node_numbers` maps a device node's container path to the (type, major,
    minor) a spec wrote; nvcdi leaves them out and the runtime stats the host
    node, so they count only where both sides wrote them.
    """

    env: set[str] = field(default_factory=set)
    device_nodes: set[tuple[str, str]] = field(default_factory=set)  # (path, hostPath)
    mounts: set[tuple[str, str, tuple[str, ...]]] = field(default_factory=set)
    hooks: set[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = field(default_factory=set)
    node_numbers: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    spec_files: list[str] = field(default_factory=list)

    def add(self, edits: Mapping[str, Any], placeholders: Mapping[str, str]) -> None:
        """Merge one `containerEdits` object, with `placeholders` substituted in strings."""

        def norm(value: object) -> str:
            text = str(value)
            for raw, placeholder in placeholders.items():
                text = text.replace(raw, placeholder)
            return text

        self.env.update(norm(e) for e in edits.get("env") or ())
        for node in edits.get("deviceNodes") or ():
            path = norm(node["path"])
            self.device_nodes.add((path, norm(node.get("hostPath") or node["path"])))
            if "major" in node and "minor" in node:
                self.node_numbers[path] = (str(node.get("type", "c")), node["major"], node["minor"])
        for mount in edits.get("mounts") or ():
            options = tuple(norm(o) for o in mount.get("options") or ())
            self.mounts.add((norm(mount["hostPath"]), norm(mount["containerPath"]), options))
        for hook in edits.get("hooks") or ():
            args = tuple(norm(a) for a in hook.get("args") or ())
            env = tuple(sorted(norm(e) for e in hook.get("env") or ()))
            self.hooks.add((norm(hook["hookName"]), norm(hook["path"]), args, env))


def _load_specs(cdi_root: Path) -> list[tuple[Path, dict[str, Any]]]:
    specs = []
    for path in sorted(cdi_root.iterdir()):
        if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
            continue
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
        if not isinstance(document, dict) or "kind" not in document:
            raise CdiError(f"CDI spec {path}: not a mapping with a 'kind'")
        specs.append((path, document))
    return specs


def resolved_edits(
    cdi_root: Path, device_ids: Iterable[str], placeholders: Mapping[str, str]
) -> ResolvedEdits:
    """The edits a runtime applies for `device_ids` ("vendor/class=name") from the specs in
    `cdi_root`; CdiError if an ID matches no device or more than one."""
    specs = _load_specs(cdi_root)
    result = ResolvedEdits()
    applied: set[Path] = set()
    for device_id in device_ids:
        kind, sep, name = device_id.partition("=")
        if not sep:
            raise CdiError(f"CDI device ID {device_id!r} is not of the form vendor/class=name")
        found = [
            (path, spec, device)
            for path, spec in specs
            if spec["kind"] == kind
            for device in spec.get("devices") or ()
            if device.get("name") == name
        ]
        if len(found) != 1:
            raise CdiError(
                f"CDI device {device_id}: {len(found)} devices of that name in {cdi_root}"
            )
        path, spec, device = found[0]
        if path not in applied:
            applied.add(path)
            result.spec_files.append(path.name)
            result.add(spec.get("containerEdits") or {}, placeholders)
        result.add(device.get("containerEdits") or {}, placeholders)
    return result


def differences(
    ours: ResolvedEdits, theirs: ResolvedEdits, labels: Sequence[str] = ("ours", "NVIDIA's")
) -> list[str]:
    """One line per edit only one side applies (empty: the container gets the same).

    Mounts of the same host and container path whose options differ are one
    line per pair of option lists, with their count, not two lines each."""
    lines: list[str] = []
    mine_mounts = {(m[0], m[1]): m[2] for m in ours.mounts}
    other_mounts = {(m[0], m[1]): m[2] for m in theirs.mounts}
    option_pairs: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for key in sorted(mine_mounts.keys() & other_mounts.keys()):
        if mine_mounts[key] != other_mounts[key]:
            option_pairs.setdefault((mine_mounts[key], other_mounts[key]), []).append(key[1])
    for (mine, other), paths in option_pairs.items():
        lines.append(
            f"mount options of {len(paths)} mounts (e.g. {paths[0]}): {labels[0]} "
            f"{','.join(mine)}, {labels[1]} {','.join(other)}"
        )
    for what in ("env", "device_nodes", "mounts", "hooks"):
        mine_set, other_set = getattr(ours, what), getattr(theirs, what)
        if what == "mounts":
            mine_set = {m for m in mine_set if (m[0], m[1]) not in other_mounts}
            other_set = {m for m in other_set if (m[0], m[1]) not in mine_mounts}
        for item in sorted(mine_set - other_set):
            lines.append(f"only {labels[0]} {what}: {item}")
        for item in sorted(other_set - mine_set):
            lines.append(f"only {labels[1]} {what}: {item}")
    for path in sorted(ours.node_numbers.keys() & theirs.node_numbers.keys()):
        if ours.node_numbers[path] != theirs.node_numbers[path]:
            lines.append(
                f"device node {path}: {labels[0]} {ours.node_numbers[path]}, "
                f"{labels[1]} {theirs.node_numbers[path]}"
            )
    return lines
