"""ComputeDomainChannelConfig / ComputeDomainDaemonConfig: strict, and each for its own device."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.claims.allocated import parse_allocated_claim
from dra_driver.compute_domain.configs import (
    ComputeDomainChannelConfig,
    ComputeDomainDaemonConfig,
    device_type,
    effective_configs,
)
from dra_driver.compute_domain.names import DRIVER_NAME
from dra_driver.errors import ClaimError
from tests.fakes import TEST_CLAIM_UID, make_allocated_claim, make_opaque_config

CHANNEL = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomainChannelConfig",
    "domainID": "cd-uid-1",
}
DAEMON = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomainDaemonConfig",
    "domainID": "cd-uid-1",
}


def _claim(configs: list[dict[str, Any]], results: Any = (("channel", "channel-0"),)) -> Any:
    obj = make_allocated_claim(
        results=results,
        configs=configs,
        driver=DRIVER_NAME,
        device_class="compute-domain-default-channel.nvidia.com",
    )
    return parse_allocated_claim(obj, driver=DRIVER_NAME, expected_uid=TEST_CLAIM_UID)


def _config(parameters: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return make_opaque_config(parameters, driver=DRIVER_NAME, **kwargs)


def test_channel_config_with_nvidia_fields() -> None:
    configs = effective_configs(
        _claim([_config({**CHANNEL, "allocationMode": "All"}, requests=["channel"])])
    )
    config = configs["channel/channel-0"]
    assert isinstance(config, ComputeDomainChannelConfig)
    assert (config.domain_id, config.allocation_mode) == ("cd-uid-1", "All")


def test_allocation_mode_defaults_to_single() -> None:
    config = effective_configs(_claim([_config(CHANNEL)]))["channel/channel-0"]
    assert isinstance(config, ComputeDomainChannelConfig)
    assert config.allocation_mode == "Single"


def test_daemon_config_applies_to_the_daemon_device() -> None:
    claim = _claim([_config(DAEMON)], results=(("daemon", "daemon-0"),))
    assert isinstance(effective_configs(claim)["daemon/daemon-0"], ComputeDomainDaemonConfig)


def test_last_config_wins() -> None:
    later = {**CHANNEL, "domainID": "cd-uid-2"}
    config = effective_configs(_claim([_config(CHANNEL, source="FromClass"), _config(later)]))
    assert config["channel/channel-0"].domain_id == "cd-uid-2"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({**CHANNEL, "domainId": "x"}, "domainId: Extra inputs are not permitted"),
        ({**CHANNEL, "domainID": ""}, "domainID: String should have at least 1 character"),
        ({k: v for k, v in CHANNEL.items() if k != "domainID"}, "domainID: Field required"),
        (
            {**CHANNEL, "allocationMode": "Many"},
            "allocationMode: Input should be 'Single' or 'All'",
        ),
        (
            {**CHANNEL, "apiVersion": "resource.nvidia.com/v1"},
            "apiVersion: Input should be 'resource.nvidia.com/v1beta1'",
        ),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"},
            "kind is 'GpuConfig'; compute-domain.nvidia.com understands resource.nvidia.com/"
            "v1beta1 ComputeDomainChannelConfig and ComputeDomainDaemonConfig",
        ),
    ],
)
def test_bad_configs_name_the_claim_entry_and_field(
    parameters: dict[str, Any], message: str
) -> None:
    with pytest.raises(ClaimError) as caught:
        effective_configs(_claim([_config(parameters)]))
    assert "ResourceClaim default/claim-1" in str(caught.value)
    assert "status.allocation.devices.config[0]" in str(caught.value)
    assert message in str(caught.value)


def test_a_config_for_the_wrong_device_is_an_error() -> None:
    with pytest.raises(
        ClaimError,
        match="a ComputeDomainChannelConfig names request 'daemon', but its device daemon-0 "
        "is a daemon device; use ComputeDomainDaemonConfig",
    ):
        effective_configs(
            _claim([_config(CHANNEL, requests=["daemon"])], results=(("daemon", "daemon-0"),))
        )
    with pytest.raises(ClaimError, match="no ComputeDomainChannelConfig applies"):
        # an unnamed daemon config does not apply to a channel: the channel has none
        effective_configs(_claim([_config(DAEMON)]))


def test_a_device_without_a_config_is_an_error() -> None:
    with pytest.raises(
        ClaimError,
        match="request 'channel' got channel-0, but no ComputeDomainChannelConfig applies to it",
    ):
        effective_configs(_claim([]))


def test_device_type() -> None:
    assert device_type("channel-0") == "channel"
    assert device_type("daemon-0") == "daemon"
    with pytest.raises(ClaimError, match=r"'gpu-0' is not a compute-domain\.nvidia\.com device"):
        device_type("gpu-0")
