"""Where the captured kubelet, kube-scheduler and admission traffic lives.

`../shared/reference/wire-fixtures` beside the checkout, or `$WIRE_FIXTURES`;
tests that replay it skip, with this reason, when it is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(
    os.environ.get(
        "WIRE_FIXTURES",
        Path(__file__).resolve().parents[2] / "shared" / "reference" / "wire-fixtures",
    )
)
needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason=f"wire fixtures not found at {FIXTURES} (set WIRE_FIXTURES)"
)


def load_fixture(relative: str) -> Any:
    """A captured JSON document, e.g. `scheduler-extender/filter.request.json`."""
    return json.loads((FIXTURES / relative).read_text())
