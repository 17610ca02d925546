"""The generated gRPC stubs must never silently drift from the .proto files,
and the .proto files must say exactly what the kubelet speaks.

Drift check: each .proto file is compiled again to a FileDescriptorProto and
compared with the one embedded in the committed `_pb2` module. The comparison
is semantic (descriptor against descriptor), so it does not care about protoc
version banners or formatting, only about what goes on the wire.

Wire check: package names, full method names and field numbers are asserted
against /work/shared/reference/dra-protocol.md §1-§2.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import grpc
import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor, FileDescriptor

from kubelet_plugin import protogen

REGENERATE = "generated stubs are out of date with proto/: run `make proto` and commit the result"

PROTOS = protogen.proto_files()


def _module_name(relative_proto: Path, suffix: str = "_pb2") -> str:
    return "kubelet_plugin.gen." + ".".join(relative_proto.with_suffix("").parts) + suffix


def _compiled_descriptor(relative_proto: Path) -> descriptor_pb2.FileDescriptorProto:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        out = Path(tmp) / "set.pb"
        protogen.run_protoc(
            [
                *protogen.include_args(),
                f"--descriptor_set_out={out}",
                protogen.virtual_name(relative_proto),
            ]
        )
        descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    (compiled,) = descriptor_set.file
    return _without_json_names(compiled)


def _without_json_names(
    file: descriptor_pb2.FileDescriptorProto,
) -> descriptor_pb2.FileDescriptorProto:
    """Drop `json_name`: protoc fills it in descriptor sets, the Python generator leaves it out.

    It is derived from the field name, so removing it loses nothing.
    """
    pending = list(file.message_type)
    while pending:
        message = pending.pop()
        for field in (*message.field, *message.extension):
            field.ClearField("json_name")
        pending.extend(message.nested_type)
    return file


def _file(module: str) -> FileDescriptor:
    descriptor: FileDescriptor = importlib.import_module(module).DESCRIPTOR
    return descriptor


def test_every_proto_file_is_found() -> None:
    assert [p.as_posix() for p in PROTOS] == [
        "dra/v1/api.proto",
        "dra/v1beta1/api.proto",
        "dra_health/v1/api.proto",
        "dra_health/v1alpha1/api.proto",
        "pluginregistration/v1/api.proto",
    ]


@pytest.mark.parametrize("relative_proto", PROTOS, ids=lambda p: p.as_posix())
def test_committed_stubs_match_proto(relative_proto: Path) -> None:
    try:
        module = importlib.import_module(_module_name(relative_proto))
        importlib.import_module(_module_name(relative_proto, "_pb2_grpc"))
    except ImportError as exc:
        pytest.fail(f"{relative_proto}: no generated module ({exc}); {REGENERATE}")
    committed = _without_json_names(
        descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    )
    compiled = _compiled_descriptor(relative_proto)
    assert compiled == committed, f"{relative_proto}: {REGENERATE}"


def test_no_generated_module_without_a_proto() -> None:
    gen = protogen.GEN_DIR
    generated = {p.relative_to(gen).with_name("api.proto") for p in gen.rglob("api_pb2.py")}
    assert generated == set(PROTOS), REGENERATE


def test_generated_stubs_have_type_stubs() -> None:
    gen = protogen.GEN_DIR
    for relative_proto in PROTOS:
        base = gen / relative_proto.parent
        for name in ("api_pb2.pyi", "api_pb2_grpc.pyi"):
            assert (base / name).is_file(), f"{base / name} is missing; {REGENERATE}"


# --------------------------------------------------------------------------- wire facts


def _fields(module: ModuleType, message: str) -> dict[str, int]:
    descriptor = module.DESCRIPTOR.message_types_by_name[message]
    return {field.name: field.number for field in descriptor.fields}


def _method_paths(file: FileDescriptor) -> set[str]:
    return {
        f"/{service.full_name}/{method.name}"
        for service in file.services_by_name.values()
        for method in service.methods
    }


class _RecordingChannel:
    """Stands in for a grpc.Channel to learn which method paths a generated stub calls."""

    def __init__(self) -> None:
        self.paths: set[str] = set()

    def _record(self, path: str, *_args: Any, **_kwargs: Any) -> None:
        self.paths.add(path)

    unary_unary = unary_stream = stream_unary = stream_stream = _record


DRA_MESSAGES = {
    "NodePrepareResourcesRequest": {"claims": 1},
    "NodePrepareResourcesResponse": {"claims": 1},
    "NodePrepareResourceResponse": {"devices": 1, "error": 2},
    "Device": {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4},
    "NodeUnprepareResourcesRequest": {"claims": 1},
    "NodeUnprepareResourcesResponse": {"claims": 1},
    "NodeUnprepareResourceResponse": {"error": 1},
    "Claim": {"namespace": 1, "uid": 2, "name": 3},
}


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_dra_api_matches_the_kubelet(version: str) -> None:
    module = importlib.import_module(f"kubelet_plugin.gen.dra.{version}.api_pb2")
    package = f"k8s.io.kubelet.pkg.apis.dra.{version}"
    assert module.DESCRIPTOR.package == package
    expected_paths = {
        f"/{package}.DRAPlugin/NodePrepareResources",
        f"/{package}.DRAPlugin/NodeUnprepareResources",
    }
    assert _method_paths(module.DESCRIPTOR) == expected_paths

    grpc_module = importlib.import_module(f"kubelet_plugin.gen.dra.{version}.api_pb2_grpc")
    channel = _RecordingChannel()
    grpc_module.DRAPluginStub(channel)
    assert channel.paths == expected_paths

    expected = {name: dict(fields) for name, fields in DRA_MESSAGES.items()}
    if version == "v1":
        expected["Device"]["share_id"] = 5
    for message, fields in expected.items():
        assert _fields(module, message) == fields, f"{package}.{message}"

    for response in ("NodePrepareResourcesResponse", "NodeUnprepareResourcesResponse"):
        claims = module.DESCRIPTOR.message_types_by_name[response].fields_by_name["claims"]
        assert claims.message_type.GetOptions().map_entry, f"{response}.claims must be a map"
        key = claims.message_type.fields_by_name["key"]
        assert key.type == FieldDescriptor.TYPE_STRING


def test_share_id_is_an_optional_string_in_v1() -> None:
    from kubelet_plugin.gen.dra.v1 import api_pb2

    share_id = api_pb2.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert share_id.type == FieldDescriptor.TYPE_STRING
    assert share_id.has_presence, "share_id must be `optional` so 'unset' differs from ''"
    assert not api_pb2.Device().HasField("share_id")


def test_registration_api_matches_the_kubelet() -> None:
    from kubelet_plugin.gen.pluginregistration.v1 import api_pb2, api_pb2_grpc

    assert api_pb2.DESCRIPTOR.package == "pluginregistration"
    expected_paths = {
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    }
    assert _method_paths(api_pb2.DESCRIPTOR) == expected_paths
    channel = _RecordingChannel()
    api_pb2_grpc.RegistrationStub(cast(grpc.Channel, channel))
    assert channel.paths == expected_paths
    assert _fields(api_pb2, "PluginInfo") == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }
    assert _fields(api_pb2, "RegistrationStatus") == {"plugin_registered": 1, "error": 2}
    assert _fields(api_pb2, "RegistrationStatusResponse") == {}
    assert _fields(api_pb2, "InfoRequest") == {}


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_health_api_matches_the_kubelet(version: str) -> None:
    """v1 (kubelet 1.37) is v1alpha1 under another package: the same fields and method."""
    api_pb2 = importlib.import_module(f"kubelet_plugin.gen.dra_health.{version}.api_pb2")

    assert api_pb2.DESCRIPTOR.package == version
    assert _method_paths(api_pb2.DESCRIPTOR) == {f"/{version}.DRAResourceHealth/NodeWatchResources"}
    method = api_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods[0]
    assert method.server_streaming
    assert not method.client_streaming
    assert _fields(api_pb2, "NodeWatchResourcesRequest") == {}
    assert _fields(api_pb2, "DeviceIdentifier") == {"pool_name": 1, "device_name": 2}
    assert _fields(api_pb2, "DeviceHealth") == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,  # kubelet 1.36
    }
    assert _fields(api_pb2, "NodeWatchResourcesResponse") == {"devices": 1}
    statuses = api_pb2.DESCRIPTOR.enum_types_by_name["HealthStatus"]
    assert {v.name: v.number for v in statuses.values} == {
        "UNKNOWN": 0,
        "HEALTHY": 1,
        "UNHEALTHY": 2,
    }


def test_make_proto_regenerates_exactly_the_committed_files() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        written = protogen.generate(gen_dir=Path(tmp) / "gen")
        assert (Path(tmp) / "gen" / "dra" / "v1" / "api_pb2.py").is_file()
    committed = sorted(
        p.relative_to(protogen.GEN_DIR)
        for p in protogen.GEN_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert written == committed, REGENERATE
