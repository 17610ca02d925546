"""Fakes and builders shared by the tests, the demo and the benchmarks.

One import point, `dra_driver.testing`, split by job:

    inventory       NVML records and node inventories with real numbers
    kubelet         a kubelet-like gRPC client; a fake DraService
    claims          allocated ResourceClaims and opaque configs
    apiserver       a small resource.k8s.io/v1 apiserver over HTTP; a recording Cluster
    fake_pynvml     a fake pynvml module over the simulated hardware
    plugin_process  the real plugin daemon in a child process
    allocator       slices, classes and claims for allocator scenarios
    mig             dynamic-MIG claims and live-instance views
    simulator       an apiserver with Nodes, Pods and templates for `explain`
"""

from __future__ import annotations

from dra_driver.testing.allocator import (
    PythonSelectors,
    make_api_attribute,
    make_device_class,
    make_device_request,
    make_resource_claim,
    make_resource_slice,
    make_slice_device,
)
from dra_driver.testing.apiserver import (
    FakeApiServer,
    RecordingCluster,
)
from dra_driver.testing.claims import (
    TEST_CLAIM_UID,
    TEST_DRIVER,
    TEST_POOL,
    make_allocated_claim,
    make_opaque_config,
)
from dra_driver.testing.fake_pynvml import (
    FAKE_NVML_ERRORS,
    FakeNVMLError,
    FakePynvml,
    fake_nvml_error,
    fake_pynvml,
    fake_sysfs,
)
from dra_driver.testing.inventory import (
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
from dra_driver.testing.kubelet import (
    DRA_API_VERSIONS,
    FakeDraService,
    KubeletClient,
    claim_ref,
    fake_result_device,
)
from dra_driver.testing.mig import (
    MIG_DEVICE_CLASS,
    PARENT_UUID_ATTRIBUTE,
    LiveMigInstance,
    live_mig_instances,
    make_mig_profile_claim,
    plugin_hardware,
    plugin_sim,
)
from dra_driver.testing.plugin_process import (
    PLUGIN_START_TIMEOUT_S,
    PluginProcess,
)
from dra_driver.testing.simulator import (
    FakeClusterApiServer,
)

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
]
