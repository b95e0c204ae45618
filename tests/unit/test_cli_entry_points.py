"""The CLI finds its subcommands through the `dra_driver.commands` entry points: each one
registers the subcommand it is named after, and a missing installation says so."""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points

import pytest

import dra_driver.cli
from dra_driver.cli import build_parser
from dra_driver.cli.args import EnvArgumentParser
from dra_driver.cli.registration import ENTRY_POINT_GROUP


def test_each_entry_point_registers_the_subcommand_it_is_named_after() -> None:
    for point in entry_points(group=ENTRY_POINT_GROUP):
        commands = EnvArgumentParser().add_subparsers()
        point.load()(commands)
        assert list(commands.choices) == [point.name]


def test_help_lists_the_subcommands_by_name() -> None:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(commands.choices) == sorted(commands.choices)


def test_without_entry_points_the_cli_says_to_install_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dra_driver.cli, "entry_points", lambda group: ())
    with pytest.raises(SystemExit) as exited:
        build_parser()
    assert ENTRY_POINT_GROUP in str(exited.value.code)
    assert "install the package" in str(exited.value.code)
