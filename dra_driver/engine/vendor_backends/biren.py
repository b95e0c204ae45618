"""Biren (request Type `Biren`) and the `biren:` section of device-config.yaml.

HAMi's `pkg/device/biren` is Vastai without dies (reference/hami-vendors.md):
whole devices (`{count, memory 0, 100 %, 0 cores}`), the JSON register
`hami.io/node-biren-register` with 100 cores per device, the handshake
`hami.io/node-handshake-biren`, the uuid pair under `birentech.com/`, the pod
keys `hami.io/Biren-devices-*`, the plain whole-device Fit (health, type,
uuid, free slot, mutex), ScoreNode 0 and the shared lock.
"""

from __future__ import annotations

from functools import partial

from dra_driver.engine.vendor_backends.base import BackendFamily
from dra_driver.engine.vendor_backends.vastai import (
    WholeDeviceBackend,
    WholeDeviceConfig,
    fit_whole_devices,
    whole_device_adapter,
)

BIREN = "Biren"


def biren_backend(config: WholeDeviceConfig) -> WholeDeviceBackend:
    fit = partial(fit_whole_devices, vendor=BIREN, dies=False)
    return WholeDeviceBackend(
        whole_device_adapter(BIREN, config.resource_count_name, "birentech.com", fit),
        register_key="hami.io/node-biren-register",
        handshake_key="hami.io/node-handshake-biren",
    )


FAMILY = BackendFamily(
    section="biren",
    model=WholeDeviceConfig,
    build=lambda config: (biren_backend(config),),
)
