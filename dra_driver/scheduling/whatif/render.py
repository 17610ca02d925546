"""How `dra-gpu simulate` shows its placements: a table for people, YAML for tools.

`-o yaml` prints one list with exactly these fields per item, which other
tools read, so they never change shape:

    - pod: namespace/name          # "claim:namespace/name" for a pseudo-pod
      placed: true
      node: dgx-h100-0             # "" when not placed
      reason: ""                   # why not placed; "" when placed
      claims:
        - claim: namespace/name
          results: [{request, driver, pool, device}, ...]
          config: [...]            # status.allocation.devices.config, as is
      extendedResourceClaimStatus: # only for a pod served extended resources
        resourceClaimName: name    #   through DRA (KEP-5004), as the scheduler
        requestMappings: [...]     #   writes it into the pod's status

The table shows one row per claim (a pod without claims gets one row), the
devices per request, the configs the allocation carries, the reason for
every pod that was not placed, and a closing summary line.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME, text_table
from dra_driver.kube import yaml_io
from dra_driver.kube.objects import Obj
from dra_driver.scheduling.whatif.engine import ClaimOutcome, Placement

_COLUMN_CAP = 36
_MIN_WRAP = 30  # the DEVICES column wraps at the table's width, but never narrower


def placement_records(placements: Sequence[Placement]) -> list[Obj]:
    """The `-o yaml` items (see the module docstring)."""
    records: list[Obj] = []
    for placement in placements:
        record: Obj = {
            "pod": placement.item.key,
            "placed": placement.placed,
            "node": placement.node,
            "reason": placement.reason,
            "claims": [_claim_record(claim) for claim in placement.claims],
        }
        status = _extended_status(placement)
        if status:
            record["extendedResourceClaimStatus"] = status
        records.append(record)
    return records


def _extended_status(placement: Placement) -> Mapping[str, Any]:
    pod = placement.item.pod or {}
    return dict((pod.get("status") or {}).get("extendedResourceClaimStatus") or {})


def _extended_notes(placement: Placement, claim: ClaimOutcome) -> list[str]:
    """ "nvidia.com/gpu of container main: container-0-request-0" for the special claim."""
    status = _extended_status(placement)
    name = claim.key.partition("/")[2]
    if not status or status.get("resourceClaimName") != name:
        return []
    return [
        f"{entry.get('resourceName')} of container {entry.get('containerName')}: "
        f"{entry.get('requestName')}"
        for entry in status.get("requestMappings") or []
    ]


def _claim_record(claim: ClaimOutcome) -> Obj:
    devices = (claim.allocation or {}).get("devices") or {}
    return {
        "claim": claim.key,
        "results": [
            {
                "request": result.get("request"),
                "driver": result.get("driver"),
                "pool": result.get("pool"),
                "device": result.get("device"),
            }
            for result in devices.get("results") or []
        ],
        "config": [dict(entry) for entry in devices.get("config") or []],
    }


def render_yaml(placements: Sequence[Placement]) -> str:
    return yaml_io.dump(placement_records(placements), sort_keys=False, width=1000)


def render_json(placements: Sequence[Placement]) -> str:
    """The `-o yaml` records as JSON."""
    return json.dumps(placement_records(placements), indent=2) + "\n"


def render_table(placements: Sequence[Placement], *, node_count: int, wide: bool = False) -> str:
    """The human view: a row per claim, reasons for unplaced pods, a summary line.

    The table fits `text_table.WIDTH` columns: a claim made from a template is
    shown by the pod's name for it (`gpu`, not `trainer-0-gpu-7x2kq`), and the
    device lists, reasons and configs wrap. `wide` shows the claims' own
    names and nothing wrapped.
    """
    rows: list[list[str]] = []
    notes: dict[int, list[str]] = {}
    for placement in placements:
        node = placement.node or "-"
        claims = placement.claims or []
        if not placement.placed:
            first_claim = _claim_cell(claims[0], placement, wide) if claims else ""
            rows.append([placement.item.key, node, first_claim, f"not placed: {placement.reason}"])
            continue
        if not claims:
            rows.append([placement.item.key, node, "", "(no claims)"])
            continue
        for position, claim in enumerate(claims):
            pod_cell = placement.item.key if position == 0 else ""
            node_cell = node if position == 0 else ""
            rows.append(
                [
                    pod_cell,
                    node_cell,
                    _claim_cell(claim, placement, wide),
                    _devices(claim, placement.node),
                ]
            )
            extended = [f"extended resource {text}" for text in _extended_notes(placement, claim)]
            configs = [f"config: {text}" for text in _configs(claim)]
            if extended or configs:
                notes[len(rows) - 1] = extended + configs
    header = ["POD", "NODE", "CLAIM", "DEVICES"]
    widths = [
        min(max(len(row[column]) for row in [header, *rows]), _COLUMN_CAP) for column in range(3)
    ]
    room = text_table.WIDTH - sum(widths) - 3 * len(text_table.GAP)
    wrap = None if wide else max(room, _MIN_WRAP)
    lines = [_line(header, widths)]
    for index, row in enumerate(rows):
        text = row[3] if wrap is None else "\n".join(_wrap(row[3], wrap))
        first, *rest = text.split("\n")
        lines.append(_line([*row[:3], first], widths))
        indent = " " * (sum(widths) + 3 * len(text_table.GAP))
        lines.extend(f"{indent}{more}" for more in rest)
        for note in notes.get(index, []):
            pieces = [note] if wrap is None else _wrap(note, wrap)
            lines.extend(f"{indent}{piece}" for piece in pieces)
    lines.append("")
    lines.append(summary_line(placements, node_count=node_count))
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width`, broken at spaces only (names keep their hyphens)."""
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]


def _line(row: Sequence[str], widths: Sequence[int]) -> str:
    cells = [f"{row[column]:<{widths[column]}}" for column in range(3)]
    return text_table.GAP.join([*cells, row[3]]).rstrip()


def _claim_cell(claim: ClaimOutcome, placement: Placement, wide: bool = True) -> str:
    namespace = placement.item.namespace
    name = claim.key.removeprefix(f"{namespace}/")
    if not wide and claim.pod_claim:
        name = claim.pod_claim  # the pod's own name for it; the claim's name is in -o wide
    if claim.state in ("shared", "pre-allocated"):
        return f"{name} ({claim.state})"
    return name


def _devices(claim: ClaimOutcome, node: str) -> str:
    results = ((claim.allocation or {}).get("devices") or {}).get("results") or []
    if not results:
        return "(no devices)" if claim.allocation is not None else "(not allocated)"
    by_request: dict[str, list[str]] = {}
    for result in results:
        by_request.setdefault(str(result.get("request")), []).append(_device_text(result, node))
    return "; ".join(f"{request}: {', '.join(devices)}" for request, devices in by_request.items())


def _device_text(result: Mapping[str, Any], node: str) -> str:
    driver, pool, device = result.get("driver"), result.get("pool"), result.get("device")
    if driver != DEFAULT_DRIVER_NAME:
        return f"{driver}/{pool}/{device}"
    if pool != node:
        return f"{pool}/{device}"
    return str(device)


def _configs(claim: ClaimOutcome) -> list[str]:
    entries = ((claim.allocation or {}).get("devices") or {}).get("config") or []
    texts: list[str] = []
    for entry in entries:
        opaque = entry.get("opaque") or {}
        parameters = dict(opaque.get("parameters") or {})
        kind = parameters.pop("kind", "")
        parameters.pop("apiVersion", None)
        requests = entry.get("requests") or []
        scope = f" for {', '.join(requests)}" if requests else ""
        body = json.dumps(parameters, separators=(", ", ": "), sort_keys=True) if parameters else ""
        text = f"{entry.get('source', '')} {opaque.get('driver', '')} {kind}{scope} {body}".strip()
        texts.append(" ".join(text.split()))
    return texts


def summary_line(placements: Sequence[Placement], *, node_count: int) -> str:
    """ "6 pods: 5 placed, 1 not placed; 12 devices allocated on 2 of 3 nodes"."""
    pods = [p for p in placements if p.item.pod is not None]
    pseudo = [p for p in placements if p.item.pod is None]
    parts: list[str] = []
    if pods or not pseudo:
        placed = sum(1 for p in pods if p.placed)
        parts.append(f"{len(pods)} pods: {placed} placed, {len(pods) - placed} not placed")
    if pseudo:
        allocated = sum(1 for p in pseudo if p.placed)
        parts.append(
            f"{len(pseudo)} standalone claims: {allocated} allocated, "
            f"{len(pseudo) - allocated} not allocated"
        )
    devices: set[tuple[str, str, str]] = set()
    nodes: set[str] = set()
    for placement in placements:
        if not placement.placed:
            continue
        for claim in placement.claims:
            results = ((claim.allocation or {}).get("devices") or {}).get("results") or []
            for result in results:
                devices.add(
                    (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
                )
            if results:
                nodes.add(placement.node)
    parts.append(f"{len(devices)} devices allocated on {len(nodes)} of {node_count} nodes")
    return "; ".join(parts)
