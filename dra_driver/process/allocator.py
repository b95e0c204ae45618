"""The memory allocators of a long-running process that handles bursts.

**jemalloc, as deployed.** Python's own allocator (pymalloc) takes memory in 1 MiB
arenas and gives one back only once nothing in it is alive. After a 10,000-pod
round is deleted, the few objects made during it that outlive it (connections,
timers, tasks) lie scattered over the burst's arenas and keep them resident: the
controller's RSS stepped up 13-20 MiB at the second round while what it used stayed
flat. Its Deployment therefore runs it on jemalloc (`JEMALLOC_ENV`: preloaded, and
`PYTHONMALLOC=malloc` so Python's objects come from it too). jemalloc hands back
free memory by the page, however its neighbours are used, so a survivor pins
4 KiB rather than 1 MiB; `release_free_memory` purges every free page at once
(`arena.<all>.purge`) and `background_thread` with `dirty_decay_ms` returns what is
freed later. At 1,000 nodes the RSS after freeing each 10,000-pod round stayed
within a few MiB across rounds, for up to a third more CPU per allocation with
claims from templates and none measured with pre-created ones
(bench/controller_bench.py).

**glibc, without it.** glibc's malloc serves a block of 128 KiB or more with its own
mmap, but each time such a block is freed it raises that threshold to the block's
size (up to 32 MiB). After a burst, the big short-lived buffers (watch event lines,
response bodies, list pages) then come from the heap, between the long-lived
objects the informers keep, and leave holes no later request fits: at 1,000 nodes
the controller's heap grew from 53 to 103 MiB over a second 10,000-pod round while
under 30 MiB of it was in use. A fixed threshold turns that adjustment off, so
large blocks keep coming from mmap and go back to the system when freed; with it
the heap stayed at 17-20 MiB (16 MiB in use) over both rounds. Blocks under the
threshold come from the heap, and glibc gives back only its top: a block freed in
the middle stays resident until `release_free_memory` (malloc_trim) hands every
free page back.

Under another C library (musl, macOS) nothing is changed.

What the process holds resident is not what it uses: an arena with one live object
in it, or a free block kept for reuse, counts in RSS. `live_memory` reports what is
in use (Python's allocated blocks, the C allocator's allocated bytes), so a leak,
which grows these, is told apart from fragmentation, which grows only RSS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

JEMALLOC_LIBRARY = "/usr/local/lib/libjemalloc.so.2"
"""Where deploy/Dockerfile links Debian's libjemalloc2, whatever the architecture."""

JEMALLOC_CONF = "background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:0"
"""Pages freed and left alone for 5 s go back to the system, by a thread of jemalloc's
own rather than on some later allocation; none is merely marked reclaimable
(MADV_FREE, "muzzy"), which the kernel takes back only under pressure and which
counts in RSS until it does."""

JEMALLOC_ENV: Mapping[str, str] = {"PYTHONMALLOC": "malloc", "MALLOC_CONF": JEMALLOC_CONF}
"""With LD_PRELOAD naming the library (`jemalloc_env`): how the controller's
Deployment runs it."""

MALLCTL_ARENAS_ALL = 4096
"""jemalloc's arena index that means every arena (MALLCTL_ARENAS_ALL, jemalloc >= 5)."""

M_MMAP_THRESHOLD = -3
"""mallopt's parameter number (glibc malloc.h)."""

MMAP_THRESHOLD_BYTES = 64 * 1024
"""Blocks from this size up are mapped on their own (glibc starts at 128 KiB; the
figures above were measured with 64 KiB)."""


def jemalloc_env(library: str) -> dict[str, str]:
    """The environment that runs a Python process, its objects included, on the
    jemalloc at `library` (a path, or a soname the loader finds)."""
    return {"LD_PRELOAD": library, **JEMALLOC_ENV}


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


class _Jemalloc:
    """jemalloc's control interface (`mallctl`), as far as this process uses it."""

    def __init__(self, mallctl: ctypes._CFuncPtr) -> None:
        mallctl.argtypes = (
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_void_p,
            ctypes.c_size_t,
        )
        mallctl.restype = ctypes.c_int
        self._mallctl = mallctl

    def version(self) -> str:
        text = ctypes.c_char_p()
        size = ctypes.c_size_t(ctypes.sizeof(text))
        if self._mallctl(b"version", ctypes.byref(text), ctypes.byref(size), None, 0) != 0:
            return "unknown"
        return (text.value or b"unknown").decode(errors="replace").split("-", 1)[0]

    def allocated_bytes(self) -> int | None:
        """Bytes handed out and not given back; None when jemalloc keeps no statistics."""
        epoch = ctypes.c_uint64(1)
        size = ctypes.c_size_t(ctypes.sizeof(epoch))
        self._mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), size)
        allocated = ctypes.c_size_t()
        size = ctypes.c_size_t(ctypes.sizeof(allocated))
        if self._mallctl(b"stats.allocated", ctypes.byref(allocated), ctypes.byref(size), None, 0):
            return None
        return allocated.value

    def purge(self) -> bool:
        """Give every free page of every arena back to the system now."""
        return self._mallctl(f"arena.{MALLCTL_ARENAS_ALL}.purge".encode(), None, None, None, 0) == 0


@functools.cache
def _jemalloc() -> _Jemalloc | None:
    """jemalloc, when it serves this process's malloc (preloaded or linked in)."""
    mallctl = getattr(ctypes.CDLL(None), "mallctl", None)
    return None if mallctl is None else _Jemalloc(mallctl)


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


def python_objects_on_pymalloc() -> bool:
    """Whether Python's own allocator serves its objects (not so under PYTHONMALLOC=malloc,
    where it has handed out no block at all)."""
    return sys.getallocatedblocks() > 0


@functools.cache
def allocator_in_use() -> str:
    """What serves this process's memory, e.g. "jemalloc 5.3.0" or "pymalloc + glibc 2.36";
    fixed when the process starts, so asked once (each /metrics scrape shows it)."""
    jemalloc = _jemalloc()
    libc = _glibc()
    if jemalloc is not None:
        c_allocator = f"jemalloc {jemalloc.version()}"
    elif libc is not None:
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        c_allocator = f"glibc {libc.gnu_get_libc_version().decode()}"
    else:
        c_allocator = "libc malloc"
    return f"pymalloc + {c_allocator}" if python_objects_on_pymalloc() else c_allocator


def warn_if_objects_on_glibc() -> None:
    """Python's objects served by glibc's malloc cost about half as much CPU again as
    on pymalloc or jemalloc and fragment more: PYTHONMALLOC=malloc without jemalloc
    preloaded (a missing library is only warned about by the loader)."""
    if not python_objects_on_pymalloc() and _jemalloc() is None:
        log.warning(
            "Python's objects come from the C library's malloc: preload jemalloc "
            "(LD_PRELOAD, as deploy/Dockerfile ships it) or unset PYTHONMALLOC",
            extra={"allocator": allocator_in_use()},
        )


@dataclass(frozen=True, slots=True)
class LiveMemory:
    python_blocks: int
    """Blocks Python's allocator has handed out and not got back (`sys.getallocatedblocks`;
    0 when its objects come from the C allocator)."""
    c_heap_bytes: int | None
    """Bytes the C allocator has handed out and not got back: jemalloc's
    `stats.allocated`, or glibc's used heap plus blocks mapped on their own; None
    when neither tells (no statistics, glibc older than 2.33)."""


def live_memory() -> LiveMemory:
    """What the process uses now, fragmentation left out (see the module's docstring)."""
    return LiveMemory(sys.getallocatedblocks(), _c_heap_in_use())


def _c_heap_in_use() -> int | None:
    jemalloc = _jemalloc()
    if jemalloc is not None:
        return jemalloc.allocated_bytes()
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Set glibc's mmap threshold once, which also stops its upward adjustment; True if
    set, False where glibc's malloc is not the one in use. Called before the process
    builds its caches, since only later blocks follow it."""
    libc = _glibc()
    if libc is None or _jemalloc() is not None:
        return False
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    if libc.mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        log.warning("mallopt refused the mmap threshold", extra={"bytes": threshold})
        return False
    return True


def release_free_memory() -> bool:
    """Give the C allocator's free pages back to the system: jemalloc purges every
    arena, glibc trims its heap (malloc_trim, which walks it all, about 10 ms per
    100 MiB); True if that succeeded (glibc: if some pages went back). For the
    quiet after a burst, not for every change."""
    jemalloc = _jemalloc()
    if jemalloc is not None:
        return jemalloc.purge()
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    libc.malloc_trim.restype = ctypes.c_int
    return bool(libc.malloc_trim(0))
