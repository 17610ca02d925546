"""The intent and status files between the kubelet plugin and the MPS host."""

from __future__ import annotations

import json

import pytest

from dra_driver.claims.mps import MpsLimits
from dra_driver.claims.mps_intent import (
    MAX_FILE_BYTES,
    DaemonState,
    DaemonStatus,
    decode_intent,
    decode_status,
    device_uuid_of,
    encode_intent,
    encode_status,
    intent_file_name,
    make_intent,
    status_file_name,
)
from dra_driver.errors import MpsError

GPU = "GPU-a2b56268-9156-5930-a747-ffec552f8b3a"


def test_an_intent_round_trips_with_its_claims_sorted_and_unique() -> None:
    intent = make_intent(
        GPU, claims=["b", "a", "b"], multi_user=True, limits=MpsLimits(40, 2048), token="t1"
    )
    assert intent.claims == ("a", "b")
    assert intent.wanted
    decoded = decode_intent(encode_intent(intent), source="f")
    assert decoded == intent
    assert decoded.limits == MpsLimits(40, 2048)
    on_disk = json.loads(encode_intent(intent))
    assert on_disk["deviceUuid"] == GPU
    assert on_disk["format"] == "dra-gpu/mps-intent"


def test_an_intent_without_claims_means_stop() -> None:
    assert not make_intent(GPU, claims=(), multi_user=False, limits=MpsLimits(), token="t").wanted


def test_unknown_fields_of_a_newer_writer_are_ignored() -> None:
    data = json.loads(
        encode_intent(
            make_intent(GPU, claims=["a"], multi_user=False, limits=MpsLimits(), token="t")
        )
    )
    data["somethingNew"] = {"x": 1}
    assert decode_intent(json.dumps(data).encode(), source="f").claims == ("a",)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"version": 2}, "version"),
        ({"deviceUuid": "../../etc"}, "deviceUuid"),
        ({"activeThreadPercentage": 0}, "activeThreadPercentage"),
        ({"token": ""}, "token"),
    ],
)
def test_a_bad_intent_is_refused_naming_the_field(change: dict[str, object], problem: str) -> None:
    data = json.loads(
        encode_intent(
            make_intent(GPU, claims=["a"], multi_user=False, limits=MpsLimits(), token="t")
        )
    )
    data.update(change)
    with pytest.raises(MpsError, match=rf"^/x/{GPU}\.intent\.json: {problem}"):
        decode_intent(json.dumps(data).encode(), source=f"/x/{intent_file_name(GPU)}")


def test_garbage_and_huge_files_are_refused_unparsed() -> None:
    with pytest.raises(MpsError, match="src: "):
        decode_intent(b"[" * 10_000, source="src")
    with pytest.raises(MpsError, match="more than an MPS file may hold"):
        decode_status(b" " * (MAX_FILE_BYTES + 1), source="src")


def test_a_status_round_trips() -> None:
    status = DaemonStatus(
        device_uuid=GPU, token="t", state=DaemonState.RUNNING, pid=7, start_ticks=9
    )
    assert decode_status(encode_status(status), source="f") == status


def test_file_names_map_back_to_device_uuids_and_nothing_else() -> None:
    assert device_uuid_of(intent_file_name(GPU)) == GPU
    assert device_uuid_of(status_file_name(GPU)) == GPU
    assert device_uuid_of("host.lock") is None
    assert device_uuid_of("..intent.json") is None
