"""LocalCluster specifics: the files on disk, bad files, and several processes at once."""

from __future__ import annotations

import contextlib
import copy
import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.errors import ClusterError
from dra_driver.kube.access import ConflictError, LocalCluster

SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-1-gpu.nvidia.com-0"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "nodeName": "node-1",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {
                "name": "gpu-0",
                "attributes": {"gpu.nvidia.com/type": {"string": "gpu"}},
                "capacity": {"gpu.nvidia.com/memory": {"value": "80Gi"}},
            }
        ],
    },
}

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "claim-1", "namespace": "gpu-test"},
    "spec": {"devices": {"requests": []}},
}


def test_objects_are_files_in_kubectl_yaml_layout(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    stored = cluster.create_resource_slice(copy.deepcopy(SLICE))
    cluster.put_resource_claim(copy.deepcopy(CLAIM))
    cluster.put_device_class(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"}}
    )

    slice_file = tmp_path / "resourceslices" / "node-1-gpu.nvidia.com-0.yaml"
    text = slice_file.read_text()
    assert yaml.safe_load(text) == stored
    assert [line for line in text.splitlines() if not line.startswith(" ")][:4] == [
        "apiVersion: resource.k8s.io/v1",
        "kind: ResourceSlice",
        "metadata:",
        "spec:",
    ]
    # kubectl quotes strings that would read as something else, with double quotes
    assert f'  resourceVersion: "{stored["metadata"]["resourceVersion"]}"' in text
    assert f'  creationTimestamp: "{stored["metadata"]["creationTimestamp"]}"' in text
    assert "\n  devices:\n  - attributes:\n" in text  # list items not indented, as kubectl
    assert (tmp_path / "resourceclaims" / "gpu-test" / "claim-1.yaml").is_file()
    assert (tmp_path / "deviceclasses" / "gpu.yaml").is_file()


def test_hand_written_yaml_is_read_with_timestamps_as_strings(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    (tmp_path / "resourceclaims" / "gpu-test").mkdir(parents=True)
    (tmp_path / "resourceclaims" / "gpu-test" / "claim-1.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\n"
        "kind: ResourceClaim\n"
        "metadata:\n"
        "  name: claim-1\n"
        "  namespace: gpu-test\n"
        "  uid: 0b5c5a0e-0000-4000-8000-000000000001\n"
        "  creationTimestamp: 2025-06-01T10:00:00Z\n"
        "spec: {}\n"
    )
    claim = cluster.get_resource_claim("gpu-test", "claim-1")
    assert claim["metadata"]["creationTimestamp"] == "2025-06-01T10:00:00Z"
    assert claim["metadata"]["uid"] == "0b5c5a0e-0000-4000-8000-000000000001"


def _only_slice(cluster: LocalCluster) -> dict[str, Any]:
    (obj,) = cluster.list_resource_slices()
    return obj


def _in_another_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalCluster:
    """A store as a new process has it: nothing parsed in memory yet (the stores of one
    directory in one process share what they parsed)."""
    from dra_driver.kube import local_store

    monkeypatch.setattr(local_store, "_PROCESS_STATES", {})
    return LocalCluster(tmp_path)


def test_a_file_is_parsed_once_per_version_and_other_processes_reuse_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = LocalCluster(tmp_path)
    stored = writer.create_resource_slice(copy.deepcopy(SLICE))
    name = stored["metadata"]["name"]
    assert _only_slice(_in_another_process(tmp_path, monkeypatch)) == stored  # parsed, kept
    (copy_path,) = (tmp_path / ".parsed").rglob("*.json")

    # Another process trusts the parsed copy of that very file version...
    stamp, _, _text = copy_path.read_text().partition("\n")
    copy_path.write_text(f"{stamp}\n" + '{"kind": "what the cache says"}')
    reader = _in_another_process(tmp_path, monkeypatch)
    assert _only_slice(reader)["kind"] == "what the cache says"

    # ... and only that one: a changed file is parsed again, a torn copy ignored.
    copy_path.unlink()
    stored["spec"]["pool"]["generation"] = 2
    updated = writer.update_resource_slice(stored)
    assert _only_slice(_in_another_process(tmp_path, monkeypatch)) == updated
    copy_path.write_text("garbage")
    assert _only_slice(_in_another_process(tmp_path, monkeypatch)) == updated
    assert [o["metadata"]["name"] for o in writer.list_resource_slices()] == [name]  # not an object


def test_a_uid_given_on_create_is_kept(tmp_path: Path) -> None:
    claim = copy.deepcopy(CLAIM)
    claim["metadata"]["uid"] = "11111111-2222-4333-8444-555555555555"
    stored = LocalCluster(tmp_path).put_resource_claim(claim)
    assert stored["metadata"]["uid"] == "11111111-2222-4333-8444-555555555555"


def test_corrupt_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.create_resource_slice(copy.deepcopy(SLICE))
    bad = tmp_path / "resourceslices" / "broken.yaml"
    bad.write_text("spec: [unclosed\n")
    with pytest.raises(
        ClusterError, match=r"broken\.yaml.*not valid YAML: line 2, column 1"
    ) as err:
        cluster.list_resource_slices()
    assert "\n" not in str(err.value)
    claim_file = tmp_path / "resourceclaims" / "gpu-test" / "claim-1.yaml"
    claim_file.parent.mkdir(parents=True)
    claim_file.write_text("- just\n- a list\n")
    with pytest.raises(ClusterError, match=r"claim-1\.yaml.*not an API object"):
        cluster.get_resource_claim("gpu-test", "claim-1")


def test_file_holding_another_object_is_an_error(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.create_resource_slice(copy.deepcopy(SLICE))
    source = tmp_path / "resourceslices" / "node-1-gpu.nvidia.com-0.yaml"
    (tmp_path / "resourceslices" / "copy.yaml").write_text(source.read_text())
    with pytest.raises(ClusterError, match=r"copy\.yaml.*named 'node-1-gpu\.nvidia\.com-0'"):
        cluster.list_resource_slices()


def test_temp_and_hidden_files_are_not_objects(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.create_resource_slice(copy.deepcopy(SLICE))
    (tmp_path / "resourceslices" / ".tmp-x.yaml.abc123").write_text("half a fi")
    (tmp_path / "resourceslices" / "notes.txt").write_text("not yaml")
    assert len(cluster.list_resource_slices()) == 1


def test_resource_version_counter_persists_across_instances(tmp_path: Path) -> None:
    first = LocalCluster(tmp_path).create_resource_slice(copy.deepcopy(SLICE))
    second_slice = copy.deepcopy(SLICE)
    second_slice["metadata"]["name"] = "other"
    second = LocalCluster(tmp_path).create_resource_slice(second_slice)
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


def test_corrupt_resource_version_file_is_an_error(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    (tmp_path / ".resource-version").write_text("banana\n")
    with pytest.raises(ClusterError, match=r"\.resource-version"):
        cluster.create_resource_slice(copy.deepcopy(SLICE))


def test_root_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ClusterError, match="file"):
        LocalCluster(tmp_path / "file")


def _increment_annotation(root: str, rounds: int) -> int:
    """Read-modify-write a counter on one claim `rounds` times, retrying on conflict."""
    cluster = LocalCluster(Path(root))
    conflicts = 0
    for _ in range(rounds):
        while True:
            claim = cluster.get_resource_claim("gpu-test", "claim-1")
            count = int(claim["metadata"]["annotations"]["count"])
            claim["metadata"]["annotations"]["count"] = str(count + 1)
            try:
                cluster.put_resource_claim(claim)
                break
            except ConflictError:
                conflicts += 1
    return conflicts


@pytest.mark.slow
def test_two_processes_lose_no_update(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    claim = copy.deepcopy(CLAIM)
    claim["metadata"]["annotations"] = {"count": "0"}
    cluster.put_resource_claim(claim)
    rounds = 25
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.starmap(_increment_annotation, [(str(tmp_path), rounds)] * 2)
    final = cluster.get_resource_claim("gpu-test", "claim-1")
    assert final["metadata"]["annotations"]["count"] == str(2 * rounds)
    assert int(final["metadata"]["resourceVersion"]) == 1 + 2 * rounds


def _within(seconds: float, call: Callable[[], object], fifos: list[Path]) -> BaseException | None:
    """Run `call` in a thread; the exception it raised (None if none). A call still blocked
    after `seconds` (open(2) of a FIFO waits for a writer) fails the test, after a writer
    has come and gone to let it go."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)
        else:
            raised.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail(f"still blocked after {seconds} s on a FIFO")
    return raised[0]


@pytest.mark.parametrize("kind", ["claim", "slice", "resource-version", "parsed-copy"])
def test_a_fifo_in_the_store_is_refused_at_once_not_waited_on(tmp_path: Path, kind: str) -> None:
    """Anyone who can write the directory can leave a FIFO; reading one blocks until a
    writer comes. Store files are opened without blocking, and only regular files read."""
    cluster = LocalCluster(tmp_path)
    cluster.create_resource_slice(copy.deepcopy(SLICE))
    slice_file = tmp_path / "resourceslices" / "node-1-gpu.nvidia.com-0.yaml"
    fifo = {
        "claim": tmp_path / "resourceclaims" / "gpu-test" / "claim-1.yaml",
        "slice": tmp_path / "resourceslices" / "a-fifo.yaml",
        "resource-version": tmp_path / ".resource-version",
        "parsed-copy": tmp_path / ".parsed" / "resourceslices" / "node-1-gpu.nvidia.com-0.json",
    }[kind]
    fifo.parent.mkdir(parents=True, exist_ok=True)
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    fresh = LocalCluster(tmp_path)  # nothing parsed in memory yet
    call: Callable[[], object] = {
        "claim": lambda: fresh.get_resource_claim("gpu-test", "claim-1"),
        "slice": fresh.list_resource_slices,
        "resource-version": lambda: fresh.put_resource_claim(copy.deepcopy(CLAIM)),
        "parsed-copy": fresh.list_resource_slices,
    }[kind]
    raised = _within(5, call, [fifo])
    if kind == "parsed-copy":  # a cache: a bad copy is ignored, the file parsed again
        assert raised is None
        assert fresh.list_resource_slices()[0]["metadata"]["name"] == slice_file.stem
        return
    assert isinstance(raised, ClusterError)
    assert str(fifo) in str(raised)
    assert "not a regular file (a FIFO)" in str(raised)


def test_a_write_that_lands_while_another_renders_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes render their YAML before taking the store's lock; one that another writer
    overtook in the meantime starts again from the new file instead of overwriting it."""
    from dra_driver.kube import local_store

    cluster = LocalCluster(tmp_path)
    other = LocalCluster(tmp_path)
    cluster.put_resource_claim(copy.deepcopy(CLAIM))
    real_dump = local_store.dump_yaml
    overtaken: list[bool] = []

    def dump_overtaken_once(obj: Any) -> str:
        if not overtaken:
            overtaken.append(True)
            theirs = other.get_resource_claim("gpu-test", "claim-1")
            theirs["metadata"]["annotations"] = {"written": "meanwhile"}
            other.put_resource_claim(theirs)
        return real_dump(obj)

    monkeypatch.setattr(local_store, "dump_yaml", dump_overtaken_once)
    mine = copy.deepcopy(CLAIM)
    mine["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    stored = cluster.update_resource_claim_status(mine)

    on_disk = LocalCluster(tmp_path).get_resource_claim("gpu-test", "claim-1")
    assert on_disk["metadata"]["annotations"] == {"written": "meanwhile"}
    assert on_disk["status"]["reservedFor"][0]["name"] == "p"
    assert on_disk["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"] == "3"
    text = (tmp_path / "resourceclaims" / "gpu-test" / "claim-1.yaml").read_text()
    assert 'resourceVersion: "3"' in text


def test_a_listing_is_kept_only_until_the_kind_or_its_directory_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lists are served from what the process last listed while nothing changed; a write by
    another process and a file renamed in by hand are both seen by the next list."""
    mine = LocalCluster(tmp_path)
    mine.put_resource_claim(copy.deepcopy(CLAIM))
    assert [c["metadata"]["name"] for c in mine.list_resource_claims("gpu-test")] == ["claim-1"]

    by_hand = copy.deepcopy(CLAIM)
    by_hand["metadata"]["name"] = "claim-2"
    directory = tmp_path / "resourceclaims" / "gpu-test"
    (directory / ".claim-2.tmp").write_text(yaml.safe_dump(by_hand))
    os.replace(directory / ".claim-2.tmp", directory / "claim-2.yaml")
    assert [c["metadata"]["name"] for c in mine.list_resource_claims("gpu-test")] == [
        "claim-1",
        "claim-2",
    ]

    theirs = _in_another_process(tmp_path, monkeypatch)
    changed = theirs.get_resource_claim("gpu-test", "claim-1")
    changed["metadata"]["annotations"] = {"by": "another process"}
    theirs.put_resource_claim(changed)
    (listed, _) = mine.list_resource_claims("gpu-test")
    assert listed["metadata"]["annotations"] == {"by": "another process"}
