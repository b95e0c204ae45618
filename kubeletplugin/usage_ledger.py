"""What the claims prepared (or being prepared) here hold of each device, kept as it changes.

Prepare's safety net (`prepare_plan.overcommitted`) adds a claim's grants to what
every other claim holds. Summing the checkpoint's records on every prepare costs
time in proportion to the claims already prepared; the ledger keeps per-device
totals, updated when a holder is set or released, so the check reads one total
per device whatever the node holds. Pure bookkeeping, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from kubeletplugin.checkpoint import ClaimRecord

Holding = tuple[str, int, int]
"""(device name, memory bytes, cores) one holder takes of one device."""


class UsageLedger:
    """Per-device memory and cores over holders keyed by the caller (claim uid and phase)."""

    def __init__(self) -> None:
        self._held: dict[Hashable, tuple[Holding, ...]] = {}
        self._totals: dict[str, tuple[int, int]] = {}

    def hold(self, key: Hashable, holdings: Iterable[Holding]) -> None:
        """`key` now holds `holdings` (replacing what it held)."""
        self.release(key)
        held = tuple(holdings)
        if not held:
            return
        self._held[key] = held
        self._add(held, 1)

    def release(self, key: Hashable) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self._add(held, -1)

    def totals_except(self, keys: Iterable[Hashable]) -> list[Holding]:
        """Per device, what every holder but `keys` holds (devices with nothing are left out)."""
        totals = dict(self._totals)
        for key in keys:
            for device, memory, cores in self._held.get(key, ()):
                held_memory, held_cores = totals.get(device, (0, 0))
                totals[device] = (held_memory - memory, held_cores - cores)
        return [
            (device, memory, cores) for device, (memory, cores) in totals.items() if memory or cores
        ]

    def _add(self, holdings: tuple[Holding, ...], sign: int) -> None:
        for device, memory, cores in holdings:
            held_memory, held_cores = self._totals.get(device, (0, 0))
            total = (held_memory + sign * memory, held_cores + sign * cores)
            if total == (0, 0):
                self._totals.pop(device, None)
            else:
                self._totals[device] = total


def record_holdings(record: ClaimRecord) -> list[Holding]:
    """What a checkpoint record's devices hold, at the limits they were prepared with."""
    return [(d.device_name, d.memory_limit_bytes, d.core_limit) for d in record.devices]
