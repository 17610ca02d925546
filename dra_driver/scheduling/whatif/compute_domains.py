"""ComputeDomain rules the scheduler does not know, and why a pod gets no IMEX channel.

The scheduler sees `channel-0` as one device per node and allocates it like any
other. Two rules decide whether the channel it allocates ever works, and the
scheduler knows neither (CD-DESIGN.md points 2 and 3):

- **one ComputeDomain per node**: a node runs one IMEX daemon, so its CD
  kubelet plugin refuses to prepare a channel claim of a second domain while a
  claim of the first is prepared there. Where `channel-0` is published with
  `allowMultipleAllocations` and the cluster has DRAConsumableCapacity (beta
  from Kubernetes 1.36), pods of one domain share a node's channel, and the
  scheduler can just as well put another domain's pod there: its claim is
  allocated, its pod never starts. Without the gate a channel claim holds
  `channel-0` alone, so two domains never meet on a node, nor two pods of one.
- **at most `MAX_NODES_PER_IMEX_DOMAIN` (18) nodes of one domain per clique**:
  the controller gives a 19th node no IMEX index, so its channel never gets
  ready.

`DomainRules` is the simulation's model of both (an `engine.NodeChecks`: a
channel claim allocated where a rule refuses it leaves its pod not placed,
with the reason), and says why a pod's channel claim fits on no node
(`why_unfit`) in the words an admin needs: the nodes that publish no channel
and why (no multi-node fabric, a fabric not ready: the `withheld` reasons of
`dra_driver.compute_domain.devices`), nodes serving another domain, a full
clique, nodes whose channel the domain's other pods hold. A domain whose pods
land in two cliques is allowed (one IMEX domain per clique, as NVIDIA): those
pods get their channels but no NVLink between the cliques; that is not a
placement failure, so it is a note (`split_domains`, `clique_note`), not a
reason.

Pure: the rules read the slices, the claims and the ComputeDomains given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.compute_domain.api import ComputeDomain
from dra_driver.compute_domain.membership import MAX_NODES_PER_IMEX_DOMAIN
from dra_driver.compute_domain.names import CHANNEL_DEVICE_CLASS, CHANNEL_TYPE, DRIVER_NAME
from dra_driver.kube.objects import Obj
from dra_driver.node.devices import CLIQUE_ATTRIBUTE
from dra_driver.scheduling.allocator import Features, Node

_CHANNEL_CONFIG: Final = "ComputeDomainChannelConfig"
_NO_DEVICES: Final = f"publishes no {DRIVER_NAME} devices"
_MAX_NAMES: Final = 3


@dataclass(frozen=True)
class ChannelDevice:
    """A published channel device: where it is, its clique, whether claims may share it."""

    node: str
    pool: str
    name: str
    clique: str
    allow_multiple: bool


def channel_domain(claim: Mapping[str, Any]) -> str | None:
    """The domain UID of a channel claim ("" when it asks for a channel without one), or None
    when the claim asks for no IMEX channel."""
    devices = (claim.get("spec") or {}).get("devices") or {}
    wants_channel = False
    for request in devices.get("requests") or []:
        if not isinstance(request, Mapping):
            continue
        exactly = request.get("exactly") or {}
        alternatives = [exactly, *(request.get("firstAvailable") or [])]
        if any(
            isinstance(a, Mapping) and a.get("deviceClassName") == CHANNEL_DEVICE_CLASS
            for a in alternatives
        ):
            wants_channel = True
    domain = ""
    for config in devices.get("config") or []:
        opaque = (config or {}).get("opaque") or {}
        parameters = opaque.get("parameters") or {}
        if opaque.get("driver") == DRIVER_NAME and parameters.get("kind") == _CHANNEL_CONFIG:
            wants_channel = True
            domain = str(parameters.get("domainID") or "")
    return domain if wants_channel else None


class DomainRules:
    """The one-domain-per-node and clique-size rules (see the module docstring)."""

    def __init__(
        self,
        *,
        domains: Sequence[ComputeDomain],
        slices: Iterable[Mapping[str, Any]],
        claims: Mapping[str, Obj],
        withheld: Mapping[str, Sequence[str]] | None = None,
        features: Features | None = None,
        max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN,
    ) -> None:
        self._refs = {domain.uid: domain.ref for domain in domains if domain.uid}
        self._num_nodes = {domain.uid: domain.spec.num_nodes for domain in domains if domain.uid}
        self._withheld = dict(withheld or {})
        self._features = features or Features()
        self._max = max_nodes
        self._channels: dict[tuple[str, str], ChannelDevice] = {}
        self._node_channels: dict[str, list[ChannelDevice]] = {}
        for obj in slices:
            spec = obj.get("spec") or {}
            if spec.get("driver") != DRIVER_NAME or not spec.get("nodeName"):
                continue
            node, pool = str(spec["nodeName"]), str((spec.get("pool") or {}).get("name") or "")
            for device in spec.get("devices") or []:
                attributes = device.get("attributes") or {}
                if (attributes.get("type") or {}).get("string") != CHANNEL_TYPE:
                    continue
                clique_value = attributes.get(CLIQUE_ATTRIBUTE) or attributes.get(
                    f"{DRIVER_NAME}/{CLIQUE_ATTRIBUTE}"
                )
                clique = (clique_value or {}).get("string") or ""
                channel = ChannelDevice(
                    node,
                    pool,
                    str(device.get("name")),
                    str(clique),
                    bool(device.get("allowMultipleAllocations")),
                )
                self._channels[(pool, channel.name)] = channel
                self._node_channels.setdefault(node, []).append(channel)
        self._serving: dict[str, str] = {}  # node -> domain UID
        self._pods: dict[tuple[str, str], list[str]] = {}  # (domain, node) -> claim keys
        self._members: dict[tuple[str, str], list[str]] = {}  # (domain, clique) -> nodes
        for key, claim in claims.items():
            if _allocation(claim):
                held = self._allocated_channel(claim)
                domain = channel_domain(claim)
                if held is not None and domain is not None:
                    self._commit(held, domain, key)

    def ref(self, domain: str) -> str:
        """`ComputeDomain ns/name` of a domain UID (the UID where no such domain was given)."""
        if not domain:
            return "a ComputeDomain with no domainID"
        return self._refs.get(domain, f"the ComputeDomain with UID {domain}")

    # ------------------------------------------------------------ engine.NodeChecks

    def refusal(self, node: str, claim: Mapping[str, Any], *, commit: bool = True) -> str | None:
        channel = self._allocated_channel(claim)
        domain = channel_domain(claim)
        if channel is None or domain is None or channel.node != node:
            return None
        serving = self._serving.get(channel.node)
        if serving is not None and serving != domain:
            text = (
                f"{channel.node} already serves {self.ref(serving)} "
                f"({self._holders(serving, channel.node)}); a node runs one IMEX daemon, so it "
                f"serves one ComputeDomain at a time, and {self.ref(domain)}'s channel is "
                "prepared there only once those pods are gone"
            )
            if channel.allow_multiple and self._features.consumable_capacity:
                text += (
                    " (the scheduler does not know this rule: where a domain's pods share "
                    "their node's channel it may put another domain's pod there too; keep "
                    "domains apart with node affinity)"
                )
            return text
        meta = claim.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        full = self._full(domain, channel)
        if full:
            if commit:
                # The plugin made the node a member before it waits for an index that never
                # comes: the node serves the domain (no other may come), outside the clique.
                self._serving[channel.node] = domain
                self._pods.setdefault((domain, channel.node), []).append(key)
            return full
        if commit:
            self._commit(channel, domain, key)
        return None

    def withdrawn(self, node: str) -> set[tuple[str, str, str]]:
        del node
        return set()

    # ------------------------------------------------------------ why no node fits

    def why_unfit(self, claims: Sequence[Obj], nodes: Sequence[Node]) -> str | None:
        """Why the channel claim among `claims` fits on none of `nodes`, or None when a
        channel is not what stops it (another claim, or no channel claim at all)."""
        domain = next((d for c in claims if (d := channel_domain(c)) is not None), None)
        if domain is None or not nodes:
            return None
        situations: dict[str, list[str]] = {}
        withheld_only = True
        for node in nodes:
            situation, withheld = self._situation(domain, node.name)
            if situation is None:
                return None
            withheld_only = withheld_only and withheld
            situations.setdefault(situation, []).append(node.name)
        parts = "; ".join(_with_names(text, names) for text, names in situations.items())
        if withheld_only:
            where = "no node publishes" if len(nodes) > 1 else "the node publishes no"
            return f"{where} {DRIVER_NAME} devices: {parts}"
        return f"no node can give {self.ref(domain)}'s pod an IMEX channel: {parts}"

    def _situation(self, domain: str, node: str) -> tuple[str | None, bool]:
        """How `node` stands for a channel claim of `domain`: a text with `{nodes}` for the
        names (None: the channel would do), and whether it publishes no channel at all."""
        channels = self._node_channels.get(node)
        if not channels:
            reasons = list(self._withheld.get(node) or [_NO_DEVICES])
            more = f" (and {len(reasons) - 1} more like it)" if len(reasons) > 1 else ""
            return "{nodes}: " + reasons[0] + more, True
        channel = channels[0]
        serving = self._serving.get(node)
        if serving is not None and serving != domain:
            return (
                "{nodes} already {serve} "
                + f"{self.ref(serving)} (one IMEX daemon per node: one ComputeDomain at a time)",
                False,
            )
        full = self._full(domain, channel)
        if full:
            return "{nodes}: " + full, False
        shared = channel.allow_multiple and self._features.consumable_capacity
        if serving == domain and not shared:
            why = (
                "channel-0 takes one claim per node without DRAConsumableCapacity (on from "
                "Kubernetes 1.36, where a domain's pods share their node's channel)"
                if channel.allow_multiple
                else "channel-0 takes one claim per node"
            )
            return (
                "{nodes} already {give} "
                + f"{self.ref(domain)}'s other pods their channel ({why})",
                False,
            )
        return None, False

    # ------------------------------------------------------------ cliques apart

    def clique_note(self, claims: Sequence[Obj], node: str) -> str | None:
        """What a pod whose channel claim is among `claims` gets on `node` when the domain's
        other pods are in other cliques only: a channel, but no NVLink to them."""
        domain = next((d for c in claims if (d := channel_domain(c)) is not None), None)
        channels = self._node_channels.get(node)
        if domain is None or not channels or not channels[0].clique:
            return None
        clique = channels[0].clique
        others = {c: nodes for (d, c), nodes in self._members.items() if d == domain and nodes}
        if not others or clique in others:
            return None
        where = "; ".join(f"clique {c}: {_names(nodes)}" for c, nodes in sorted(others.items()))
        return (
            f"{self.ref(domain)}'s other pods are in another NVLink clique ({where}); on {node} "
            f"(clique {clique}) this pod gets a channel of the domain's IMEX domain in that "
            "clique, with no NVLink to them (one IMEX domain per clique)"
        )

    def split_domains(self) -> list[str]:
        """One line per domain whose pods were placed in more than one clique, and per
        domain whose pods are on fewer nodes than its `numNodes` (never Ready)."""
        cliques: dict[str, dict[str, list[str]]] = {}
        for (domain, clique), nodes in self._members.items():
            cliques.setdefault(domain, {})[clique] = nodes
        lines = [
            f"{self.ref(domain)} spans {len(found)} NVLink cliques ("
            + "; ".join(f"{clique}: {_names(nodes)}" for clique, nodes in sorted(found.items()))
            + "): its pods in different cliques have no NVLink between them (one IMEX domain "
            "per clique)"
            for domain, found in cliques.items()
            if len(found) > 1
        ]
        for domain, found in cliques.items():
            wanted = self._num_nodes.get(domain, 0)
            count = sum(len(nodes) for nodes in found.values())
            if count < wanted:
                lines.append(
                    f"{self.ref(domain)} has numNodes {wanted}, but its pods are on "
                    f"{_plural(count, 'node')}: its pods get their channels, and its Ready "
                    f"condition stays False (WaitingForNodes) until {wanted} nodes have joined "
                    "(numNodes is deprecated; 0 waits for no count)"
                )
        return lines

    # ------------------------------------------------------------ bookkeeping

    def _full(self, domain: str, channel: ChannelDevice) -> str:
        if not channel.clique:
            return ""
        members = self._members.get((domain, channel.clique), [])
        if channel.node in members or len(members) < self._max:
            return ""
        return (
            f"clique {channel.clique} already has {len(members)} nodes of {self.ref(domain)} "
            f"({_names(members)}), the most one IMEX domain spans "
            f"(--max-nodes-per-imex-domain {self._max}): the controller gives {channel.node} no "
            "IMEX index, so its channel never becomes ready (condition CliqueFull); use nodes "
            "of another clique, or fewer nodes"
        )

    def _holders(self, domain: str, node: str) -> str:
        keys = self._pods.get((domain, node), [])
        shown = ", ".join(keys[:_MAX_NAMES]) + (" ..." if len(keys) > _MAX_NAMES else "")
        return f"channel claim {shown}" if len(keys) == 1 else f"channel claims {shown}"

    def _commit(self, channel: ChannelDevice, domain: str, key: str) -> None:
        self._serving.setdefault(channel.node, domain)  # the first claim prepared there
        self._pods.setdefault((domain, channel.node), []).append(key)
        if channel.clique:
            members = self._members.setdefault((domain, channel.clique), [])
            if channel.node not in members:
                members.append(channel.node)

    def _allocated_channel(self, claim: Mapping[str, Any]) -> ChannelDevice | None:
        results = ((_allocation(claim) or {}).get("devices") or {}).get("results") or []
        for result in results:
            if isinstance(result, Mapping) and result.get("driver") == DRIVER_NAME:
                found = self._channels.get((str(result.get("pool")), str(result.get("device"))))
                if found is not None:
                    return found
        return None


def _allocation(claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
    allocation = (claim.get("status") or {}).get("allocation")
    return allocation if allocation else None


def _names(names: Sequence[str]) -> str:
    if len(names) <= _MAX_NAMES:
        return ", ".join(names)
    return f"{', '.join(names[:_MAX_NAMES])} and {len(names) - _MAX_NAMES} more"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _with_names(text: str, names: Sequence[str]) -> str:
    one = len(names) == 1
    return (
        text.replace("{serve}", "serves" if one else "serve")
        .replace("{give}", "gives" if one else "give")
        .replace("{nodes}", _names(names) if one else f"{_names(names)} ({len(names)} nodes)")
    )
