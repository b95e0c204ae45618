"""Replace a file so that readers see the old bytes or the new ones, never a torn mix.

A temp file in the same directory (so the rename stays on one filesystem) gets
the content and its final mode before it is renamed over the target, so a
private key is never readable by others even for an instant, and a crash
leaves at most a dot-prefixed temp file beside the target.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, content: bytes, mode: int) -> None:
    """Temp file beside `path` with `mode`, fsync, rename over `path`, fsync the directory."""
    directory = path.parent
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)
