"""The checkpoint on disk: a file per claim, boot ids, corruption, legacy files, and the lock."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from dra_driver.claims.checkpoint import (
    Checkpoint,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
    decode,
    encode,
)
from dra_driver.claims.checkpoint_store import CheckpointStore, LoadOutcome
from dra_driver.errors import CheckpointError
from dra_driver.files.atomic import temp_prefix_for

BOOT = "0f3b1c9e-8a5d-4b61-9d2e-6c7a8b9c0d1e"
NEW_BOOT = "7d1f0e2a-1111-4222-8333-944455556666"
UID = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"
UID_B = "1c8d01e3-6e2f-4d72-8b1f-4a6b2d3c8e01"
UID_C = "2d9e12f4-7f30-4e83-9c20-5b7c3e4d9f12"
LEGACY = Path(__file__).parent / "data" / "checkpoint-single-file-v1.json"


def prepared(boot: str = BOOT) -> Checkpoint:
    cp = Checkpoint(boot_id=boot).start(ClaimEntry(UID, "gpu-test", "claim-1"))
    return cp.complete(UID, [PreparedDevice(("gpu",), "node-1", "gpu-0", ("cdi-id",))])


def two_claims(boot: str = BOOT) -> Checkpoint:
    cp = prepared(boot).start(ClaimEntry(UID_B, "gpu-test", "claim-2"))
    return cp.complete(UID_B, [PreparedDevice(("gpu",), "node-1", "gpu-1", ("cdi-id-2",))])


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_missing_directory_is_an_empty_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoint", BOOT)
    assert store.load() == Checkpoint(boot_id=BOOT)
    assert store.last_load is not None
    assert store.last_load.file_existed is False
    assert store.last_load.rebooted is False
    assert not (tmp_path / "checkpoint").exists()  # load never writes


def test_save_writes_one_file_per_claim_and_load_reads_them(tmp_path: Path) -> None:
    directory = tmp_path / "sub" / "checkpoint"
    store = CheckpointStore(directory, BOOT)
    store.save(two_claims())
    assert files(directory) == [f"{UID}.json", f"{UID_B}.json"]
    assert stat.S_IMODE((directory / f"{UID}.json").stat().st_mode) == 0o600
    one = decode((directory / f"{UID}.json").read_bytes())
    assert dict(one.claims) == {UID: two_claims().claims[UID]}  # a one-claim checkpoint
    again = CheckpointStore(directory, BOOT)
    assert again.load() == two_claims()
    assert again.last_load is not None
    assert again.last_load.file_existed is True


def test_commit_writes_only_the_claims_that_changed(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoint"
    store = CheckpointStore(directory, BOOT)
    old = two_claims()
    store.save(old)
    untouched = (directory / f"{UID_B}.json").stat()
    new = old.remove(UID).start(ClaimEntry(UID_C, "ns", "claim-3"))
    store.commit(old, new)
    assert files(directory) == [f"{UID_B}.json", f"{UID_C}.json"]
    after = (directory / f"{UID_B}.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (untouched.st_ino, untouched.st_mtime_ns)
    assert store.load() == new


def test_new_boot_discards_claims_and_reports_them(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoint"
    CheckpointStore(directory, BOOT).save(prepared())
    store = CheckpointStore(directory, NEW_BOOT)
    outcome = store.load_outcome()
    assert outcome.checkpoint == Checkpoint(boot_id=NEW_BOOT)
    assert outcome.rebooted is True
    assert outcome.needs_save is True
    assert outcome.discarded_boot_id == BOOT
    assert [e.uid for e in outcome.discarded_claims] == [UID]
    assert store.last_load == outcome
    store.save(outcome.checkpoint)
    assert files(directory) == []
    assert CheckpointStore(directory, NEW_BOOT).load_outcome().rebooted is False


def test_save_refuses_a_checkpoint_of_another_boot(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=f"checkpoint of boot {BOOT} during boot {NEW_BOOT}"):
        CheckpointStore(tmp_path / "cp", NEW_BOOT).save(prepared())


def test_a_corrupt_file_costs_only_its_claim(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoint"
    store = CheckpointStore(directory, BOOT)
    store.save(two_claims())
    path = directory / f"{UID}.json"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x04
    path.write_bytes(bytes(data))
    outcome = store.load_outcome()
    assert set(outcome.checkpoint.claims) == {UID_B}
    [bad] = outcome.unreadable
    assert (bad.path, bad.claim_uid) == (path, UID)
    assert bad.error.startswith(f"{path}: checksum mismatch")
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        store.load()  # the strict read refuses
    path.write_bytes(b"{not json")
    assert "truncated" in store.load_outcome().unreadable[0].error
    assert path.exists()  # left for the plugin to quarantine


def test_a_claim_file_must_hold_its_own_claim(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoint"
    CheckpointStore(directory, BOOT).save(prepared())
    (directory / f"{UID}.json").rename(directory / f"{UID_B}.json")
    [bad] = CheckpointStore(directory, BOOT).load_outcome().unreadable
    assert bad.error == f"holds claims ['{UID}'], expected {UID_B}"


def test_unreadable_path_is_reported(tmp_path: Path) -> None:
    (tmp_path / "checkpoint" / f"{UID}.json").mkdir(parents=True)
    [bad] = CheckpointStore(tmp_path / "checkpoint", BOOT).load_outcome().unreadable
    assert "cannot read" in bad.error


def test_quarantine_keeps_evidence(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    path = directory / f"{UID}.json"
    path.write_bytes(b"garbage")
    store = CheckpointStore(directory, BOOT)
    moved = store.quarantine(path)
    assert moved.parent == directory
    assert moved.name.startswith(f"{UID}.json.corrupt-")
    assert moved.read_bytes() == b"garbage"
    assert store.load() == Checkpoint(boot_id=BOOT)  # quarantined files are not claim files
    path.write_bytes(b"garbage again")
    second = store.quarantine(path)
    assert second != moved
    assert second.read_bytes() == b"garbage again"
    with pytest.raises(CheckpointError, match="nothing to quarantine"):
        store.quarantine(path)


def test_single_file_checkpoint_of_older_dra_gpu_is_read_and_migrated(tmp_path: Path) -> None:
    """`data/checkpoint-single-file-v1.json` was written by dra-gpu's single-file store."""
    legacy = tmp_path / "checkpoint.json"
    shutil.copy(LEGACY, legacy)
    expected = decode(LEGACY.read_bytes())
    store = CheckpointStore(tmp_path / "checkpoint", expected.boot_id, legacy_file=legacy)
    outcome = store.load_outcome()
    assert outcome.legacy is True
    assert outcome.needs_save is True
    assert outcome.checkpoint == expected
    assert {e.state for e in expected.claims.values()} == {
        ClaimState.PrepareCompleted,
        ClaimState.PrepareStarted,
    }
    store.save(outcome.checkpoint)
    assert not legacy.exists()
    assert files(tmp_path / "checkpoint") == sorted(f"{uid}.json" for uid in expected.claims)
    again = CheckpointStore(tmp_path / "checkpoint", expected.boot_id, legacy_file=legacy)
    assert again.load_outcome() == LoadOutcome(expected, file_existed=True)


def test_claim_files_win_over_a_legacy_file_left_by_an_interrupted_migration(
    tmp_path: Path,
) -> None:
    legacy = tmp_path / "checkpoint.json"
    legacy.write_bytes(encode(prepared()))
    newer = prepared().remove(UID).start(ClaimEntry(UID, "gpu-test", "claim-1"))
    store = CheckpointStore(tmp_path / "checkpoint", BOOT, legacy_file=legacy)
    store.save(newer)
    legacy.write_bytes(encode(prepared()))  # as if the crash came before its removal
    assert store.load() == newer


def test_save_removes_leftover_temp_files(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    (directory / f"{temp_prefix_for(UID)}.json.x1y2").write_bytes(b"half")
    CheckpointStore(directory, BOOT).save(prepared())
    assert files(directory) == [f"{UID}.json"]


def test_empty_boot_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="empty boot id"):
        CheckpointStore(tmp_path / "cp", "")


def test_write_failure_is_a_checkpoint_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match="cannot write"):
        CheckpointStore(tmp_path / "file" / "cp", BOOT).save(prepared())


def test_a_claim_uid_that_cannot_name_a_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot name a checkpoint file"):
        CheckpointStore(tmp_path / "cp", BOOT).path_for("../escape")


# -- locking ---------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from dra_driver.claims.checkpoint_store import CheckpointStore

    store = CheckpointStore(Path(sys.argv[1]), "boot")
    with store.lock():
        print("locked", flush=True)
        sys.stdin.readline()
    print("released", flush=True)
    """
)


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
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
                pytest.raises(CheckpointError, match=r"checkpoint\.lock: still locked"),
                store.lock(timeout_s=0),
            ):
                pass
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert holder.stdout.readline() == "released\n"
            with store.lock(timeout_s=30):
                assert (tmp_path / "checkpoint.lock").exists()
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
            store.commit(cp, cp.start(ClaimEntry(uid, "ns", uid)))


@pytest.mark.slow
def test_concurrent_read_modify_write_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_add_claims, args=(str(path), w, 15)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=100)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    cp = CheckpointStore(path, BOOT).load()
    assert len(cp.claims) == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint.lock"]
    assert len(files(path)) == 60


def test_every_change_gives_a_new_generation_that_another_process_can_see(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoint", BOOT)
    other = CheckpointStore(tmp_path / "checkpoint", BOOT)  # the rolling-upgrade peer
    with store.lock():
        assert store.generation() == ""
        store.save(prepared())
        first = store.generation()
    assert first
    with other.lock():
        assert other.generation() == first
        other.commit(prepared(), two_claims())
        second = other.generation()
    assert second != first
    with store.lock():
        assert store.generation() == second  # so `store` knows to reload
        loaded = store.load()
        assert loaded == two_claims()
        store.commit(loaded, loaded)  # nothing changed: same generation
        assert store.generation() == second


@pytest.mark.parametrize("damage", ["wiped", "dangling-link", "a-file"])
def test_a_damaged_directory_is_reported_not_read_as_no_claims(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "checkpoint"
    store = CheckpointStore(directory, BOOT)
    with store.lock():
        store.save(two_claims())
    shutil.rmtree(directory)
    if damage == "dangling-link":
        directory.symlink_to(tmp_path / "gone")
    elif damage == "a-file":
        directory.write_text("not a directory")
    outcome = store.load_outcome()
    assert outcome.damaged is not None
    assert outcome.incomplete
    assert outcome.needs_save
    with pytest.raises(CheckpointError, match=r"checkpoint: (is missing|is a dangling|is not)"):
        store.load()
    with store.lock():
        store.save(two_claims())  # the rebuilt claims; the damaged path is moved aside
    assert store.load() == two_claims()
    assert store.directory_problem() is None


def test_a_fresh_node_without_a_directory_is_not_damaged(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoint", BOOT)
    assert store.directory_problem() is None
    assert store.load_outcome().damaged is None


def test_temp_files_of_interrupted_writes_are_removed_on_request(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoint", BOOT)
    with store.lock():
        store.save(prepared())
    litter = tmp_path / "checkpoint" / f"{temp_prefix_for(UID + '.json')}.x1y2"
    litter.write_text("half")
    with store.lock():
        assert store.remove_temp_files() == [litter]
    assert files(tmp_path / "checkpoint") == [f"{UID}.json"]


def test_temp_files_of_the_legacy_file_are_removed_and_nothing_else(tmp_path: Path) -> None:
    legacy = tmp_path / "checkpoint.json"
    store = CheckpointStore(tmp_path / "checkpoint", BOOT, legacy_file=legacy)
    with store.lock():
        store.save(prepared())
    litter = tmp_path / f"{temp_prefix_for('checkpoint.json')}.x1y2"
    litter.write_text("half a checkpoint of an older dra-gpu")
    other = tmp_path / f"{temp_prefix_for('checkpoint.json-other')}.x1y2"
    other.write_text("not ours")
    with store.lock():
        assert store.remove_temp_files() == [litter]
    assert files(tmp_path) == sorted([other.name, "checkpoint", "checkpoint.lock"])


def test_a_fifo_as_a_claim_file_is_unreadable_not_waited_on(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoint", BOOT)
    with store.lock():
        store.save(prepared())
    fifo = tmp_path / "checkpoint" / f"{UID_B}.json"
    os.mkfifo(fifo)
    outcome: list[LoadOutcome] = []
    reader = threading.Thread(target=lambda: outcome.append(store.load_outcome()), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let it go
        pytest.fail("load_outcome() waited on a FIFO")
    (bad,) = outcome[0].unreadable
    assert (bad.path, bad.claim_uid) == (fifo, UID_B)
    assert bad.error == "cannot read: not a regular file (a FIFO)"
    assert set(outcome[0].checkpoint.claims) == {UID}
