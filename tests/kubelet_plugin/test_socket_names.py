"""Socket names: the Go helper's rules, byte for byte, with its own test vectors.

The vectors come from the helper's `RollingUpdateRegistrarSocketFile` tests
(kubernetes/dynamic-resource-allocation, Kubernetes 1.37) and from
dra-example-driver's chart test that checks the path lengths the helper
selects. A plugin, its probe and its tools that disagreed on a name would
dial a socket that does not exist.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import ConfigError
from kubelet_plugin.socket_names import (
    UNIX_PATH_MAX,
    check_pod_uid,
    check_socket_path,
    dra_socket_path,
    go_path_join,
    registration_socket_path,
    rolling_update_registrar_socket_file,
)

KUBELET = Path("/var/lib/kubelet")
REGISTRY = "/var/lib/kubelet/plugins_registry"  # the helper's KubeletRegistryDir
UID = "ad4af911-5bcd-47c5-a554-f35cea869472"


def test_without_a_pod_uid_the_names_stay_the_classic_ones() -> None:
    assert str(dra_socket_path(KUBELET, "gpu.nvidia.com")) == (
        "/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock"
    )
    assert str(registration_socket_path(KUBELET, "gpu.nvidia.com")) == (
        "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock"
    )
    assert dra_socket_path(KUBELET, "gpu.nvidia.com", "") == dra_socket_path(
        KUBELET, "gpu.nvidia.com"
    )


def test_our_driver_on_the_default_root_keeps_the_full_uid() -> None:
    registration = registration_socket_path(KUBELET, "gpu.nvidia.com", UID)
    assert str(registration) == (
        "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-ad4af911-5bcd-47c5-a554-f35cea869472"
        "-reg.sock"
    )
    assert len(str(registration)) == 94
    dra = dra_socket_path(KUBELET, "gpu.nvidia.com", UID)
    assert str(dra) == (
        "/var/lib/kubelet/plugins/gpu.nvidia.com/dra-ad4af911-5bcd-47c5-a554-f35cea869472.sock"
    )
    assert len(str(dra)) == 85


def test_a_longer_kubelet_root_gets_the_hashed_uid() -> None:
    microk8s = Path("/var/snap/microk8s/common/var/lib/kubelet")
    registration = registration_socket_path(microk8s, "gpu.nvidia.com", UID)
    assert registration.name == "gpu.nvidia.com-Jk8-oymVURI-reg.sock"
    # The DRA socket with the full UID would be 110 bytes, too long to bind: hashed the same
    # way, so a MicroK8s node runs the shipped DaemonSet (POD_UID set) without a flag.
    assert len(str(microk8s / "plugins/gpu.nvidia.com" / f"dra-{UID}.sock")) == 110
    dra = dra_socket_path(microk8s, "gpu.nvidia.com", UID)
    assert dra.name == "dra-Jk8-oymVURI.sock"
    check_socket_path(dra, "DRA socket")
    check_socket_path(registration, "registration socket")
    assert dra != dra_socket_path(microk8s, "gpu.nvidia.com", UID.replace("a", "b"))


# The helper's unit tests (kubeletplugin/draplugin_test.go).


def test_helper_length_bound() -> None:
    name = rolling_update_registrar_socket_file(REGISTRY, "gpu.dra-example-driver.sigs.k8s.io", UID)
    assert len(go_path_join(REGISTRY, name)) <= UNIX_PATH_MAX


def test_helper_prefers_full_uid() -> None:
    uid = "11111111-2222-3333-4444-555555555555"
    assert rolling_update_registrar_socket_file(REGISTRY, "example.com/driver", uid) == (
        f"example.com/driver-{uid}-reg.sock"
    )


def test_helper_uses_hashed_uid_for_long_driver_name() -> None:
    driver = "gpu.dra-example-driver.sigs.k8s.io"
    got = rolling_update_registrar_socket_file(REGISTRY, driver, UID)
    assert got == "gpu.dra-example-driver.sigs.k8s.io-Jk8-oymVURI-reg.sock"
    assert UID not in got


def test_helper_uses_shortest_form_for_very_long_driver_name() -> None:
    driver = "a" * 100
    got = rolling_update_registrar_socket_file(REGISTRY, driver, UID)
    assert got.startswith("dra-")
    assert got.endswith("-reg.sock")
    assert driver not in got


def test_helper_respects_custom_registry_dir() -> None:
    registry = go_path_join("/var/lib/kubelet", "x" * 20, "plugins_registry")
    uid = "11111111-2222-3333-4444-555555555555"
    full = f"example.com/driver-{uid}-reg.sock"
    assert len(go_path_join(registry, full)) > UNIX_PATH_MAX  # the test's own setup
    got = rolling_update_registrar_socket_file(registry, "example.com/driver", uid)
    assert len(go_path_join(registry, got)) <= UNIX_PATH_MAX
    assert got != full


def test_helper_is_deterministic_and_distinct_inputs_do_not_collide() -> None:
    uid = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    one = rolling_update_registrar_socket_file(REGISTRY, "driver.one", uid)
    assert one == rolling_update_registrar_socket_file(REGISTRY, "driver.one", uid)
    assert one != rolling_update_registrar_socket_file(REGISTRY, "driver.two", uid)
    other_uid = "ffffffff-ffff-ffff-ffff-ffffffffffff"
    assert one != rolling_update_registrar_socket_file(REGISTRY, "driver.one", other_uid)


# dra-example-driver's TestRegistrationSocketPathLimit: the path length the helper selects.
CHART_UID = "f358c92b-e974-4f29-a84f-6c64bec0949d"


@pytest.mark.parametrize(
    ("driver_length", "registry", "want_bytes", "want_name"),
    [
        (27, REGISTRY, 107, f"aaaaaaaaaaaaaaa.example.org-{CHART_UID}-reg.sock"),
        (28, REGISTRY, 108, f"aaaaaaaaaaaaaaaa.example.org-{CHART_UID}-reg.sock"),
        (29, REGISTRY, 84, "aaaaaaaaaaaaaaaaa.example.org-W75GxEP6R9A-reg.sock"),
        (34, "/" + "r" * 50, 107, "aaaaaaaaaaaaaaaaaaaaaa.example.org-W75GxEP6R9A-reg.sock"),
        (34, "/" + "r" * 51, 108, "aaaaaaaaaaaaaaaaaaaaaa.example.org-W75GxEP6R9A-reg.sock"),
        (34, "/" + "r" * 52, 89, "dra-cfIMA15-oasv6nPEi-1tqA-reg.sock"),
        (34, "/" + "r" * 70, 107, "dra-cfIMA15-oasv6nPEi-1tqA-reg.sock"),
        (34, "/" + "r" * 71, 108, "dra-cfIMA15-oasv6nPEi-1tqA-reg.sock"),
        (34, "/" + "r" * 72, 109, "dra-cfIMA15-oasv6nPEi-1tqA-reg.sock"),
        (27, REGISTRY + "/./", 107, f"aaaaaaaaaaaaaaa.example.org-{CHART_UID}-reg.sock"),
    ],
)
def test_chart_vectors(driver_length: int, registry: str, want_bytes: int, want_name: str) -> None:
    driver = "a" * (driver_length - 12) + ".example.org"
    name = rolling_update_registrar_socket_file(registry, driver, CHART_UID)
    assert name == want_name
    assert len(go_path_join(registry, name)) == want_bytes
    # As the chart does, a selected path over 107 bytes is refused: gRPC cannot bind it.
    path = Path(go_path_join(registry, name))
    if want_bytes > 107:
        with pytest.raises(ConfigError, match=f"is {want_bytes} bytes; Unix sockets allow"):
            check_socket_path(path, "the registration socket")
    else:
        check_socket_path(path, "the registration socket")


@pytest.mark.parametrize("uid", ["", "../x", "a/b", "a\x00b", "u" * 129, "-leading-dash"])
def test_a_pod_uid_that_cannot_be_part_of_a_file_name_is_refused(uid: str) -> None:
    with pytest.raises(ConfigError, match="--pod-uid"):
        check_pod_uid(uid)
