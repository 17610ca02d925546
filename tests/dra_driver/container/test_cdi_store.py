"""The CDI spec directory: atomic YAML files, orphan listing, other vendors left alone."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.container import cdi
from dra_driver.container.cdi import CdiDevice
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import CdiError
from tests.fakes.readonly import read_only

UID_A = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"
UID_B = "c3d4e5f6-0000-4000-8000-000000000001"


def spec_for(uid: str, minor: int = 0) -> dict[str, Any]:
    return cdi.claim_spec(
        uid, [CdiDevice(f"gpu-{minor}", cdi.gpu_edits(minor))], cdi.common_edits(234)
    )


def test_write_read_remove(tmp_path: Path) -> None:
    store = CdiStore(tmp_path / "cdi")
    spec = spec_for(UID_A)
    path = store.write(UID_A, spec)
    assert path == tmp_path / "cdi" / f"k8s.gpu.nvidia.com-claim_{UID_A}.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert yaml.safe_load(path.read_text()) == spec
    assert store.read(UID_A) == spec
    assert store.remove(UID_A) is True
    assert store.read(UID_A) is None
    assert store.remove(UID_A) is False


def test_yaml_keeps_field_order_for_humans(tmp_path: Path) -> None:
    path = CdiStore(tmp_path).write(UID_A, spec_for(UID_A))
    assert path.read_text().startswith("cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\n")


def test_rewrite_replaces_content(tmp_path: Path) -> None:
    store = CdiStore(tmp_path)
    store.write(UID_A, spec_for(UID_A, 0))
    store.write(UID_A, spec_for(UID_A, 1))
    read = store.read(UID_A)
    assert read is not None
    assert read["devices"][0]["name"] == f"{UID_A}-gpu-1"
    assert len(list(tmp_path.iterdir())) == 1


def test_claim_uids_lists_only_our_specs(tmp_path: Path) -> None:
    store = CdiStore(tmp_path)
    assert CdiStore(tmp_path / "missing").claim_uids() == set()
    store.write(UID_A, spec_for(UID_A))
    store.write(UID_B, spec_for(UID_B))
    (tmp_path / "nvidia.yaml").write_text("other vendor")
    (tmp_path / "k8s.gpu.nvidia.com-claim_x.json").write_text("{}")
    (tmp_path / f".tmp-k8s.gpu.nvidia.com-claim_{UID_A}.yaml.abc").write_text("partial")
    assert store.claim_uids() == {UID_A, UID_B}


def test_remove_temp_files_leaves_everything_else(tmp_path: Path) -> None:
    store = CdiStore(tmp_path)
    store.write(UID_A, spec_for(UID_A))
    (tmp_path / "nvidia.yaml").write_text("other vendor")
    (tmp_path / ".tmp-nvidia.yaml.abc").write_text("another writer's temp file")
    litter = tmp_path / f".tmp-k8s.gpu.nvidia.com-claim_{UID_B}.yaml.k3j2"
    litter.write_text("partial")
    assert store.remove_temp_files() == [litter]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".tmp-nvidia.yaml.abc", "nvidia.yaml", cdi.spec_file_name(UID_A)]
    )


def test_write_refuses_invalid_or_foreign_specs(tmp_path: Path) -> None:
    store = CdiStore(tmp_path)
    foreign = {**spec_for(UID_A), "kind": "nvidia.com/gpu"}
    with pytest.raises(CdiError, match=r"kind is 'nvidia\.com/gpu'"):
        store.write(UID_A, foreign)
    bad = {**spec_for(UID_A), "cdiVersion": "0.3.0"}
    with pytest.raises(CdiError, match="too low"):
        store.write(UID_A, bad)
    assert list(tmp_path.iterdir()) == []


def test_read_reports_garbage_with_path(tmp_path: Path) -> None:
    store = CdiStore(tmp_path)
    store.path_for(UID_A).write_text("devices: [unclosed\n")
    with pytest.raises(CdiError, match=f"claim_{UID_A}.yaml: not valid YAML"):
        store.read(UID_A)
    store.path_for(UID_A).write_text("- a list\n")
    with pytest.raises(CdiError, match="not a CDI spec"):
        store.read(UID_A)


def test_write_failure_when_root_is_a_file(tmp_path: Path) -> None:
    root = tmp_path / "file"
    root.write_text("not a directory")
    with pytest.raises(CdiError, match="cannot write CDI spec"):
        CdiStore(root).write(UID_A, spec_for(UID_A))


def test_a_record_rides_in_the_first_line_and_the_spec_stays_plain(tmp_path: Path) -> None:
    store = CdiStore(tmp_path)
    spec = cdi.claim_spec(
        UID_RECORD, [cdi.CdiDevice("gpu-0", cdi.gpu_edits(0))], cdi.ContainerEdits()
    )
    store.write(UID_RECORD, spec, record='{"a": 1}')
    assert store.read_record(UID_RECORD) == '{"a": 1}'
    assert store.read(UID_RECORD) == spec  # parsers skip the comment
    store.write(UID_RECORD, spec)
    assert store.read_record(UID_RECORD) is None
    assert store.read_record("0ther000-0000-4000-8000-000000000000") is None
    with pytest.raises(CdiError, match="the record must be one line"):
        store.write(UID_RECORD, spec, record="two\nlines")


UID_RECORD = "5ec0d000-0000-4000-8000-000000000001"


OWNER = "gpu.nvidia.com@/var/lib/kubelet/plugins/gpu.nvidia.com"
OTHER_OWNER = "gpu.nvidia.com@/var/lib/other-kubelet/plugins/gpu.nvidia.com"


def test_specs_carry_their_owner_and_a_store_deletes_only_its_own(tmp_path: Path) -> None:
    ours = CdiStore(tmp_path, owner=OWNER)
    theirs = CdiStore(tmp_path, owner=OTHER_OWNER)
    ours.write(UID_A, spec_for(UID_A), record='{"a": 1}')
    theirs.write(UID_B, spec_for(UID_B))
    legacy = CdiStore(tmp_path)
    legacy.write(UID_RECORD, spec_for(UID_RECORD))  # from a dra-gpu before owners
    assert ours.owner_of(UID_A) == OWNER
    assert ours.read_record(UID_A) == '{"a": 1}'
    assert ours.read(UID_A) == spec_for(UID_A)
    assert ours.claim_uids() == {UID_A, UID_RECORD}
    assert theirs.claim_uids() == {UID_B, UID_RECORD}
    assert ours.remove(UID_B) is False
    assert theirs.path_for(UID_B).exists()
    assert ours.remove(UID_A) is True
    assert ours.remove(UID_RECORD) is True
    assert CdiStore(tmp_path).claim_uids() == {UID_B}


@pytest.mark.parametrize(
    "uid",
    ["../../etc/passwd", "a" * 300, "", "uid with spaces", "\n", "-leading-dash"],
)
def test_removing_what_cannot_be_ours_is_nothing_to_do(tmp_path: Path, uid: str) -> None:
    assert CdiStore(tmp_path, owner=OWNER).remove(uid) is False


def test_removing_a_missing_spec_from_a_read_only_directory_is_nothing_to_do(
    tmp_path: Path,
) -> None:
    store = CdiStore(tmp_path, owner=OWNER)
    store.write(UID_A, spec_for(UID_A))
    with read_only(tmp_path):
        assert store.remove(UID_B) is False
        with pytest.raises(CdiError, match="cannot remove CDI spec"):
            store.remove(UID_A)
        with pytest.raises(CdiError, match="cannot write CDI spec"):
            store.write(UID_B, spec_for(UID_B))
    assert store.remove(UID_A) is True
