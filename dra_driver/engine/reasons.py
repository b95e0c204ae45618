"""HAMi's fit-failure reasons and its `k/N Reason` summaries.

The strings are HAMi's (pkg/device/common/common.go) so operators and tools
that grep for them keep working.
"""

from __future__ import annotations

from collections.abc import Mapping

CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_UUID_MISMATCH = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"
NUMA_NOT_FIT = "NumaNotFit"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
NODE_HAS_NO_DEVICES = "NodeHasNoDevices"
NODE_UNREGISTERED = "node unregistered"
"""HAMi's FailedNodes text for a candidate node the engine has no inventory for."""


def format_reason(counts: Mapping[str, int], cards: int) -> str:
    """HAMi's GenReason: `k/N Reason` entries sorted as whole strings (Go's
    sort.Strings, byte order), so `10/16 X` comes before `2/16 A`."""
    return ", ".join(sorted(f"{counts[name]}/{cards} {name}" for name in counts))


def parse_reason(reason: str) -> list[str]:
    """The reason names in a `k/N Reason, ...` string (HAMi's ParseReason)."""
    names = []
    for part in reason.split(","):
        words = part.strip().split(" ", 1)
        names.append(words[-1] if len(words) == 2 and "/" in words[0] else part.strip())
    return [name for name in names if name]


def summarize_failures(failures: Mapping[str, str]) -> str:
    """One line in the spirit of HAMi's FilteringFailed event.

    `no available node, 3 nodes do not meet: 2 nodes CardInsufficientMemory(a,b); ...`
    """
    by_reason: dict[str, list[str]] = {}
    for node, reason in failures.items():
        for name in dict.fromkeys(parse_reason(reason)):
            by_reason.setdefault(name, []).append(node)
    parts = [
        f"{len(nodes)} nodes {name}({','.join(sorted(nodes))})"
        for name, nodes in sorted(by_reason.items())
    ]
    head = f"no available node, {len(failures)} nodes do not meet"
    return f"{head}: {'; '.join(parts)}" if parts else head
