"""`bench.minimal_plugin` in a child process, with a kubelet-like client for its socket."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Self

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.errors import PluginError
from kubelet_plugin.kubelet_client import KubeletClient
from kubelet_plugin.socket_names import dra_socket_path


class MinimalPluginProcess:
    """Runs the baseline plugin on `cluster_root` (the claims it reads) in a work directory.

    `spec_template` is a CDI spec the real plugin wrote, whose content the
    baseline writes for every claim.
    """

    def __init__(
        self, cluster_root: Path, spec_template: dict[str, Any], *, prefix: str = "dra-gpu-min-"
    ) -> None:
        self.work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self.template = self.work / "spec-template.json"
        self.template.write_text(json.dumps(spec_template))
        kubelet_root = self.work / "kubelet"
        self.socket = dra_socket_path(kubelet_root, DEFAULT_DRIVER_NAME)
        self.cluster_root = cluster_root
        self.client = KubeletClient(kubelet_root, DEFAULT_DRIVER_NAME, timeout=20.0)
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        args = [
            sys.executable,
            "-m",
            "bench.minimal_plugin",
            str(self.socket),
            str(self.cluster_root),
            str(self.work / "cdi"),
            str(self.work / "state"),
            str(self.template),
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line != "serving\n":
            self.close()
            raise PluginError(f"the minimal plugin did not start (said {line!r})")
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
            self.process.wait(timeout=15)
            if self.process.stdout is not None:
                self.process.stdout.close()
        shutil.rmtree(self.work, ignore_errors=True)
