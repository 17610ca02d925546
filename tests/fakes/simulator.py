"""Fakes for `dra-gpu simulate` and `explain`: an apiserver with Nodes, Pods and templates."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from tests.fakes.apiserver import FakeApiServer, _ApiFailure


class FakeClusterApiServer(FakeApiServer):
    """`FakeApiServer` that also answers GETs for Nodes (list), Pods and
    ResourceClaimTemplates (get), which tests add with `add_object`."""

    def __init__(self, *, version: tuple[str, str] = ("1", "34")) -> None:
        super().__init__(version=version)
        self._core: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add_object(self, obj: Mapping[str, Any]) -> None:
        """Store a Node, Pod or ResourceClaimTemplate (as the apiserver would return it)."""
        meta = obj.get("metadata") or {}
        key = (str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))
        with self._lock:
            self._core[key] = json.loads(json.dumps(obj))

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], raw_body: bytes
    ) -> tuple[int, dict[str, Any]]:
        parts = [unquote(part) for part in path.strip("/").split("/")]
        if method == "GET" and parts == ["api", "v1", "nodes"]:
            items = [obj for (kind, _, _), obj in sorted(self._core.items()) if kind == "Node"]
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items}
        found: tuple[str, str, str] | None = None
        if (
            method == "GET"
            and len(parts) == 6
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "pods"
        ):
            found = ("Pod", parts[3], parts[5])
        if (
            method == "GET"
            and len(parts) == 7
            and parts[:4] == ["apis", "resource.k8s.io", "v1", "namespaces"]
            and parts[5] == "resourceclaimtemplates"
        ):
            found = ("ResourceClaimTemplate", parts[4], parts[6])
        if found is not None:
            obj = self._core.get(found)
            if obj is None:
                raise _ApiFailure(404, "NotFound", f'{found[0]} "{found[2]}" not found')
            return 200, obj
        return super()._route(method, path, query, raw_body)

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig pointing at this server (no auth) and return its path."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config), encoding="utf-8")
        return path
