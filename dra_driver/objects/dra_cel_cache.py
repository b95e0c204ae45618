"""Selector results memoised, so that a decision evaluates CEL only for devices it has
not seen: the cache the controller's allocator keeps beside dra_cel's compiled selectors."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

from dra_driver.objects.dra_cel import CelDevice, compile_selector


class SelectorCache:
    """Selector results memoised per expression and device key, bounded.

    The key names a device version, e.g. (slice uid, slice generation, device name), so
    a republished slice is evaluated afresh and an allocation decision never evaluates
    CEL again for devices it has already seen. Results are held in one dict per
    expression, keyed by the caller's own key object: remembering a result builds no
    tuple or list node of its own, so a burst's first decisions, which fill the cache,
    leave nothing scattered among the burst's short-lived objects that would keep their
    memory from going back to the system. Past the bound, the least recently used
    expression gives up its oldest result.
    """

    def __init__(self, max_entries: int = 65536) -> None:
        self._by_expression: OrderedDict[str, dict[Hashable, bool]] = OrderedDict()
        self._entries = 0
        self._max_entries = max_entries

    def __len__(self) -> int:
        return self._entries

    def matches(self, expression: str, key: Hashable, device: CelDevice) -> bool:
        """The memoised result; compile and evaluation errors are raised, never cached."""
        results = self._by_expression.get(expression)
        if results is not None:
            self._by_expression.move_to_end(expression)
            known = results.get(key)
            if known is not None:
                return known
        result = compile_selector(expression).matches(device)
        if results is None:
            results = self._by_expression[expression] = {}
        results[key] = result
        self._entries += 1
        if self._entries > self._max_entries:
            self._drop_oldest()
        return result

    def forget(self, predicate: Callable[[Hashable], bool]) -> None:
        """Drop the results for device keys the predicate picks (a deleted slice's)."""
        for expression, results in list(self._by_expression.items()):
            for key in [k for k in results if predicate(k)]:
                del results[key]
                self._entries -= 1
            if not results:
                del self._by_expression[expression]

    def _drop_oldest(self) -> None:
        expression, results = next(iter(self._by_expression.items()))
        del results[next(iter(results))]
        self._entries -= 1
        if not results:
            del self._by_expression[expression]


__all__ = ["SelectorCache"]
