"""`--cluster` parsing: `kube`, `local:DIR`, or a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import ConfigError
from dra_driver.kube.access import LocalCluster, open_cluster


def test_local_spec_opens_a_directory_store(tmp_path: Path) -> None:
    cluster = open_cluster(f"local:{tmp_path / 'store'}")
    assert isinstance(cluster, LocalCluster)
    assert cluster.root == tmp_path / "store"
    assert (tmp_path / "store" / "resourceslices").is_dir()
    assert cluster.server_version() is None


@pytest.mark.parametrize("spec", ["local:", "kubernetes", "", "file:/tmp/x"])
def test_bad_spec_is_a_config_error_naming_it(spec: str) -> None:
    with pytest.raises(ConfigError, match="--cluster"):
        open_cluster(spec)
