"""When a burst's objects are gone: the moment to give their memory back.

A 10,000-pod burst takes the controller about 100 MiB, most of it in the pods and
claims it holds while they exist. Once they are deleted, some of that memory is
free but stays with the process until it is handed back
(dra_driver/process/allocator.py), which walks the whole heap: too costly for
every deletion, right once the view holds far fewer objects than it did and has
stopped changing.
"""

from __future__ import annotations


class BurstEnd:
    """Fed the view's size on each pass of the controller's loop and its change count
    once per tick; says when a burst has ended."""

    def __init__(self, freed_objects: int) -> None:
        self._freed_objects = freed_objects
        self._high_mark = 0
        self._changes = -1

    def observe(self, held: int) -> None:
        """The pods and claims the view holds now."""
        self._high_mark = max(self._high_mark, held)

    def over(self, held: int, changes: int) -> bool:
        """True once per burst: `held` is at least `freed_objects` below the high mark and
        `changes` is the same as at the previous tick (nothing changed in between)."""
        quiet = changes == self._changes
        self._changes = changes
        self.observe(held)
        shed = self._high_mark - held
        if quiet and shed > 0 and shed >= self._freed_objects:
            self._high_mark = held
            return True
        return False
