"""The captured kubelet, kube-scheduler and admission traffic the tests replay.

`tests/fixtures/wire/` holds the recorded messages the tests use (see its
README for where they came from), so a clone of the repository alone runs them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "wire"


def load_fixture(relative: str) -> Any:
    """A captured JSON document, e.g. `scheduler-extender/filter.request.json`."""
    return json.loads((FIXTURES / relative).read_text())
