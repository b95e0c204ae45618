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

Blocks under the threshold come from the heap, and glibc gives back only its
top: a block freed in the middle stays resident, kept for reuse. After each
10,000-pod round about 1 MiB more of the heap was free but resident.
`release_free_memory` (malloc_trim) hands every free page back, wherever it
lies; the controller calls it once a burst's objects are gone.

Under another C library (musl, macOS) nothing is changed.

What the process holds resident is not what it uses: a 1 MiB arena of Python's
allocator with one live object in it, or a free block glibc keeps in the heap, counts
in RSS. `live_memory` reports what is in use (Python's allocated blocks, the C heap's
used bytes), so a leak, which grows these, is told apart from fragmentation, which
grows only RSS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys
from dataclasses import dataclass

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3
"""mallopt's parameter number (glibc malloc.h)."""

MMAP_THRESHOLD_BYTES = 64 * 1024
"""Blocks from this size up are mapped on their own (glibc starts at 128 KiB; the
figures above were measured with 64 KiB)."""


class _Mallinfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (malloc.h, glibc >= 2.33)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@dataclass(frozen=True, slots=True)
class LiveMemory:
    python_blocks: int
    """Blocks Python's allocator has handed out and not got back (`sys.getallocatedblocks`)."""
    c_heap_bytes: int | None
    """Bytes glibc's malloc has handed out, in its heap or mapped on their own; None
    without glibc 2.33."""


def live_memory() -> LiveMemory:
    """What the process uses now, fragmentation left out (see the module's docstring)."""
    libc = _glibc()
    c_heap: int | None = None
    if libc is not None and hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
        c_heap = info.uordblks + info.hblkhd
    return LiveMemory(sys.getallocatedblocks(), c_heap)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, looked up once: `find_library` runs `ldconfig`, and a release after a burst
    runs on the controller's event loop."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    libc = ctypes.CDLL(library)
    if not all(hasattr(libc, name) for name in ("gnu_get_libc_version", "mallopt", "malloc_trim")):
        return None
    return libc


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Set glibc's mmap threshold once, which also stops its upward adjustment; True if
    set. Called before the process builds its caches, since only later blocks follow it."""
    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    if libc.mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        log.warning("mallopt refused the mmap threshold", extra={"bytes": threshold})
        return False
    return True


def release_free_memory() -> bool:
    """Give every free page of the C heap back to the system (glibc's malloc_trim); True
    if some went back. It walks the whole heap, about 10 ms per 100 MiB, so it is for
    the quiet after a burst, not for every change."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    libc.malloc_trim.restype = ctypes.c_int
    return bool(libc.malloc_trim(0))
