"""glibc's mmap threshold, fixed by the controller at start: after a large block is
freed, big blocks must still be mapped on their own rather than carved out of
the heap. Each case runs in a fresh interpreter so the allocator starts as glibc sets it."""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys

import pytest

from dra_driver.process.allocator import MMAP_THRESHOLD_BYTES, live_memory

libc_name = ctypes.util.find_library("c")
if libc_name is None or not hasattr(ctypes.CDLL(libc_name), "mallinfo2"):
    pytest.skip("glibc with mallinfo2 (2.33 or newer) is needed", allow_module_level=True)

PROBE = """
import ctypes, ctypes.util, sys
from dra_driver.process.allocator import fix_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
libc.free(libc.malloc(8 << 20))
before = libc.mallinfo2().hblks
blocks = [libc.malloc(1 << 20) for _ in range(4)]
print(libc.mallinfo2().hblks - before)
for block in blocks:
    libc.free(block)
"""


def mapped_blocks(mode: str) -> int:
    """How many of four 1 MiB blocks, asked for after an 8 MiB one was freed, were mapped."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


def test_glibcs_own_adjustment_moves_big_blocks_into_the_heap() -> None:
    assert mapped_blocks("default") == 0


def test_the_fixed_threshold_keeps_them_mapped() -> None:
    assert MMAP_THRESHOLD_BYTES < 1 << 20
    assert mapped_blocks("fixed") == 4


RELEASE_PROBE = """
import ctypes, ctypes.util
from dra_driver.process.allocator import fix_mmap_threshold, release_free_memory

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)

def resident_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

assert fix_mmap_threshold()
blocks = [libc.malloc(4096) for _ in range(16384)]
for block in blocks:
    libc.memset(block, 1, 4096)
for block in blocks[:-1]:
    libc.free(block)
before = resident_mib()
released = release_free_memory()
print(released, before - resident_mib())
"""


def test_freed_heap_pages_go_back_when_released() -> None:
    """64 MiB of 4 KiB blocks freed below one still in use: glibc keeps them resident
    (only the heap's top goes back on its own) until they are released."""
    done = subprocess.run(
        [sys.executable, "-c", RELEASE_PROBE], capture_output=True, text=True, check=True
    )
    released, returned_mib = done.stdout.split()
    assert released == "True"
    assert float(returned_mib) > 32


def test_live_memory_counts_what_is_held_and_not_what_was_freed() -> None:
    """4,000 small objects and 8 MiB of C heap held show in the figures; once freed, the
    figures fall back though RSS may not."""
    before = live_memory()
    held = [object() for _ in range(4000)]
    buffer = ctypes.create_string_buffer(8 << 20)
    during = live_memory()
    assert during.python_blocks - before.python_blocks >= 4000
    assert before.c_heap_bytes is not None and during.c_heap_bytes is not None
    assert during.c_heap_bytes - before.c_heap_bytes >= 8 << 20
    del held, buffer
    after = live_memory()
    assert after.python_blocks < during.python_blocks - 3000
    assert after.c_heap_bytes is not None
    assert after.c_heap_bytes < during.c_heap_bytes - (4 << 20)
