"""The DeviceClasses the deployment installs, read from the same file the deploy/ base uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEVICE_CLASSES_FILE = Path(__file__).with_name("deviceclasses.yaml")


def device_classes() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(DEVICE_CLASSES_FILE.read_text()) if doc]
