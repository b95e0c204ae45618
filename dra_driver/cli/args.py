"""The `dra-driver` parser: every option has an environment variable; shared flags.

`EnvArgumentParser.add_argument(..., env="NAME")` is the one way an option gets
its variable: the variable, when set and not empty, replaces the default (and
satisfies `required`), and `--help` shows `(default: X; env: NAME)` after the
option's own text. Every subcommand's parser is one of these (subparsers take the
root parser's class), so each package that registers its own subcommand (see
`dra_driver.cli.registration`) gets the same behaviour. Flags several packages'
commands share are defined once here. May import only `dra_driver.engine.policy`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.engine.policy import BINPACK, SPREAD

LIST_SEPARATOR = ","
"""A repeatable option's variable holds its values separated by commas."""


@dataclass(frozen=True, slots=True)
class _EnvOption:
    action: argparse.Action
    variable: str
    repeatable: bool


class EnvArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose options each read an environment variable (see the module).

    The variables are read when the arguments are parsed, not when the parser is built,
    so a bad value in one command's variable only fails that command, with an error that
    names the variable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._env_options: list[_EnvOption] = []
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: Any, env: str | None = None, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*names, **kwargs)
        if env is not None:
            own = kwargs.get("help") or ""
            action.help = f"{own} (default: %(default)s; env: {env})".lstrip()
            repeatable = kwargs.get("action") == "append"
            self._env_options.append(_EnvOption(action, env, repeatable))
        return action

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        for option in self._env_options:
            value = os.environ.get(option.variable, "")
            if value:
                option.action.default = self._from_environment(option, value)
                option.action.required = False
        return super().parse_known_args(args, namespace)

    def _from_environment(self, option: _EnvOption, value: str) -> Any:
        """The variable's value as the option's type: a flag reads true/false, a repeatable
        option a comma-separated list; a value the option refuses exits with usage (2)."""
        action = option.action
        where = f"environment variable {option.variable}={value!r} ({action.option_strings[-1]})"
        if action.nargs == 0:
            word = value.strip().lower()
            if word not in ("true", "false"):
                self.error(f"{where}: expected true or false")
            return word == "true"
        convert = action.type if callable(action.type) else str
        texts = value.split(LIST_SEPARATOR) if option.repeatable else [value]
        try:
            values = [convert(text.strip()) for text in texts if text.strip()]
        except (TypeError, ValueError) as error:
            self.error(f"{where}: {error}")
        for item in values:
            if action.choices is not None and item not in action.choices:
                self.error(f"{where}: not one of {', '.join(map(str, action.choices))}")
        return values if option.repeatable else values[0]


def add_process_args(parser: EnvArgumentParser) -> None:
    """What every long-running component takes: how to reach the API, how loud to log."""
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        env="KUBECONFIG",
        help="kubeconfig file; none: the in-cluster service account",
    )
    parser.add_argument("--log-level", env="LOG_LEVEL", default="INFO")


def add_scheduler_policy_args(parser: EnvArgumentParser) -> None:
    """HAMi's `--node-scheduler-policy` / `--gpu-scheduler-policy` and their defaults."""
    parser.add_argument("--node-scheduler-policy", env="NODE_SCHEDULER_POLICY", default=BINPACK)
    parser.add_argument("--gpu-scheduler-policy", env="GPU_SCHEDULER_POLICY", default=SPREAD)
