"""`--mixed-mode` (env MIXED_MODE) on the controller and the legacy scheduler: off by default."""

from __future__ import annotations

import pytest

from controller.command import settings_from_args as controller_settings
from controller.legacy.command import settings_from_args as legacy_settings
from dra_driver.cli import build_parser

LEGACY = ("scheduler", "--allowed-callers", "s", "--open-webhook")


def _controller(*argv: str) -> bool:
    args = build_parser().parse_args(["controller", *argv, "--kubeconfig", "/x"])
    return controller_settings(args).controller.mixed_mode


def _legacy(*argv: str) -> bool:
    args = build_parser().parse_args([*LEGACY, *argv, "--kubeconfig", "/x"])
    return legacy_settings(args)[0].mixed_mode


@pytest.mark.parametrize("read", [_controller, _legacy], ids=["controller", "legacy"])
def test_mixed_mode_is_off_unless_asked_by_flag_or_env(read, monkeypatch) -> None:
    monkeypatch.delenv("MIXED_MODE", raising=False)
    assert read() is False
    assert read("--mixed-mode") is True
    monkeypatch.setenv("MIXED_MODE", "true")
    assert read() is True
    assert read("--no-mixed-mode") is False
