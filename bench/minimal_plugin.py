"""The baseline of the prepare benchmark: the least a DRA plugin must do, and nothing more.

A small, honest kubelet plugin: a real gRPC server (`grpc.server` on a
thread pool, like the real one) on a real Unix socket, serving
NodePrepareResources and NodeUnprepareResources of DRA v1. Per claim,
Prepare reads the ResourceClaim from the same local cluster directory the
real plugin reads (the same `LocalCluster` code, so YAML parsing costs the
same); writes a CDI spec with the same content as the real plugin's claim
spec (the benchmark hands it one the real plugin wrote as a template: the
device's nodes and hooks, and whatever spec-level edits it has; only the
device names change) as YAML with libyaml's emitter, atomically (temp file,
rename; no fsync, as NVIDIA's plugin and ours write specs); then writes its
checkpoint (JSON of the prepared claims: temp file, fsync, rename, directory
fsync); and answers with one CDI device per allocated device. Unprepare
removes the spec (no fsync) and writes the checkpoint the same way (two
fsyncs). So a cycle is one claim read, one spec write and removal, and two
durable checkpoint writes (four fsyncs). It validates nothing, plans
nothing, has no crash safety beyond atomic files and no locks: the real
plugin's time above this is its overhead.

Run as its own process, as the real plugin is:
`python -m bench.minimal_plugin SOCKET CLUSTER_ROOT CDI_ROOT STATE_DIR TEMPLATE`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import yaml

from dra_driver.files import atomic as fsutil
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin.gen.dra.v1 import api_pb2 as pb2
from kubelet_plugin.gen.dra.v1 import api_pb2_grpc as pb2_grpc

CDI_KIND = "k8s.gpu.nvidia.com/claim"


class MinimalPlugin(pb2_grpc.DRAPluginServicer):
    """Claim read, CDI write, checkpoint write; the reverse on Unprepare."""

    def __init__(
        self, cluster_root: Path, cdi_root: Path, state_dir: Path, template: dict[str, Any]
    ) -> None:
        self._cluster = LocalCluster(cluster_root)
        self._template = template
        self._device_edits = template["devices"][0]["containerEdits"]
        self._cdi_root = cdi_root
        self._checkpoint = state_dir / "checkpoint.json"
        self._prepared: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        cdi_root.mkdir(parents=True, exist_ok=True)
        state_dir.mkdir(parents=True, exist_ok=True)

    def NodePrepareResources(
        self, request: pb2.NodePrepareResourcesRequest, _context: grpc.ServicerContext
    ) -> pb2.NodePrepareResourcesResponse:
        response = pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            obj = self._cluster.get_resource_claim(claim.namespace, claim.name)
            results = obj["status"]["allocation"]["devices"]["results"]
            names = [f"{claim.uid}-{r['device']}" for r in results]
            spec: dict[str, Any] = {
                **self._template,
                "devices": [{"name": n, "containerEdits": self._device_edits} for n in names],
            }
            data = yaml.dump(spec, Dumper=yaml.CSafeDumper, sort_keys=False).encode()
            fsutil.atomic_write(self._spec_path(claim.uid), data, sync=False)
            with self._lock:
                self._prepared[claim.uid] = names
                self._save()
            answer = response.claims[claim.uid]
            for result, name in zip(results, names, strict=True):
                answer.devices.add(
                    request_names=[result["request"]],
                    pool_name=result["pool"],
                    device_name=result["device"],
                    cdi_device_ids=[f"{CDI_KIND}={name}"],
                )
        return response

    def NodeUnprepareResources(
        self, request: pb2.NodeUnprepareResourcesRequest, _context: grpc.ServicerContext
    ) -> pb2.NodeUnprepareResourcesResponse:
        response = pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            fsutil.remove_file(self._spec_path(claim.uid), sync=False)
            with self._lock:
                self._prepared.pop(claim.uid, None)
                self._save()
            response.claims[claim.uid].SetInParent()
        return response

    def _spec_path(self, uid: str) -> Path:
        return self._cdi_root / f"k8s.gpu.nvidia.com-claim_{uid}.yaml"

    def _save(self) -> None:
        fsutil.atomic_write(self._checkpoint, json.dumps(self._prepared).encode(), mode=0o600)


def main(argv: list[str]) -> int:
    socket, cluster_root, cdi_root, state_dir, template = (Path(a) for a in argv)
    socket.parent.mkdir(parents=True, exist_ok=True)
    server = grpc.server(ThreadPoolExecutor(max_workers=16))
    pb2_grpc.add_DRAPluginServicer_to_server(
        MinimalPlugin(cluster_root, cdi_root, state_dir, json.loads(template.read_text())), server
    )
    server.add_insecure_port(f"unix://{os.path.abspath(socket)}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("serving", flush=True)
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
