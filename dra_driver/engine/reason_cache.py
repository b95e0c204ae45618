"""Refusals remembered until the refusing node changes.

A controller retries a claim that fits nowhere whenever inventory or usage
changes anywhere, yet most nodes are unchanged between two tries. A node's
refusal of a request depends only on the node's state (devices, cordons,
pair scores, usage), the request's shape and the namespace's quota, so it is
kept per request shape with the node's state version and reused while that
version holds. Any change to a node gives it a new version.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

NodeRefusals = dict[str, tuple[int, str]]
"""Node name -> (the node's state version when refused, HAMi's reason)."""


class ReasonCache:
    """Refusals for the `shapes` request shapes used most recently."""

    def __init__(self, shapes: int) -> None:
        self._capacity = shapes
        self._by_shape: OrderedDict[Hashable, NodeRefusals] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """Whether anything is remembered (a capacity of 0 shapes turns it off)."""
        return self._capacity > 0

    def refusals(self, shape: Hashable) -> NodeRefusals | None:
        """The refusals kept for `shape` (to read and add to); None when disabled."""
        if self._capacity <= 0:
            return None
        kept = self._by_shape.get(shape)
        if kept is None:
            kept = self._by_shape[shape] = {}
            if len(self._by_shape) > self._capacity:
                self._by_shape.popitem(last=False)
        else:
            self._by_shape.move_to_end(shape)
        return kept
