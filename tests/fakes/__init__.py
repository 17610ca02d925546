"""Fakes and builders shared by the tests and the benchmarks (not part of the installed package).

One import point, `tests.fakes`, split by job:

    inventory       NVML records and node inventories with real numbers
    kubelet         a fake DraService (the kubelet-like client is kubelet_plugin.kubelet_client)
    claims          allocated ResourceClaims and opaque configs
    apiserver       a small resource.k8s.io/v1 apiserver over HTTP; a recording Cluster
    fake_pynvml     a fake pynvml module over the simulated hardware
    plugin_process  dra_driver.composition.plugin_process plus test-only powers (node reboot, RSS)
    allocator       slices, classes and claims for allocator scenarios
    mig             dynamic-MIG claims and live-instance views
    simulator       an apiserver with Nodes, Pods and templates for `explain`
    waiting         wait_until: poll a condition, fail naming what was awaited
"""

from __future__ import annotations

from tests.fakes.allocator import (
    PythonSelectors,
    make_api_attribute,
    make_device_class,
    make_device_request,
    make_resource_claim,
    make_resource_slice,
    make_slice_device,
)
from tests.fakes.apiserver import (
    FakeApiServer,
    RecordingCluster,
)
from tests.fakes.claims import (
    TEST_CLAIM_UID,
    TEST_DRIVER,
    TEST_POOL,
    make_allocated_claim,
    make_opaque_config,
)
from tests.fakes.fake_pynvml import (
    FAKE_NVML_ERRORS,
    FakeNVMLError,
    FakePynvml,
    fake_nvml_error,
    fake_pynvml,
    fake_sysfs,
)
from tests.fakes.inventory import (
    DGX_H100_BUSES,
    GPU_MODELS,
    InventoryNvml,
    a100_40gb_gi_profiles,
    a100_static_mig_inventory,
    dgx_h100_inventory,
    fake_gpu_uuid,
    fake_mig_uuid,
    h100_80gb_gi_profiles,
    make_gpu_info,
    make_gpu_inventory,
    make_mig_device,
    make_system_info,
)
from tests.fakes.kubelet import (
    DRA_API_VERSIONS,
    FakeDraService,
    KubeletClient,
    claim_ref,
    fake_result_device,
)
from tests.fakes.mig import (
    MIG_DEVICE_CLASS,
    PARENT_UUID_ATTRIBUTE,
    LiveMigInstance,
    live_mig_instances,
    make_mig_profile_claim,
    plugin_hardware,
    plugin_sim,
)
from tests.fakes.plugin_process import (
    PLUGIN_START_TIMEOUT_S,
    PluginProcess,
)
from tests.fakes.simulator import (
    FakeClusterApiServer,
)
from tests.fakes.waiting import wait_until

__all__ = [
    "DGX_H100_BUSES",
    "DRA_API_VERSIONS",
    "FAKE_NVML_ERRORS",
    "FakeApiServer",
    "FakeClusterApiServer",
    "FakeDraService",
    "FakeNVMLError",
    "FakePynvml",
    "GPU_MODELS",
    "InventoryNvml",
    "KubeletClient",
    "LiveMigInstance",
    "MIG_DEVICE_CLASS",
    "PARENT_UUID_ATTRIBUTE",
    "PLUGIN_START_TIMEOUT_S",
    "PluginProcess",
    "PythonSelectors",
    "RecordingCluster",
    "TEST_CLAIM_UID",
    "TEST_DRIVER",
    "TEST_POOL",
    "a100_40gb_gi_profiles",
    "a100_static_mig_inventory",
    "claim_ref",
    "dgx_h100_inventory",
    "fake_gpu_uuid",
    "fake_mig_uuid",
    "fake_nvml_error",
    "fake_pynvml",
    "fake_result_device",
    "fake_sysfs",
    "h100_80gb_gi_profiles",
    "live_mig_instances",
    "make_allocated_claim",
    "make_api_attribute",
    "make_device_class",
    "make_device_request",
    "make_gpu_info",
    "make_gpu_inventory",
    "make_mig_device",
    "make_mig_profile_claim",
    "make_opaque_config",
    "make_resource_claim",
    "make_resource_slice",
    "make_slice_device",
    "make_system_info",
    "plugin_hardware",
    "plugin_sim",
    "wait_until",
]
