"""CDI specs for claims: names, device nodes, minimum versions and validation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from dra_driver.container import cdi
from dra_driver.container.cdi import CdiDevice, ContainerEdits, DeviceNode, Hook, Mount
from dra_driver.errors import CdiError

UID = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"
LETTER_UID = "b7cf0d2a-5d1e-4c61-9a0e-3f5a1c2b7d90"
UVM = 234
CAPS = 508


def test_names_follow_nvidia_conventions() -> None:
    assert cdi.KIND == "k8s.gpu.nvidia.com/claim"
    assert cdi.cdi_device_name(UID, "gpu-0") == f"{UID}-gpu-0"
    assert cdi.qualified_device_id(UID, "gpu-0") == f"k8s.gpu.nvidia.com/claim={UID}-gpu-0"
    assert cdi.spec_file_name(UID) == f"k8s.gpu.nvidia.com-claim_{UID}.yaml"


def test_claim_uid_from_file_name_round_trips_and_rejects_others() -> None:
    assert cdi.claim_uid_from_file_name(cdi.spec_file_name(UID)) == UID
    for other in [
        "nvidia.yaml",
        "k8s.gpu.nvidia.com-claim_.yaml",
        f"k8s.gpu.nvidia.com-claim_{UID}.json",
        f".tmp-k8s.gpu.nvidia.com-claim_{UID}.yaml.x1y2",
        "k8s.gpu.nvidia.com-claim_-bad-.yaml",
    ]:
        assert cdi.claim_uid_from_file_name(other) is None, other


@pytest.mark.parametrize("uid", ["", "../etc", "a/b", "-abc", "abc-", "a b"])
def test_unusable_claim_uids_are_rejected(uid: str) -> None:
    with pytest.raises(CdiError, match="claim UID"):
        cdi.spec_file_name(uid)


def test_gpu_edits() -> None:
    edits = cdi.gpu_edits(3)
    assert edits.to_dict() == {
        "deviceNodes": [{"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3}]
    }


def test_common_edits() -> None:
    assert cdi.common_edits(UVM).to_dict() == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [
            {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
            {"path": "/dev/nvidia-uvm", "type": "c", "major": UVM, "minor": 0},
            {"path": "/dev/nvidia-uvm-tools", "type": "c", "major": UVM, "minor": 1},
            {"path": "/dev/nvidia-modeset", "type": "c", "major": 195, "minor": 254},
        ],
    }


def test_mig_edits_parent_and_two_caps_with_file_mode() -> None:
    edits = cdi.mig_edits(0, CAPS, gi_cap=(12, 292), ci_cap=(13, 256))
    assert edits.to_dict()["deviceNodes"] == [
        {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0},
        {
            "path": "/dev/nvidia-caps/nvidia-cap12",
            "type": "c",
            "major": CAPS,
            "minor": 12,
            "fileMode": 0o444,
        },
        {
            "path": "/dev/nvidia-caps/nvidia-cap13",
            "type": "c",
            "major": CAPS,
            "minor": 13,
            "fileMode": 0o400,
        },
    ]


def test_mig_edits_reject_non_permission_modes() -> None:
    with pytest.raises(CdiError, match="nvidia-cap13: DeviceFileMode 4096"):
        cdi.mig_edits(0, CAPS, gi_cap=(12, 292), ci_cap=(13, 4096))


def full_spec(uid: str = UID) -> dict[str, Any]:
    return cdi.claim_spec(
        uid,
        [
            CdiDevice("gpu-0", cdi.gpu_edits(0)),
            CdiDevice("gpu-1-mig-1g10gb-19-0", cdi.mig_edits(1, CAPS, (147, 292), (148, 292))),
        ],
        cdi.common_edits(UVM),
    )


def test_claim_spec_shape() -> None:
    spec = full_spec()
    assert list(spec) == ["cdiVersion", "kind", "devices", "containerEdits"]
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert [d["name"] for d in spec["devices"]] == [f"{UID}-gpu-0", f"{UID}-gpu-1-mig-1g10gb-19-0"]
    assert spec["containerEdits"] == cdi.common_edits(UVM).to_dict()
    assert spec["devices"][0]["containerEdits"] == cdi.gpu_edits(0).to_dict()


def test_uid_starting_with_a_digit_needs_0_5_0() -> None:
    assert full_spec(UID)["cdiVersion"] == "0.5.0"


def test_uid_starting_with_a_letter_needs_only_0_3_0() -> None:
    assert full_spec(LETTER_UID)["cdiVersion"] == "0.3.0"


def test_spec_round_trips_through_yaml() -> None:
    spec = full_spec()
    text = yaml.safe_dump(spec, sort_keys=False)
    assert yaml.safe_load(text) == spec
    cdi.validate_spec(yaml.safe_load(text))


def test_empty_common_edits_are_omitted() -> None:
    spec = cdi.claim_spec(LETTER_UID, [CdiDevice("gpu-0", cdi.gpu_edits(0))], ContainerEdits())
    assert "containerEdits" not in spec


def test_claim_spec_validation_errors() -> None:
    with pytest.raises(CdiError, match="devices must be a non-empty list"):
        cdi.claim_spec(UID, [], cdi.common_edits(UVM))
    with pytest.raises(CdiError, match="appears twice"):
        cdi.claim_spec(
            UID,
            [CdiDevice("gpu-0", cdi.gpu_edits(0)), CdiDevice("gpu-0", cdi.gpu_edits(0))],
            ContainerEdits(),
        )
    with pytest.raises(CdiError, match="empty device edits"):
        cdi.claim_spec(UID, [CdiDevice("gpu-0")], cdi.common_edits(UVM))
    with pytest.raises(CdiError, match="CDI device name"):
        cdi.claim_spec(UID, [CdiDevice("gpu-0-", cdi.gpu_edits(0))], ContainerEdits())
    with pytest.raises(CdiError, match=r"env\[0\] 'NOVALUE' is not 'NAME=value'"):
        cdi.claim_spec(
            UID, [CdiDevice("gpu-0", ContainerEdits(env=("NOVALUE",)))], ContainerEdits()
        )
    with pytest.raises(CdiError, match="hookName 'onStart'"):
        cdi.claim_spec(
            UID,
            [CdiDevice("gpu-0", ContainerEdits(hooks=(Hook("onStart", "/bin/true"),)))],
            ContainerEdits(),
        )
    node = DeviceNode("/dev/nvidia0", 195, 0, permissions="rwx")
    with pytest.raises(CdiError, match="permissions 'rwx'"):
        cdi.claim_spec(
            UID, [CdiDevice("gpu-0", ContainerEdits(device_nodes=(node,)))], ContainerEdits()
        )


# -- minimum version table ----------------------------------------------------


def spec_with(
    *,
    name: str = "gpu0",
    kind: str = "k8s.gpu.nvidia.com/claim",
    edits: dict[str, Any] | None = None,
    common: dict[str, Any] | None = None,
    **top: Any,
) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": name,
        "containerEdits": edits or {"deviceNodes": [{"path": "/dev/nvidia0"}]},
    }
    spec: dict[str, Any] = {"cdiVersion": "0.3.0", "kind": kind, "devices": [device], **top}
    if common is not None:
        spec["containerEdits"] = common
    return spec


MOUNT = {"hostPath": "/a", "containerPath": "/b"}


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        (spec_with(), "0.3.0"),
        (spec_with(edits={"mounts": [MOUNT]}), "0.3.0"),
        (spec_with(edits={"mounts": [{**MOUNT, "type": "bind"}]}), "0.4.0"),
        (spec_with(common={"mounts": [{**MOUNT, "type": "bind"}]}), "0.4.0"),
        (spec_with(edits={"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y"}]}), "0.5.0"),
        (spec_with(common={"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y"}]}), "0.5.0"),
        (spec_with(name="0gpu"), "0.5.0"),
        (spec_with(name="_gpu"), "0.5.0"),
        (spec_with(annotations={"a": "b"}), "0.6.0"),
        (spec_with(kind="k8s.gpu.nvidia.com/claim.v2"), "0.6.0"),
        (spec_with(edits={"additionalGids": [44]}), "0.7.0"),
        (spec_with(common={"intelRdt": {"closID": "x"}}), "0.7.0"),
        (spec_with(edits={"intelRdt": {"schemata": ["L3:0=f"]}}), "1.1.0"),
        (spec_with(edits={"netDevices": [{"hostInterfaceName": "eth0", "name": "e"}]}), "1.1.0"),
        (
            spec_with(name="0gpu", edits={"mounts": [{**MOUNT, "type": "bind"}]}),
            "0.5.0",
        ),
    ],
)
def test_minimum_version_table(spec: dict[str, Any], version: str) -> None:
    assert cdi.minimum_cdi_version(spec) == version


def test_device_annotations_need_0_6_0() -> None:
    spec = spec_with()
    spec["devices"][0]["annotations"] = {"k": "v"}
    assert cdi.minimum_cdi_version(spec) == "0.6.0"


def test_dots_in_vendor_do_not_raise_the_version() -> None:
    assert cdi.minimum_cdi_version(spec_with(kind="a.b.c/claim")) == "0.3.0"


def test_validate_rejects_version_below_minimum_and_unknown_versions() -> None:
    spec = spec_with(name="0gpu")
    with pytest.raises(CdiError, match=r"cdiVersion 0\.3\.0 is too low, the content needs 0\.5\.0"):
        cdi.validate_spec(spec)
    spec["cdiVersion"] = "0.9.0"
    with pytest.raises(CdiError, match=r"cdiVersion '0\.9\.0' is not one of"):
        cdi.validate_spec(spec)
    spec["cdiVersion"] = "1.1.0"
    cdi.validate_spec(spec)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.update(extra=1), "CDI spec: unknown field"),
        (lambda s: s["devices"][0].update(foo=1), r"devices\[0\]: unknown field\(s\) foo"),
        (lambda s: s["devices"][0]["containerEdits"].update(foo=1), "unknown field"),
        (lambda s: s["devices"][0]["containerEdits"]["deviceNodes"][0].update(x=1), "unknown"),
        (lambda s: s.update(kind="nvidia"), "is not '<vendor>/<class>'"),
        (lambda s: s.update(kind="1nvidia.com/gpu"), "vendor '1nvidia.com'"),
        (lambda s: s.update(kind="nvidia.com/gpu-"), "class 'gpu-'"),
        (lambda s: s.update(kind="nvidia.com/" + "c" * 64), "at most 63"),
        (lambda s: s["devices"][0]["containerEdits"]["deviceNodes"][0].pop("path"), "path is"),
        (
            lambda s: s["devices"][0]["containerEdits"]["deviceNodes"][0].update(type="x"),
            "type 'x'",
        ),
        (
            lambda s: s["devices"][0]["containerEdits"]["deviceNodes"][0].update(fileMode=0o4755),
            "fileMode",
        ),
        (
            lambda s: s["devices"][0]["containerEdits"].update(mounts=[{"hostPath": "/a"}]),
            "containerPath is required",
        ),
        (
            lambda s: s["devices"][0]["containerEdits"].update(hooks=[{"hookName": "prestart"}]),
            r"hooks\[0\]: path is required",
        ),
        (lambda s: s.update(annotations={"a": 1}), "annotations must map strings"),
    ],
)
def test_validate_spec_errors(mutate: Any, message: str) -> None:
    spec = copy.deepcopy(spec_with())
    spec["cdiVersion"] = "1.1.0"
    mutate(spec)
    with pytest.raises(CdiError, match=message):
        cdi.validate_spec(spec)


def test_edits_to_dict_emits_only_set_fields() -> None:
    edits = ContainerEdits(
        env=("A=1",),
        device_nodes=(DeviceNode("/dev/x", 1, 2, host_path="/dev/y", permissions="rw"),),
        mounts=(Mount("/h", "/c", type="bind", options=("ro", "nosuid")),),
        hooks=(Hook("createContainer", "/usr/bin/hook", args=("hook", "x"), timeout=5),),
    )
    assert edits.to_dict() == {
        "env": ["A=1"],
        "deviceNodes": [
            {"path": "/dev/x", "hostPath": "/dev/y", "type": "c", "major": 1, "minor": 2,
             "permissions": "rw"}
        ],
        "mounts": [
            {"hostPath": "/h", "containerPath": "/c", "type": "bind", "options": ["ro", "nosuid"]}
        ],
        "hooks": [
            {"hookName": "createContainer", "path": "/usr/bin/hook", "args": ["hook", "x"],
             "timeout": 5}
        ],
    }  # fmt: skip
    spec = cdi.claim_spec(LETTER_UID, [CdiDevice("gpu-0", edits)], ContainerEdits())
    assert spec["cdiVersion"] == "0.5.0"


def test_merged_edits_keep_order_and_drop_repeated_nodes() -> None:
    merged = cdi.gpu_edits(0).merged(cdi.mig_edits(0, CAPS, (3, 292), (4, 292)))
    assert [n.path for n in merged.device_nodes] == [
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap3",
        "/dev/nvidia-caps/nvidia-cap4",
    ]


class FakeDrm:
    """DRM nodes per bus id, as `HostInfo.drm_nodes` reads them from sysfs."""

    def __init__(self, nodes: dict[str, list[tuple[str, int, int]]]) -> None:
        self.nodes = nodes

    def drm_nodes(self, pci_bus_id: str) -> list[tuple[str, int, int]]:
        return self.nodes.get(pci_bus_id, [])


DRM = FakeDrm(
    {
        "0000:3b:00.0": [("card1", 226, 1), ("renderD128", 226, 128)],
        "0000:86:00.0": [("card2", 226, 2), ("renderD129", 226, 129)],
    }
)


def test_gpu_edits_add_the_gpus_drm_nodes_and_by_path_links() -> None:
    edits = cdi.gpu_edits(0, pci_bus_id="0000:3b:00.0", host=DRM, hooks=cdi.CdiHooks())
    assert edits.to_dict() == {
        "deviceNodes": [
            {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0},
            {"path": "/dev/dri/card1", "type": "c", "major": 226, "minor": 1},
            {"path": "/dev/dri/renderD128", "type": "c", "major": 226, "minor": 128},
        ],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/bin/nvidia-cdi-hook",
                "args": [
                    "nvidia-cdi-hook",
                    "create-symlinks",
                    "--link",
                    "../card1::/dev/dri/by-path/pci-0000:3b:00.0-card",
                    "--link",
                    "../renderD128::/dev/dri/by-path/pci-0000:3b:00.0-render",
                ],
                "env": ["NVIDIA_CTK_DEBUG=false"],
            }
        ],
    }


def test_a_gpu_without_drm_or_without_hooks_gets_only_what_applies() -> None:
    assert cdi.gpu_edits(0, pci_bus_id="0000:c1:00.0", host=DRM) == cdi.gpu_edits(0)
    no_links = cdi.gpu_edits(1, pci_bus_id="0000:86:00.0", host=DRM, hooks=cdi.NO_HOOKS)
    assert [n.path for n in no_links.device_nodes] == [
        "/dev/nvidia1",
        "/dev/dri/card2",
        "/dev/dri/renderD129",
    ]
    assert no_links.hooks == ()


def test_mig_devices_get_drm_nodes_only_with_a_graphics_profile() -> None:
    compute = cdi.mig_edits(
        0, CAPS, (12, 292), (13, 292), pci_bus_id="0000:3b:00.0", host=DRM, graphics=False
    )
    assert [n.path for n in compute.device_nodes] == [
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap12",
        "/dev/nvidia-caps/nvidia-cap13",
    ]
    gfx = cdi.mig_edits(
        0,
        CAPS,
        (48, 292),
        (49, 292),
        pci_bus_id="0000:3b:00.0",
        host=DRM,
        hooks=cdi.CdiHooks(),
        graphics=cdi.has_graphics("1g.24gb+gfx"),
    )
    assert [n.path for n in gfx.device_nodes][3:] == ["/dev/dri/card1", "/dev/dri/renderD128"]
    assert gfx.hooks[0].args[1] == "create-symlinks"
    assert [cdi.has_graphics(p) for p in ("1g.24gb+gfx", "2g.48gb+me.all", "1g.10gb", "4g-me")] == [
        True,
        False,
        False,
        False,
    ]
