"""The `dra-driver` command: a composition root that imports no component.

Owns the root parser, the discovery of subcommands and the dispatch to their
handlers. Every subcommand lives with the package that runs it and is declared
in the `dra_driver.commands` entry-point group of `pyproject.toml` (see
`dra_driver.cli.registration`), so nothing here names `controller`,
`kubeletplugin`, `libvgpu` or `simulator`. May import `dra_driver.cli.args`,
`dra_driver.cli.registration`, `dra_driver.errors` and `dra_driver.version`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from dra_driver.cli.args import EnvArgumentParser
from dra_driver.cli.registration import ENTRY_POINT_GROUP, EXIT_BAD_INPUT, RegisterCommand
from dra_driver.errors import DriverError
from dra_driver.version import build_info

NOT_INSTALLED = (
    f"dra-driver: no subcommands found in the entry-point group {ENTRY_POINT_GROUP!r}; "
    "install the package (pip install -e .) so its entry points are registered"
)


def _command_entry_points() -> list[EntryPoint]:
    """The declared subcommands by name, so `--help` lists them in the same order on every
    machine whatever order the installed metadata holds them in."""
    found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda point: point.name)
    if not found:
        # An empty CLI would only say "invalid choice"; say what is missing instead.
        raise SystemExit(NOT_INSTALLED)
    return found


class _PrintVersion(argparse.Action):
    """`--version`: one line on stdout, then exit 0. Not argparse's own `version` action,
    which wraps the line at the terminal's width and would read the build on every run."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"{parser.prog} {build_info().describe()}")
        parser.exit()


def build_parser() -> EnvArgumentParser:
    parser = EnvArgumentParser(
        prog="dra-driver",
        description="Shared-GPU Kubernetes driver (HAMi-compatible, DRA and device plugin).",
    )
    parser.add_argument(
        "--version",
        action=_PrintVersion,
        help="print the release, the commit it was built from and the Python it runs on",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for point in _command_entry_points():
        register: RegisterCommand = point.load()
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except DriverError as error:
        print(f"dra-driver {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
