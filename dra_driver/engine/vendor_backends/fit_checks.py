"""The card checks HAMi's vendor Fits share.

After its own health and type checks, each vendor's Fit refuses a card in the
same order: the pod's uuid filters (CheckUUID), no free time-slice, then under
the mutex policy a card already in use. One function gives that verdict so a
vendor's Fit states only the checks that are its own.
"""

from __future__ import annotations

from dra_driver.engine import reasons
from dra_driver.engine.fit import uuid_allowed
from dra_driver.engine.grants import Slot
from dra_driver.engine.requests import DeviceFilters


def sharing_refusal(slot: Slot, filters: DeviceFilters, mutex: bool) -> str:
    """The reason the card is refused by the shared checks (module docstring), or
    empty when it passes them all; `mutex` is the node policy's."""
    device = slot.device
    if not uuid_allowed(filters, device.id):
        return reasons.CARD_UUID_MISMATCH
    if device.count <= slot.used:
        return reasons.CARD_TIME_SLICING_EXHAUSTED
    if mutex and slot.used > 0:
        return reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    return ""
