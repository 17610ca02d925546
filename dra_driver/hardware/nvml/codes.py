"""NVML constants as `nvml.h` and pynvml define them.

Return codes, architecture and brand enums, and the GPU/compute-instance
profile enums. Both backends use these numbers, so an error raised by the
simulator carries the same code real hardware would return.
"""

from __future__ import annotations

from typing import Final

# nvmlReturn_t
SUCCESS: Final = 0
ERROR_UNINITIALIZED: Final = 1
ERROR_INVALID_ARGUMENT: Final = 2
ERROR_NOT_SUPPORTED: Final = 3
ERROR_NO_PERMISSION: Final = 4
ERROR_ALREADY_INITIALIZED: Final = 5
ERROR_NOT_FOUND: Final = 6
ERROR_INSUFFICIENT_SIZE: Final = 7
ERROR_DRIVER_NOT_LOADED: Final = 9
ERROR_TIMEOUT: Final = 10
ERROR_LIBRARY_NOT_FOUND: Final = 12
ERROR_FUNCTION_NOT_FOUND: Final = 13  # the loaded library lacks the entry point (older driver)
ERROR_GPU_IS_LOST: Final = 15
ERROR_RESET_REQUIRED: Final = 16
ERROR_IN_USE: Final = 19
ERROR_INSUFFICIENT_RESOURCES: Final = 23
ERROR_ARGUMENT_VERSION_MISMATCH: Final = 25  # a versioned struct's `version` the library lacks
ERROR_UNKNOWN: Final = 999

ERROR_STRINGS: Final[dict[int, str]] = {
    SUCCESS: "Success",
    ERROR_UNINITIALIZED: "Uninitialized",
    ERROR_INVALID_ARGUMENT: "Invalid Argument",
    ERROR_NOT_SUPPORTED: "Not Supported",
    ERROR_NO_PERMISSION: "Insufficient Permissions",
    ERROR_ALREADY_INITIALIZED: "Already Initialized",
    ERROR_NOT_FOUND: "Not Found",
    ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    ERROR_TIMEOUT: "Timeout",
    ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    ERROR_GPU_IS_LOST: "GPU is lost",
    ERROR_RESET_REQUIRED: "GPU requires restart",
    ERROR_IN_USE: "In use by another client",
    ERROR_INSUFFICIENT_RESOURCES: "Insufficient Resources",
    ERROR_ARGUMENT_VERSION_MISMATCH: "Argument Version Mismatch",
    ERROR_UNKNOWN: "Unknown Error",
}

# nvmlDeviceArchitecture_t -> the strings go-nvlib (and so NVIDIA's driver) publish
ARCH_NAMES: Final[dict[int, str]] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
ARCH_AMPERE: Final = 7
ARCH_HOPPER: Final = 9

# nvmlBrandType_t -> go-nvlib's GetBrandAsString
BRAND_NAMES: Final[dict[int, str]] = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "VApps",
    8: "VPC",
    9: "VCS",
    10: "VWS",
    11: "CloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}

# nvmlDeviceAddressingModeType_t -> go-nvlib's GetAddressingModeAsString (what NVIDIA's driver
# publishes as `addressingMode`): how system-allocated memory is reachable from the GPU.
ADDRESSING_MODE_NONE: Final = 0
ADDRESSING_MODE_HMM: Final = 1
ADDRESSING_MODE_ATS: Final = 2
ADDRESSING_MODE_NAMES: Final[dict[int, str]] = {
    ADDRESSING_MODE_NONE: "None",
    ADDRESSING_MODE_HMM: "HMM",
    ADDRESSING_MODE_ATS: "ATS",
}

# NVML_GPU_INSTANCE_PROFILE_* enum values (NOT profile ids) and their slice counts
GPU_INSTANCE_PROFILE_COUNT: Final = 0x12
GI_ENUM_SLICES: Final[dict[int, int]] = {
    0x0: 1,  # 1_SLICE
    0x1: 2,  # 2_SLICE
    0x2: 3,  # 3_SLICE
    0x3: 4,  # 4_SLICE
    0x4: 7,  # 7_SLICE
    0x5: 8,  # 8_SLICE
    0x6: 6,  # 6_SLICE
    0x7: 1,  # 1_SLICE_REV1 (+me)
    0x8: 2,  # 2_SLICE_REV1 (+me)
    0x9: 1,  # 1_SLICE_REV2 (1 compute slice, 2 memory slices)
    0xA: 1,  # 1_SLICE_GFX
    0xB: 2,  # 2_SLICE_GFX
    0xC: 4,  # 4_SLICE_GFX
    0xD: 1,  # 1_SLICE_NO_ME
    0xE: 2,  # 2_SLICE_NO_ME
    0xF: 1,  # 1_SLICE_ALL_ME
    0x10: 2,  # 2_SLICE_ALL_ME
    0x11: 3,  # 3_SLICE_GFX
}
# go-nvlib name suffix per GI enum
GI_ENUM_SUFFIX: Final[dict[int, str]] = {
    0x7: "+me",
    0x8: "+me",
    0xA: "+gfx",
    0xB: "+gfx",
    0xC: "+gfx",
    0x11: "+gfx",
    0xD: "-me",
    0xE: "-me",
    0xF: "+me.all",
    0x10: "+me.all",
}

# NVML_COMPUTE_INSTANCE_PROFILE_* enum values; the CI profile id equals the enum
COMPUTE_INSTANCE_PROFILE_COUNT: Final = 9
CI_ENUM_SLICES: Final[dict[int, int]] = {
    0: 1,  # 1_SLICE
    1: 2,  # 2_SLICE
    2: 3,  # 3_SLICE
    3: 4,  # 4_SLICE
    4: 7,  # 7_SLICE
    5: 8,  # 8_SLICE
    6: 6,  # 6_SLICE
    7: 1,  # 1_SLICE_REV1 (default CI of the H100-class 1g.20gb GI)
    8: 7,  # 7_SLICE_NVL
}

# nvmlDeviceGpuRecoveryAction_t (nvml.h; BUS_RESET and SYSTEM_REBOOT only in pynvml 13.615+),
# read through the field value NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (drivers 565+).
FI_DEV_GET_GPU_RECOVERY_ACTION: Final = 230
VALUE_TYPE_UNSIGNED_INT: Final = 1  # nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_INT
RECOVERY_ACTION_NONE: Final = 0
RECOVERY_ACTION_GPU_RESET: Final = 1
RECOVERY_ACTION_NODE_REBOOT: Final = 2
RECOVERY_ACTION_DRAIN_P2P: Final = 3
RECOVERY_ACTION_DRAIN_AND_RESET: Final = 4
RECOVERY_ACTION_RECOVER_IMEX_DOMAIN: Final = 5
RECOVERY_ACTION_BUS_RESET: Final = 6
RECOVERY_ACTION_SYSTEM_REBOOT: Final = 7
RECOVERY_ACTION_NAMES: Final[dict[int, str]] = {
    RECOVERY_ACTION_NONE: "none",
    RECOVERY_ACTION_GPU_RESET: "gpu-reset",
    RECOVERY_ACTION_NODE_REBOOT: "node-reboot",
    RECOVERY_ACTION_DRAIN_P2P: "drain-p2p",
    RECOVERY_ACTION_DRAIN_AND_RESET: "drain-and-reset",
    RECOVERY_ACTION_RECOVER_IMEX_DOMAIN: "recover-imex-domain",
    RECOVERY_ACTION_BUS_RESET: "bus-reset",
    RECOVERY_ACTION_SYSTEM_REBOOT: "system-reboot",
}
