"""Checks the upgrade tests make of a cluster's claims, read the way the current
controller reads them (its inventory of the slices, its usage of each result).

Shared by the recorded releases' test (tests/unit/test_upgrade_fixtures.py) and the
rolling-upgrade test (tests/integration/test_rolling_upgrade.py).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from controller.inventory import DeviceKey, build_inventory, claim_usage, engine_device
from controller.object_state import allocation_of


def usage_problems(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]], driver: str
) -> list[str]:
    """What is wrong with the allocated claims: a result naming no published device, a
    device held past its shares, memory or cores, a card with two claims on overlapping
    MIG placements. Empty when nothing is allocated twice."""
    inventory = build_inventory(slices, driver)
    problems = []
    used: dict[DeviceKey, list[int]] = defaultdict(lambda: [0, 0, 0])
    placements: dict[Any, list[tuple[int, int, str]]] = defaultdict(list)
    for claim in claims:
        allocation = allocation_of(claim)
        if not allocation:
            continue
        name = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        counted = claim_usage(claim, inventory)
        partitions = []
        for result in allocation["devices"]["results"]:
            key = (result["driver"], result["pool"], result["device"])
            if key in inventory.partitions:
                partitions.append(inventory.partitions[key])
            elif key not in inventory.by_key:
                problems.append(f"{name}: {key} is not a published device")
        for device, usage in counted:
            total = used[device.key]
            total[0] += usage.used
            total[1] += usage.memory_mib
            total[2] += usage.cores
        for partition in partitions:
            placements[partition.card].append((partition.start, partition.size, name))
    for key, (shares, memory_mib, cores) in sorted(used.items()):
        capacity = engine_device(inventory.by_key[key], frozenset())
        if shares > capacity.count or memory_mib > capacity.memory_mib or cores > capacity.cores:
            problems.append(
                f"{key}: {shares} shares, {memory_mib} MiB, {cores} cores held of "
                f"{capacity.count}, {capacity.memory_mib} MiB, {capacity.cores}"
            )
    for card, taken in placements.items():
        for first, second in itertools.pairwise(sorted(taken)):
            if first[0] + first[1] > second[0]:
                problems.append(f"card {card}: {first} overlaps {second}")
    return problems
