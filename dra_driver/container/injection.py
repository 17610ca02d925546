"""What a container gets from a set of CDI specs and the device ids the kubelet passes.

A container runtime (containerd, CRI-O) resolves the CDI ids of a container
with the CDI Go library: `Cache.InjectDevices` appends, for each id in
order, its spec's spec-level `containerEdits` the first time that spec is
met, then the device's own edits; `ContainerEdits.Apply` then edits the OCI
spec: an environment variable replaces one of the same name in its place,
a device node replaces one of the same path (moved to the end), a mount
replaces one of the same container path (moved to the end) and the mounts
are then stably sorted by the number of path components, hooks are
appended. `inject` does the same on plain spec documents and returns the
edits as one `containerEdits` mapping, so the plugin's `dra-gpu` tools and
the tests can show or compare what a container sees, whatever specs carry
it (the claim's own spec, the node's base spec). No library exists in
Python for this, hence this module.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

from dra_driver.errors import CdiError


def devices_by_id(specs: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, Mapping[str, Any]]]:
    """Qualified id (`<kind>=<name>`) -> (index of its spec, device), over `specs`."""
    found: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for index, spec in enumerate(specs):
        for device in spec.get("devices") or ():
            found[f"{spec.get('kind')}={device.get('name')}"] = (index, device)
    return found


def inject(specs: Iterable[Mapping[str, Any]], device_ids: Iterable[str]) -> dict[str, Any]:
    """The `containerEdits` a container gets for `device_ids` (in the kubelet's order).

    Raises `CdiError` naming an id no spec defines (the runtime refuses to
    start such a container).
    """
    spec_list = list(specs)
    known = devices_by_id(spec_list)
    edits: list[Mapping[str, Any]] = []
    seen: set[int] = set()
    for cdi_id in device_ids:
        if cdi_id not in known:
            raise CdiError(f"unresolvable CDI device {cdi_id}")
        index, device = known[cdi_id]
        if index not in seen:
            seen.add(index)
            edits.append(spec_list[index].get("containerEdits") or {})
        edits.append(device.get("containerEdits") or {})
    return apply(edits)


def apply(edits: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`ContainerEdits.Apply` of the concatenated `edits` onto an empty container."""
    env: dict[str, str] = {}
    nodes: dict[str, Mapping[str, Any]] = {}
    mounts: dict[str, Mapping[str, Any]] = {}
    hooks: list[Mapping[str, Any]] = []
    for edit in edits:
        for variable in edit.get("env") or ():
            name = variable.partition("=")[0]
            env[name] = variable  # a dict keeps the first place of a name
        for node in edit.get("deviceNodes") or ():
            nodes.pop(node["path"], None)
            nodes[node["path"]] = node
        for mount in edit.get("mounts") or ():
            mounts.pop(mount["containerPath"], None)
            mounts[mount["containerPath"]] = mount
        hooks.extend(edit.get("hooks") or ())
    out: dict[str, Any] = {}
    if env:
        out["env"] = list(env.values())
    if nodes:
        out["deviceNodes"] = list(nodes.values())
    if mounts:
        out["mounts"] = sorted(mounts.values(), key=lambda m: _depth(m["containerPath"]))
    if hooks:
        out["hooks"] = hooks
    return out


def _depth(path: str) -> int:
    """The CDI library's mount order key: the number of components of the clean path."""
    return len(posixpath.normpath(path).split("/"))


__all__ = ["apply", "devices_by_id", "inject"]
