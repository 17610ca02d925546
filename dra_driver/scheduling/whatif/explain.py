"""`dra-gpu explain` output: why a claim (or a pod's claims) does or does not fit.

A pod stuck Pending says "cannot allocate all claims" and nothing else. The
report built here answers in four parts, readable on a terminal even for
hundreds of nodes:

1. what is asked: each claim and request, with its class and selectors (and
   claims that are already allocated, with their devices);
2. the outcome and, when nothing fits, one line saying what would make it fit
   (`Diagnosis.summary`);
3. one line per group of nodes in the same situation ("500 nodes: request
   gpu: 0 of 8 gpu.nvidia.com devices match"), best nodes first;
4. the allocator's own trace for the best node (every node with
   `verbose`): per request, devices grouped by the reason they were rejected
   (`dra_driver.scheduling.allocator.ExplainRecorder`), so identical reasons are
   printed once with the devices they apply to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.scheduling.allocator import DeviceRef, Explanation, Reason
from dra_driver.scheduling.allocator.requests import ALL
from dra_driver.scheduling.allocator.trace import (
    AlreadyAllocated,
    ClassSelectorFalse,
    CountersExhausted,
    DeviceVerdict,
)
from dra_driver.scheduling.whatif.diagnosis import (
    Diagnoser,
    Diagnosis,
    NodeDiagnosis,
    RequestGroup,
    RequestOnNode,
)

_MAX_NODE_GROUPS = 12
_MAX_REASON_GROUPS = 8
_MAX_NAMES = 6


@dataclass(frozen=True)
class AllocatedClaim:
    """A claim of the subject that is allocated already: key, node and allocation."""

    key: str
    node: str
    allocation: Mapping[str, Any]


def render_report(
    *,
    subject: str,
    claims: Sequence[Mapping[str, Any]],
    allocated: Sequence[AllocatedClaim],
    diagnosis: Diagnosis | None,
    diagnoser: Diagnoser,
    verbose: bool = False,
    problem: str = "",
    refused: tuple[str, str] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The whole report (see the module docstring). `diagnosis` is None when every
    claim is allocated; `problem` is set when the subject cannot be scheduled at all;
    `refused` is (node, error) when the node's kubelet plugin would refuse a claim;
    `notes` are printed under a fitting outcome (what the pod gets there that it may not
    expect)."""
    lines = [subject]
    for done in allocated:
        lines.append(
            f"  claim {done.key}: allocated on {done.node or '?'}: {_results(done.allocation)}"
        )
    for claim in claims:
        lines.extend(_claim_lines(claim))
    lines.append("")
    if problem:
        lines.append(f"Outcome: cannot be scheduled: {problem}")
        return "\n".join(lines) + "\n"
    if refused is not None:
        refused_on, error = refused
        lines.append(
            f"Outcome: the scheduler allocates it on {refused_on}, but the node's kubelet plugin "
            "refuses to prepare it"
        )
        lines.append(f"Why: {error}")
        return "\n".join(lines) + "\n"
    if diagnosis is None:
        lines.append("Outcome: every claim is allocated already")
        return "\n".join(lines) + "\n"
    total = len(diagnosis.nodes)
    fitting = diagnosis.fitting
    if diagnosis.error:
        # Not about any node (a selector that fails to evaluate, a missing class): said once.
        lines.append(f"Outcome: error: {diagnosis.error}")
        return "\n".join(lines) + "\n"
    if fitting:
        first = fitting[0].node.name
        lines.append(f"Outcome: fits on {len(fitting)} of {_plural(total, 'node')}; first: {first}")
        lines.extend(f"Note: {note}" for note in notes)
    else:
        where = diagnosis.nodes[0].node.name if total == 1 else f"any of {total} nodes"
        lines.append(f"Outcome: does not fit on {where}")
        lines.append(f"Why: {diagnosis.summary}")
    if not diagnosis.nodes:
        return "\n".join(lines) + "\n"
    lines.append("")
    lines.append("Nodes:")
    lines.extend(_node_groups(diagnosis, verbose=verbose))
    details = diagnosis.ranked() if verbose else diagnosis.ranked()[:1]
    for node in details:
        diagnoser.attach_trace(node, diagnosis.claims)
        lines.append("")
        best = " (best node; --verbose shows every node)" if not verbose and total > 1 else ""
        lines.append(f"Details for {node.node.name}{best}:")
        lines.extend(_details(node, verbose=verbose))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- what is asked


def _claim_lines(claim: Mapping[str, Any]) -> list[str]:
    meta = claim.get("metadata") or {}
    lines = [f"  claim {meta.get('namespace')}/{meta.get('name')}:"]
    devices = (claim.get("spec") or {}).get("devices") or {}
    for request in devices.get("requests") or []:
        name = request.get("name")
        if request.get("firstAvailable"):
            lines.append(f"    request {name}: first available of")
            for sub in request["firstAvailable"]:
                lines.append(f"      {sub.get('name')}: {_ask(sub)}")
        else:
            lines.append(f"    request {name}: {_ask(request.get('exactly') or {})}")
    for constraint in devices.get("constraints") or []:
        scope = ", ".join(constraint.get("requests") or []) or "all requests"
        if constraint.get("matchAttribute"):
            lines.append(f"    constraint: same {constraint['matchAttribute']} ({scope})")
        elif constraint.get("distinctAttribute"):
            lines.append(f"    constraint: distinct {constraint['distinctAttribute']} ({scope})")
    return lines


def _ask(request: Mapping[str, Any]) -> str:
    mode = request.get("allocationMode") or "ExactCount"
    count = "all" if mode == ALL else str(request.get("count") or 1)
    text = f"{count} x {request.get('deviceClassName')}"
    selectors = [
        (selector.get("cel") or {}).get("expression", "")
        for selector in request.get("selectors") or []
    ]
    if selectors:
        text += " where " + " and ".join(" ".join(str(s).split()) for s in selectors)
    if request.get("adminAccess"):
        text += " (admin access)"
    return text


def _results(allocation: Mapping[str, Any]) -> str:
    results = (allocation.get("devices") or {}).get("results") or []
    return (
        ", ".join(f"{r.get('request')}: {r.get('pool')}/{r.get('device')}" for r in results)
        or "no devices"
    )


# ---------------------------------------------------------------- node lines


def node_text(node: NodeDiagnosis) -> str:
    """The situation of one node in a few words (without its name)."""
    if node.fits:
        picked = [_results(result) for result in node.results or []]
        return "fits: " + "; ".join(picked)
    if node.error:
        return f"error: {node.error}"
    short = node.short_groups()
    texts = [_short_text(group) for group in short]
    if node.skipped_pools:
        texts.append("; ".join(node.skipped_pools))
    if not texts:
        return "every request has free devices, but not all together"
    return "; ".join(texts)


def _short_text(group: RequestGroup) -> str:
    if len(group.alternatives) > 1:
        texts = "; ".join(_alternative_text(stats) for stats in group.alternatives)
        name = group.label.removeprefix("request ")
        return f"{name}: no alternative fits: {texts}"
    return _alternative_text(group.alternatives[0])


def _alternative_text(stats: RequestOnNode) -> str:
    name = stats.label.removeprefix("request ")
    if stats.errors:
        return f"{name}: {stats.errors[0]}"
    if not stats.examined:
        return f"{name}: no devices"
    if not stats.in_class:
        examined = _plural(len(stats.examined), "device")
        return f"{name}: none of {examined} is in {stats.request.class_name}"
    if not stats.matching:
        return f"{name}: 0 of {stats.in_class} {stats.request.class_name} devices match"
    text = f"{name}: needs {stats.needed}, {len(stats.free)} of {len(stats.matching)} matching free"
    cause = _blocked_summary(stats)
    return f"{text} ({cause})" if cause else text


def _blocked_summary(stats: RequestOnNode) -> str:
    """ "3 taken by ml/a, 1 tainted k=v:NoSchedule"; many holders are counted, not named."""
    taken = 0
    holders: set[str] = set()
    taints: dict[str, int] = {}
    full: list[str] = []
    for _, blocker in stats.blocked:
        if blocker.cause == "capacity":
            full.append(blocker.detail)
        elif blocker.cause in ("taint", "unusable"):
            kind = "tainted" if blocker.cause == "taint" else "unusable:"
            text = f"{kind} {blocker.detail}"
            taints[text] = taints.get(text, 0) + 1
        else:
            taken += 1
            holders.update(blocker.holders or ("another claim",))
    parts: list[str] = []
    if taken:
        named = ", ".join(sorted(holders)) if len(holders) <= 2 else f"{len(holders)} claims"
        parts.append(f"{taken} taken by {named}")
    if full:
        example = full[0] if len(set(full)) == 1 else f"e.g. {full[0]}"
        parts.append(f"{len(full)} shared to capacity: {example}")
    parts.extend(f"{count} {text}" for text, count in sorted(taints.items()))
    return ", ".join(parts)


def _node_groups(diagnosis: Diagnosis, *, verbose: bool) -> list[str]:
    groups: dict[str, list[str]] = {}
    for node in diagnosis.ranked():
        groups.setdefault(node_text(node), []).append(node.node.name)
    lines: list[str] = []
    items = list(groups.items())
    shown = items if verbose else items[:_MAX_NODE_GROUPS]
    for text, names in shown:
        lines.append(f"  {_names(names, verbose=verbose)}: {text}")
    if len(items) > len(shown):
        rest = sum(len(names) for _, names in items[len(shown) :])
        lines.append(
            f"  ... {len(items) - len(shown)} more situations on {_plural(rest, 'node')} "
            "(see --verbose)"
        )
    return lines


def _names(names: Sequence[str], *, verbose: bool) -> str:
    if len(names) == 1:
        return names[0]
    if verbose or len(names) <= 3:
        return f"{', '.join(names)} ({len(names)} nodes)"
    return f"{names[0]}, {names[1]} ... {names[-1]} ({len(names)} nodes)"


# ---------------------------------------------------------------- details


def _details(node: NodeDiagnosis, *, verbose: bool) -> list[str]:
    trace = node.trace
    if trace is None:
        return ["  (no trace)"]
    lines: list[str] = []
    if trace.error:
        lines.append(f"  error: {trace.error}")
    for pool, reason in trace.pools:
        lines.append(f"  pool {pool}: skipped, {reason.describe()}")
    lines.extend(_request_details(trace, node.node.name, verbose=verbose))
    if not lines:
        lines.append("  (no devices were considered)")
    return lines


def _request_details(trace: Explanation, node: str, *, verbose: bool) -> list[str]:
    lines: list[str] = []
    for request in trace.requests:
        lines.append(f"  claim {request.claim}, request {request.request}:")
        lines.extend(f"    note: {note}" for note in request.notes)
        chosen = [v.device for v in request.devices.values() if v.chosen]
        if chosen:
            lines.append(f"    allocated: {_device_list(chosen, node, verbose=True)}")
        groups: dict[str, list[DeviceRef]] = {}
        class_groups: set[str] = set()
        for verdict in request.devices.values():
            if verdict.chosen:
                continue
            if not verdict.reasons:
                groups.setdefault("tried, then released while backtracking", []).append(
                    verdict.device
                )
                continue
            reason = verdict.reasons[0]
            text = _reason_text(reason)
            if isinstance(reason, ClassSelectorFalse):
                class_groups.add(text)
            groups.setdefault(text, []).append(verdict.device)
        if not verbose and len(groups) > _MAX_REASON_GROUPS:
            groups, class_groups = _merged(request.devices.values(), class_groups)
        ordered = sorted(groups.items(), key=lambda item: (item[0] in class_groups, -len(item[1])))
        for text, devices in ordered:
            lines.append(f"    {_plural(len(devices), 'device')}: {text}")
            if item_names := _device_list(devices, node, verbose=verbose):
                lines.append(f"      {item_names}")
    return lines


def _merged(
    verdicts: Iterable[DeviceVerdict], class_groups: set[str]
) -> tuple[dict[str, list[DeviceRef]], set[str]]:
    """Groups by kind of reason instead of exact text (many holders, many counters)."""
    groups: dict[str, list[DeviceRef]] = {}
    merged_class: set[str] = set()
    for verdict in verdicts:
        if verdict.chosen:
            continue
        if not verdict.reasons:
            text = "tried, then released while backtracking"
        else:
            reason = verdict.reasons[0]
            text = _family(reason)
            if _reason_text(reason) in class_groups:
                merged_class.add(text)
        groups.setdefault(text, []).append(verdict.device)
    return groups, merged_class


def _family(reason: Reason) -> str:
    if isinstance(reason, AlreadyAllocated):
        return "already allocated to other claims"
    if isinstance(reason, CountersExhausted):
        return "shared counters used up by other claims' devices"
    return _reason_text(reason)


def _reason_text(reason: Reason) -> str:
    if isinstance(reason, CountersExhausted):
        holders = sorted({consumer.holder for consumer in reason.consumers})
        by = f" by {', '.join(holders)}" if holders else ""
        return (
            f"shared counter {reason.counter_set}/{reason.counter} of {reason.domain} used up{by}"
        )
    return reason.describe()


def _device_list(devices: Sequence[DeviceRef], node: str, *, verbose: bool) -> str:
    names = [ref.device if ref.pool == node else f"{ref.pool}/{ref.device}" for ref in devices]
    if verbose or len(names) <= _MAX_NAMES:
        return ", ".join(names)
    return f"{', '.join(names[:_MAX_NAMES])} and {len(names) - _MAX_NAMES} more"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
