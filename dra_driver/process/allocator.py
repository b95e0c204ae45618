"""The C allocator's settings for a long-running process that handles bursts.

glibc's malloc serves a block of 128 KiB or more with its own mmap, but each time
such a block is freed it raises that threshold to the block's size (up to 32 MiB).
After a burst, the big short-lived buffers (watch event lines, response bodies,
list pages) then come from the heap, between the long-lived
objects the informers keep, and leave holes no later request fits: at 1,000 nodes
the controller's heap grew from 53 to 103 MiB over a second 10,000-pod round while
under 30 MiB of it was in use. A fixed threshold turns that adjustment off, so
large blocks keep coming from mmap and go back to the system when freed; with it
the heap stayed at 17-20 MiB (16 MiB in use) over both rounds.

Under another C library (musl, macOS) nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3
"""mallopt's parameter number (glibc malloc.h)."""

MMAP_THRESHOLD_BYTES = 64 * 1024
"""Blocks from this size up are mapped on their own (glibc starts at 128 KiB; the
figures above were measured with 64 KiB)."""


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Set glibc's mmap threshold once, which also stops its upward adjustment; True if
    set. Called before the process builds its caches, since only later blocks follow it."""
    library = ctypes.util.find_library("c")
    if library is None:
        return False
    libc = ctypes.CDLL(library)
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return False
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    if libc.mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        log.warning("mallopt refused the mmap threshold", extra={"bytes": threshold})
        return False
    return True
