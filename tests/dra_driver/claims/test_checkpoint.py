"""The checkpoint schema: transitions, round trips, and surviving upgrades and corruption."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import random
from typing import Any

import pytest

from dra_driver.claims import checkpoint as cpmod
from dra_driver.claims.checkpoint import (
    SCHEMA_VERSION,
    Checkpoint,
    ClaimEntry,
    ClaimState,
    MigRecord,
    PreparedDevice,
    TimeSliceRecord,
    decode,
    encode,
)
from dra_driver.errors import CheckpointError

BOOT = "0f3b1c9e-8a5d-4b61-9d2e-6c7a8b9c0d1e"
UID_A = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"
UID_B = "c3d4e5f6-0000-4000-8000-000000000001"


def device(name: str = "gpu-0", **kwargs: Any) -> PreparedDevice:
    return PreparedDevice(
        request_names=("gpu",),
        pool="node-1",
        device=name,
        cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={UID_A}-{name}",),
        **kwargs,
    )


def entry(uid: str = UID_A, name: str = "claim-a") -> ClaimEntry:
    return ClaimEntry(uid=uid, namespace="gpu-test", name=name, started_at="2026-01-02T03:04:05Z")


MIG = MigRecord(
    parent_uuid="GPU-11111111-2222-3333-4444-555555555555",
    profile_id=19,
    placement_start=2,
    placement_size=1,
    created_by_us=True,
)


def rich_checkpoint() -> Checkpoint:
    cp = Checkpoint(boot_id=BOOT)
    cp = cp.start(entry())
    shared = device(
        "gpu-0",
        share_id="6f1c3a52-0000-4000-8000-000000000000",
        consumed_capacity={"memory": "4Gi", "shares": "1"},
        time_slice=TimeSliceRecord("GPU-11111111-2222-3333-4444-555555555555", "Long"),
    )
    cp = cp.complete(UID_A, [shared])
    cp = cp.start(entry(UID_B, "claim-b"))
    mig = MIG.with_gpu_instance(9)
    return cp.update_devices(UID_B, [device("gpu-1-mig-1g10gb-19-2", mig=mig)])


# -- transitions ---------------------------------------------------------------


def test_prepare_lifecycle() -> None:
    cp = Checkpoint(boot_id=BOOT)
    started = cp.start(entry())
    assert cp.claims == {}  # transitions never mutate
    assert started.claims[UID_A].state is ClaimState.PrepareStarted
    assert started.claims[UID_A].devices == ()
    done = started.complete(UID_A, [device()])
    assert done.claims[UID_A].state is ClaimState.PrepareCompleted
    assert done.claims[UID_A].devices == (device(),)
    assert done.claims[UID_A].name == "claim-a"  # unlike NVIDIA's, the name is kept
    assert done.remove(UID_A).claims == {}


def test_start_forces_prepare_started() -> None:
    e = ClaimEntry(UID_A, "ns", "c", state=ClaimState.PrepareCompleted, devices=(device(),))
    assert Checkpoint(boot_id=BOOT).start(e).claims[UID_A].state is ClaimState.PrepareStarted


def test_start_refuses_a_claim_already_recorded() -> None:
    cp = Checkpoint(boot_id=BOOT).start(entry())
    with pytest.raises(CheckpointError, match="already PrepareStarted; roll it back"):
        cp.start(entry())
    with pytest.raises(CheckpointError, match="already PrepareCompleted"):
        cp.complete(UID_A, []).start(entry())


def test_update_and_complete_need_a_started_claim() -> None:
    cp = Checkpoint(boot_id=BOOT)
    with pytest.raises(CheckpointError, match=f"claim {UID_A} is not in the checkpoint"):
        cp.complete(UID_A, [])
    done = cp.start(entry()).complete(UID_A, [device()])
    with pytest.raises(CheckpointError, match="is PrepareCompleted, not PrepareStarted"):
        done.update_devices(UID_A, [])
    with pytest.raises(CheckpointError, match="cannot complete it"):
        done.complete(UID_A, [])


def test_remove_unknown_is_a_no_op() -> None:
    cp = Checkpoint(boot_id=BOOT)
    assert cp.remove("nope") == cp


def test_device_owner_overlap_guard() -> None:
    cp = rich_checkpoint()
    assert cp.device_owner("node-1", "gpu-0") == UID_A
    assert cp.device_owner("node-1", "gpu-0", exclude_uid=UID_A) is None
    assert cp.device_owner("node-2", "gpu-0") is None
    # a started (half-prepared) claim owns its devices too
    assert cp.device_owner("node-1", "gpu-1-mig-1g10gb-19-2") == UID_B
    admin = cp.start(entry("e0000000-0000-4000-8000-000000000000", "admin"))
    admin = admin.update_devices(
        "e0000000-0000-4000-8000-000000000000", [device("gpu-7", admin_access=True)]
    )
    assert admin.device_owner("node-1", "gpu-7") is None


def test_in_state() -> None:
    cp = rich_checkpoint()
    assert [e.uid for e in cp.in_state(ClaimState.PrepareCompleted)] == [UID_A]
    assert [e.uid for e in cp.in_state(ClaimState.PrepareStarted)] == [UID_B]


def test_claims_mapping_is_read_only() -> None:
    cp = rich_checkpoint()
    with pytest.raises(TypeError):
        cp.claims[UID_A] = entry()  # type: ignore[index]


def test_mis_keyed_claims_are_rejected() -> None:
    with pytest.raises(CheckpointError, match="holds the entry of claim"):
        Checkpoint(boot_id=BOOT, claims={UID_B: entry(UID_A)})


# -- MIG records -----------------------------------------------------------------


def test_mig_record_stages() -> None:
    assert MIG.stage == "planned"
    gi = MIG.with_gpu_instance(9)
    assert gi.stage == "gi-created"
    ci = gi.with_compute_instance(0)
    assert ci.stage == "ci-created"
    full = gi.with_compute_instance(0, "MIG-c7384736-a75d-5afc-978f-d2f1294409fd")
    assert full.stage == "complete"
    assert (full.gi_id, full.ci_id) == (9, 0)


def test_mig_record_refuses_impossible_states() -> None:
    with pytest.raises(CheckpointError, match="ci_id set without gi_id"):
        MigRecord(
            parent_uuid="GPU-x",
            profile_id=19,
            placement_start=0,
            placement_size=1,
            created_by_us=True,
            ci_id=0,
        )


def test_half_done_mig_creation_survives_round_trip() -> None:
    cp = rich_checkpoint()
    loaded = decode(encode(cp))
    mig = loaded.claims[UID_B].devices[0].mig
    assert mig is not None
    assert mig.stage == "gi-created"
    assert mig.gi_id == 9
    assert mig.ci_id is None


# -- serialisation -------------------------------------------------------------


def test_round_trip() -> None:
    cp = rich_checkpoint()
    assert decode(encode(cp)) == cp
    assert Checkpoint.from_dict(cp.to_dict()) == cp
    assert decode(encode(Checkpoint(boot_id=BOOT))) == Checkpoint(boot_id=BOOT)


def test_encoding_is_canonical_and_writes_defaults() -> None:
    data = encode(rich_checkpoint())
    header, payload = data.split(b"\n", 1)
    assert json.loads(header)["format"] == "dra-gpu/checkpoint"
    obj = json.loads(payload)
    assert payload == (json.dumps(obj, sort_keys=True, indent=2) + "\n").encode()
    assert obj["schemaVersion"] == SCHEMA_VERSION
    dev = obj["claims"][UID_A]["devices"][0]
    assert dev["mig"] is None  # defaults are written, not omitted
    assert dev["adminAccess"] is False
    assert encode(rich_checkpoint()) == data


def payload_of(cp: Checkpoint) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(encode(cp).split(b"\n", 1)[1])
    return obj


def reencode(obj: dict[str, Any], *, pretty: bool = True) -> bytes:
    """What some other writer (a newer dra-gpu) might store: a valid header over its bytes."""
    payload = json.dumps(obj, indent=2 if pretty else None).encode()
    header = {"checksum": "sha256:" + hashlib.sha256(payload).hexdigest(), "format": cpmod.FORMAT}
    return json.dumps(header).encode() + b"\n" + payload


def test_unknown_fields_from_a_newer_writer_are_ignored() -> None:
    cp = rich_checkpoint()
    obj = payload_of(cp)
    obj["futureTopLevel"] = {"x": 1}
    obj["claims"][UID_A]["futureClaimField"] = [1, 2]
    obj["claims"][UID_A]["devices"][0]["futureDeviceField"] = "hint"
    obj["claims"][UID_B]["devices"][0]["mig"]["futureMigField"] = 3
    assert decode(reencode(obj)) == cp


def test_checksum_is_over_stored_bytes_not_a_re_marshalling() -> None:
    # Non-canonical formatting and key order still verify: the bytes as stored are hashed.
    obj = payload_of(rich_checkpoint())
    reordered = dict(reversed(list(obj.items())))
    assert decode(reencode(reordered, pretty=False)) == rich_checkpoint()


def test_fields_added_later_have_defaults() -> None:
    obj = payload_of(rich_checkpoint())
    for claim in obj["claims"].values():
        del claim["startedAt"]
        for dev in claim["devices"]:
            for key in (
                "shareId",
                "mig",
                "adminAccess",
                "requestNames",
                "cdiDeviceIds",
                "consumedCapacity",
                "timeSlice",
            ):
                del dev[key]
    loaded = decode(reencode(obj))
    dev = loaded.claims[UID_A].devices[0]
    assert (dev.share_id, dev.mig, dev.admin_access, dev.request_names) == (None, None, False, ())
    assert (dict(dev.consumed_capacity), dev.time_slice) == ({}, None)


def test_newer_schema_version_is_refused_with_advice() -> None:
    obj = payload_of(rich_checkpoint())
    obj["schemaVersion"] = SCHEMA_VERSION + 1
    with pytest.raises(CheckpointError) as info:
        decode(reencode(obj), source="/var/lib/cp.json")
    message = str(info.value)
    assert message.startswith("/var/lib/cp.json: schemaVersion is 2")
    assert "understands only up to 1" in message
    assert "written by a newer dra-gpu" in message


def test_older_schema_versions_are_migrated(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend the current schema is 2, with a registered v1 -> v2 migration that marks
    # the boot id so the test can see it ran.
    calls: list[int] = []

    def v1_to_v2(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(obj["schemaVersion"])
        return {**obj, "schemaVersion": 2, "bootId": obj["bootId"] + "-migrated"}

    monkeypatch.setattr(cpmod, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(cpmod._MIGRATIONS, 1, v1_to_v2)
    obj = payload_of(rich_checkpoint())
    assert obj["schemaVersion"] == 2
    obj["schemaVersion"] = 1
    loaded = decode(reencode(obj))
    assert calls == [1]
    assert loaded.boot_id == BOOT + "-migrated"
    assert loaded.claims == rich_checkpoint().claims


def test_older_version_without_migration_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpmod, "SCHEMA_VERSION", 2)
    obj = payload_of(rich_checkpoint())
    obj["schemaVersion"] = 1
    with pytest.raises(CheckpointError, match="schemaVersion 1 has no migration to 2"):
        decode(reencode(obj))


@pytest.mark.parametrize("version", [0, -1, "1", None, True, 1.0])
def test_invalid_schema_versions(version: Any) -> None:
    obj = payload_of(rich_checkpoint())
    obj["schemaVersion"] = version
    with pytest.raises(CheckpointError, match="schemaVersion is"):
        decode(reencode(obj))


def test_every_single_byte_flip_is_detected() -> None:
    data = encode(rich_checkpoint())
    for i in range(len(data)):
        corrupted = bytearray(data)
        corrupted[i] ^= 0x01
        with pytest.raises(CheckpointError):
            decode(bytes(corrupted), source="cp")


def test_corrupt_payload_says_checksum_mismatch() -> None:
    data = bytearray(encode(rich_checkpoint()))
    data[-10] ^= 0x20
    with pytest.raises(
        CheckpointError, match=r"cp\.json: checksum mismatch, the file is corrupted"
    ):
        decode(bytes(data), source="/x/cp.json")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated"),
        (b'{"format": "dra-gpu/checkpoint"}', "truncated"),
        (b"garbage\n{}", "header line is not JSON"),
        (b'{"format": "nvidia"}\n{}', "not a dra-gpu checkpoint"),
        (b'{"format": "dra-gpu/checkpoint", "checksum": "md5:abc"}\n{}', "is not 'sha256:<hex>'"),
        (b'{"format": "dra-gpu/checkpoint"}\n{}', "is not 'sha256:<hex>'"),
        (b"\xff\xfe\n{}", "header line is not JSON"),
    ],
)
def test_malformed_files(data: bytes, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        decode(data)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("bootId",), None, "checkpoint.bootId is missing"),
        (("claims",), [], "claims must be an object"),
        (("claims", UID_A, "state"), "Prepared", "state is 'Prepared', expected one of"),
        (("claims", UID_A, "uid"), UID_B, "uid is"),
        (("claims", UID_A, "devices"), {}, "devices must be a list"),
        (("claims", UID_A, "devices", 0, "pool"), 3, "pool must be str"),
        (("claims", UID_A, "devices", 0, "adminAccess"), "no", "adminAccess must be bool"),
        (("claims", UID_A, "devices", 0, "requestNames"), "gpu", "requestNames must be a list"),
        (("claims", UID_B, "devices", 0, "mig", "giId"), True, "giId must be int"),
        (("claims", UID_B, "devices", 0, "mig", "profileId"), None, "profileId is missing"),
    ],
)
def test_schema_errors_name_the_field(path: tuple[Any, ...], value: Any, message: str) -> None:
    obj = payload_of(rich_checkpoint())
    node: Any = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(CheckpointError, match=message) as info:
        decode(reencode(obj), source="/cp")
    assert str(info.value).startswith("/cp: ")


# -- the record in the CDI spec, and adopting rebuilt entries ----------------------


def test_an_entry_survives_the_round_trip_through_a_spec_record() -> None:
    cp = rich_checkpoint()
    for uid, original in cp.claims.items():
        value = cpmod.to_spec_record(BOOT, original)
        assert "\n" not in value
        assert value.isascii()
        back = cpmod.from_spec_record(value, source="spec.yaml")
        assert back.boot_id == BOOT
        assert dict(back.claims) == {uid: original}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "spec.yaml: the claim record is not JSON"),
        ('{"schemaVersion": 99}', "spec.yaml: the claim record: schemaVersion is 99"),
        (
            json.dumps(rich_checkpoint().to_dict()),
            "holds 2 claims, expected one",
        ),
    ],
)
def test_a_bad_spec_record_is_a_checkpoint_error(value: str, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        cpmod.from_spec_record(value, source="spec.yaml")


def test_adopt_keeps_the_rebuilt_state_and_never_overwrites() -> None:
    cp = rich_checkpoint()
    completed = cp.claims[UID_A]
    rebuilt = Checkpoint(boot_id=BOOT).adopt(completed)
    assert rebuilt.claims[UID_A].state is ClaimState.PrepareCompleted
    with pytest.raises(CheckpointError, match="already in the checkpoint"):
        cp.adopt(completed)


# -- the held-devices index and the change tracking ------------------------------


def _owner_by_scan(cp: Checkpoint, pool: str, name: str, exclude: str | None) -> str | None:
    holders = sorted(
        uid
        for uid, e in cp.claims.items()
        if uid != exclude
        and any(d.pool == pool and d.device == name and not d.admin_access for d in e.devices)
    )
    return holders[0] if holders else None


def test_device_index_follows_every_transition() -> None:
    rng = random.Random(7)
    names = [f"gpu-{i}" for i in range(4)]
    cp = Checkpoint(boot_id=BOOT)
    cp.device_owner("node-1", "gpu-0")  # build the index first, then keep it up to date
    uids = [f"c{i:03d}-0000-4000-8000-000000000000" for i in range(30)]
    for _ in range(300):
        uid = rng.choice(uids)
        picked = [
            device(n, admin_access=rng.random() < 0.3) for n in rng.sample(names, rng.randint(1, 2))
        ]
        existing = cp.claims.get(uid)
        if existing is None:
            cp = cp.start(dataclasses.replace(entry(uid), devices=tuple(picked)))
        elif existing.state is ClaimState.PrepareStarted and rng.random() < 0.5:
            cp = cp.complete(uid, picked)
        else:
            cp = cp.remove(uid)
        for name in names:
            exclude = rng.choice([None, uid])
            assert cp.device_owner("node-1", name, exclude_uid=exclude) == _owner_by_scan(
                cp, "node-1", name, exclude
            )
        fresh = Checkpoint(boot_id=BOOT, claims=dict(cp.claims))

        def key(held: tuple[str, PreparedDevice]) -> tuple[str, str]:
            return held[1].device, held[0]

        assert sorted(cp.held_devices(), key=key) == sorted(fresh.held_devices(), key=key)


def test_changed_since_names_what_transitions_touched() -> None:
    old = rich_checkpoint()
    between = old.remove(UID_A)
    new = between.start(entry("c3d4e5f6-0000-4000-8000-000000000009", "claim-c"))
    assert new.changed_since(old) == {UID_A, "c3d4e5f6-0000-4000-8000-000000000009"}
    del between  # parents are weak references: a forgotten step means "compare everything"
    gc.collect()
    assert new.changed_since(old) is None
    assert old.changed_since(old) == frozenset()
    assert old.changed_since(new) is None  # not derived from it: compare everything
    assert Checkpoint(boot_id=BOOT, claims=dict(new.claims)).changed_since(old) is None
