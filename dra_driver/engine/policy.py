"""HAMi's scheduling policies: device score, device order, node score.

Formulas from HAMi pkg/scheduler/policy (gpu_policy.go, node_policy.go):
device score = 10 x (w_slot (req+used)/count + w_core (cores+used)/total
+ w_mem (mem+used)/total); node score = 10 x (used/count + cores/total +
mem/total) summed over the node's devices, before the pod is placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dra_driver.errors import InvalidParameterError

SCORE_WEIGHT = 10.0

BINPACK = "binpack"
SPREAD = "spread"
NUMA = "numa"
MUTEX = "mutex"
TOPOLOGY_AWARE = "topology-aware"

GPU_POLICIES = frozenset({BINPACK, SPREAD, NUMA, MUTEX, TOPOLOGY_AWARE})
NODE_POLICIES = frozenset({BINPACK, SPREAD})
SORT_KEYS = (BINPACK, SPREAD, NUMA)


@dataclass(frozen=True, slots=True)
class GpuPolicy:
    """A parsed `hami.io/gpu-scheduler-policy` value.

    `chain` holds the sort keys in written order when the value is a chain (or
    bare `numa`); a single value sorts as HAMi's Less does for that value.
    """

    raw: str
    chain: tuple[str, ...] | None
    binpack: bool
    mutex: bool
    mutex_sort: bool
    topology: bool


def parse_gpu_policy(value: str) -> GpuPolicy:
    """Validate and parse a GPU policy; unknown tokens are an error naming them."""
    policy = value.strip()
    tokens = [token.strip() for token in policy.split(",")]
    unknown = [token for token in tokens if token not in GPU_POLICIES]
    if unknown:
        raise InvalidParameterError(
            "gpuPolicy",
            f"unknown policy {', '.join(map(repr, unknown))}; "
            f"use one or a comma chain of {', '.join(sorted(GPU_POLICIES))}",
        )
    chain: tuple[str, ...] | None = None
    if "," in policy or policy == NUMA:
        chain = tuple(dict.fromkeys(token for token in tokens if token in SORT_KEYS)) or (SPREAD,)
    return GpuPolicy(
        raw=policy,
        chain=chain,
        binpack=policy == BINPACK,
        mutex=MUTEX in tokens,
        mutex_sort=policy == MUTEX,
        topology=TOPOLOGY_AWARE in tokens,
    )


def parse_node_policy(value: str) -> str:
    policy = value.strip()
    if policy not in NODE_POLICIES:
        raise InvalidParameterError("nodePolicy", f"must be binpack or spread, not {value!r}")
    return policy


def device_sort_key(policy: GpuPolicy, numa_bind: bool):
    """A key function over (score, numa, used, index) tuples giving HAMi's order.

    Fit walks the sorted list from its tail, so the preferred device sorts last.
    HAMi's Go sort is not stable; ties end on the device index to be deterministic.
    """
    if policy.chain is not None:
        chain = policy.chain
        if numa_bind and chain[0] != NUMA:
            chain = (NUMA, *(key for key in chain if key != NUMA))
        signs = {BINPACK: (0, 1.0), SPREAD: (0, -1.0), NUMA: (1, 1.0)}
        picks = [signs[key] for key in chain]

        def chained(entry: tuple[float, int, int, int]) -> tuple[float, ...]:
            values = [entry[0] * sign if field == 0 else entry[1] for field, sign in picks]
            return (*values, entry[3])

        return chained
    if policy.mutex_sort:
        return lambda entry: (-entry[2], entry[1], entry[3])
    if numa_bind:
        if policy.binpack:
            return lambda entry: (-entry[1], entry[0], entry[3])
        return lambda entry: (entry[1], -entry[0], entry[3])
    if policy.binpack:
        return lambda entry: (entry[0], entry[1], entry[3])
    return lambda entry: (-entry[0], entry[1], entry[3])


def node_score(totals: Sequence[int]) -> float:
    """Node score from (used, count, used cores, total cores, used mem, total mem)."""
    used, count, used_cores, total_cores, used_mem, total_mem = totals
    score = 0.0
    if count:
        score += used / count
    if total_cores:
        score += used_cores / total_cores
    if total_mem:
        score += used_mem / total_mem
    return SCORE_WEIGHT * score
