"""The contract between `dra-driver` and the packages that bring its subcommands.

Owns: the entry-point group each subcommand is declared in (`pyproject.toml`),
the one signature a registration has, and the exit status every handler uses
for bad input. May import only argparse and `dra_driver.cli.args`, so that a
component's command module can import it without pulling in anything else.

A registration adds one subcommand with `commands.add_parser(name, ...)` (an
`EnvArgumentParser`, since subparsers take the root parser's class) and sets
`handler=` to a function of the parsed arguments that returns the exit status.
The handler imports what the command runs, so `dra-driver --help` loads parsers
only.
"""

from __future__ import annotations

import argparse
from typing import Protocol, TypeAlias

from dra_driver.cli.args import EnvArgumentParser

ENTRY_POINT_GROUP = "dra_driver.commands"
"""Each entry point is named after the subcommand it registers."""

EXIT_BAD_INPUT = 2
"""As argparse exits on a bad flag: the command refused what it was given."""

Subcommands: TypeAlias = "argparse._SubParsersAction[EnvArgumentParser]"


class RegisterCommand(Protocol):
    """What each `dra_driver.commands` entry point loads to."""

    def __call__(self, commands: Subcommands, /) -> None: ...
