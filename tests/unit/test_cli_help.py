"""`dra-driver <command> --help` shows every option's default and environment variable,
and the variable really is the default: typed, validated, and beaten by the flag."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from dra_driver.cli import build_parser, main

SUFFIX = re.compile(r"\(default: [^;]*; env: [A-Z][A-Z0-9_]*\)$")
ENTRY = re.compile(r"^  (-\S.*)$")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def _option_entries(text: str) -> dict[str, str]:
    """Each option's entry in the `options:` section, first option string -> its text
    with the line wrapping undone."""
    entries: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.split("\noptions:\n", 1)[1].splitlines():
        if match := ENTRY.match(line):
            current = entries.setdefault(match.group(1).split()[0].rstrip(","), [])
            current.append(match.group(1))
        elif line.startswith("   "):
            current.append(line.strip())
    return {name: " ".join(" ".join(lines).split()) for name, lines in entries.items()}


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_shows_its_default_and_environment_variable(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    parser = _subcommands()[command]
    expected = {
        action.option_strings[0]
        for action in parser._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    }
    entries = _option_entries(_help(capsys, command))
    entries.pop("-h")
    assert set(entries) == expected
    missing = {name: text for name, text in entries.items() if not SUFFIX.search(text)}
    assert missing == {}


def test_the_variable_is_the_typed_default_and_the_flag_beats_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    monkeypatch.setenv("DEVICE_SPLIT_COUNT", "7")
    monkeypatch.setenv("CONTROLLER_ALLOCATED", "True")
    args = build_parser().parse_args(["kubelet-plugin"])
    assert (args.node_name, args.split_count, args.controller_allocated) == ("gpu-node-7", 7, True)
    args = build_parser().parse_args(["kubelet-plugin", "--split-count", "3"])
    assert args.split_count == 3
    entries = _option_entries(_help(capsys, "kubelet-plugin"))
    assert entries["--split-count"].endswith("(default: 7; env: DEVICE_SPLIT_COUNT)")


def test_a_repeatable_option_reads_a_comma_separated_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HEALTHCHECK_SOCKETS", "/run/a.sock, /run/b.sock")
    args = build_parser().parse_args(["healthcheck"])
    assert args.socket == [Path("/run/a.sock"), Path("/run/b.sock")]


def test_an_empty_variable_leaves_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_LEVEL", "")
    monkeypatch.setenv("MOCK_GPUS", "")
    args = build_parser().parse_args(["kubelet-plugin", "--node-name", "n1"])
    assert (args.log_level, args.mock_gpus) == ("INFO", None)


@pytest.mark.parametrize(
    ("variable", "value", "argv", "reason"),
    [
        ("DEVICE_SPLIT_COUNT", "ten", ["device-plugin", "--node-name", "n"], "invalid literal"),
        ("DISABLE_CORE_LIMIT", "yes", ["device-plugin", "--node-name", "n"], "true or false"),
        ("SIMULATE_MODE", "fast", ["simulate"], "not one of dra, dra-scheduler-allocated"),
    ],
)
def test_a_bad_value_fails_that_command_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    argv: list[str],
    reason: str,
) -> None:
    monkeypatch.setenv(variable, value)
    build_parser().parse_args(["healthcheck", "--socket", "/run/a.sock"])
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"environment variable {variable}={value!r}" in error
    assert reason in error
