"""The checkpoint file: boot-id handling, corruption, quarantine, and the cross-process lock."""

from __future__ import annotations

import multiprocessing
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dra_driver.checkpoint import Checkpoint, ClaimEntry, PreparedDevice
from dra_driver.checkpoint_store import CheckpointStore
from dra_driver.errors import CheckpointError

BOOT = "0f3b1c9e-8a5d-4b61-9d2e-6c7a8b9c0d1e"
NEW_BOOT = "7d1f0e2a-1111-4222-8333-944455556666"
UID = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"


def prepared(boot: str = BOOT) -> Checkpoint:
    cp = Checkpoint(boot_id=boot).start(ClaimEntry(UID, "gpu-test", "claim-1"))
    return cp.complete(UID, [PreparedDevice(("gpu",), "node-1", "gpu-0", ("cdi-id",))])


def test_missing_file_is_an_empty_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoint.json", BOOT)
    assert store.load() == Checkpoint(boot_id=BOOT)
    assert store.last_load is not None
    assert store.last_load.file_existed is False
    assert store.last_load.rebooted is False
    assert not (tmp_path / "checkpoint.json").exists()  # load never writes


def test_save_and_load(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "sub" / "checkpoint.json", BOOT)
    store.save(prepared())
    path = tmp_path / "sub" / "checkpoint.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.json"]
    again = CheckpointStore(path, BOOT)
    assert again.load() == prepared()
    assert again.last_load is not None
    assert again.last_load.file_existed is True


def test_new_boot_discards_claims_and_reports_them(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    CheckpointStore(path, BOOT).save(prepared())
    store = CheckpointStore(path, NEW_BOOT)
    outcome = store.load_outcome()
    assert outcome.checkpoint == Checkpoint(boot_id=NEW_BOOT)
    assert outcome.rebooted is True
    assert outcome.discarded_boot_id == BOOT
    assert [e.uid for e in outcome.discarded_claims] == [UID]
    assert store.last_load == outcome
    store.save(outcome.checkpoint)
    assert CheckpointStore(path, NEW_BOOT).load_outcome().rebooted is False


def test_save_refuses_a_checkpoint_of_another_boot(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=f"checkpoint of boot {BOOT} during boot {NEW_BOOT}"):
        CheckpointStore(tmp_path / "cp", NEW_BOOT).save(prepared())


def test_corrupt_file_names_path_and_problem(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    store = CheckpointStore(path, BOOT)
    store.save(prepared())
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x04
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as info:
        store.load()
    assert str(info.value).startswith(f"{path}: checksum mismatch")
    path.write_bytes(b"{not json")
    with pytest.raises(CheckpointError, match=f"{path}: truncated"):
        store.load()
    assert path.exists()  # left for the plugin to quarantine


def test_unreadable_path_is_a_checkpoint_error(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").mkdir()
    with pytest.raises(CheckpointError, match="cannot read"):
        CheckpointStore(tmp_path / "checkpoint.json", BOOT).load()


def test_quarantine_keeps_evidence_and_allows_a_fresh_start(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_bytes(b"garbage")
    store = CheckpointStore(path, BOOT)
    with pytest.raises(CheckpointError):
        store.load()
    moved = store.quarantine()
    assert moved.parent == tmp_path
    assert moved.name.startswith("checkpoint.json.corrupt-")
    assert moved.read_bytes() == b"garbage"
    assert store.load() == Checkpoint(boot_id=BOOT)
    path.write_bytes(b"garbage again")
    second = store.quarantine()
    assert second != moved
    assert second.read_bytes() == b"garbage again"
    with pytest.raises(CheckpointError, match="nothing to quarantine"):
        store.quarantine()


def test_empty_boot_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="empty boot id"):
        CheckpointStore(tmp_path / "cp", "")


def test_write_failure_is_a_checkpoint_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match="cannot write"):
        CheckpointStore(tmp_path / "file" / "cp", BOOT).save(Checkpoint(boot_id=BOOT))


# -- locking ---------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from dra_driver.checkpoint_store import CheckpointStore

    store = CheckpointStore(Path(sys.argv[1]), "boot")
    with store.lock():
        print("locked", flush=True)
        sys.stdin.readline()
    print("released", flush=True)
    """
)


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    store = CheckpointStore(path, BOOT)
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdin is not None
        try:
            assert holder.stdout.readline() == "locked\n"
            with (
                pytest.raises(CheckpointError, match=r"checkpoint\.json\.lock: still locked"),
                store.lock(timeout_s=0),
            ):
                pass
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert holder.stdout.readline() == "released\n"
            with store.lock(timeout_s=30):
                assert (tmp_path / "checkpoint.json.lock").exists()
        finally:
            holder.kill()


def test_lock_is_released_on_error(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "cp", BOOT)
    with pytest.raises(RuntimeError), store.lock():
        raise RuntimeError("boom")
    with store.lock(timeout_s=0):
        pass


def _add_claims(path: str, worker: int, count: int) -> None:
    store = CheckpointStore(Path(path), BOOT)
    for i in range(count):
        with store.lock(timeout_s=60):
            cp = store.load()
            uid = f"w{worker}-c{i}"
            store.save(cp.start(ClaimEntry(uid, "ns", uid)))


@pytest.mark.slow
def test_concurrent_read_modify_write_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_add_claims, args=(str(path), w, 15)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=100)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    cp = CheckpointStore(path, BOOT).load()
    assert len(cp.claims) == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json", "checkpoint.json.lock"]
