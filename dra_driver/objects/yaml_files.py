"""Reading the YAML files a user hands a command, with errors that point into the file.

PyYAML's own message names `<unicode string>` and repeats the source line; a user
needs `file:line:column` and what was expected there, so every command that reads
a user's YAML (scenarios, inventories) goes through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dra_driver.errors import InvalidParameterError


def read_yaml_documents(path: Path) -> list[Any]:
    """Every document of a YAML (or JSON) file; an unreadable or malformed file raises
    InvalidParameterError naming the file, and for bad syntax the line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidParameterError(str(path), f"cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise InvalidParameterError(
            str(path), f"not UTF-8 text (byte {error.start}: {error.reason})"
        ) from None
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        raise _syntax_error(path, error) from None


def read_yaml_document(path: Path) -> Any:
    """The one document of a YAML (or JSON) file, with the errors of read_yaml_documents."""
    documents = read_yaml_documents(path)
    if len(documents) > 1:
        raise InvalidParameterError(str(path), f"holds {len(documents)} documents, expected one")
    return documents[0] if documents else None


def _syntax_error(path: Path, error: yaml.YAMLError) -> InvalidParameterError:
    """`path:line:column: not valid YAML: <problem> (<context> at line L, column C)`."""
    if not isinstance(error, yaml.MarkedYAMLError):
        return InvalidParameterError(str(path), f"not valid YAML: {error}")
    mark = error.problem_mark or error.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    reason = error.problem or error.context or "malformed"
    if error.context and error.problem and error.context_mark is not None:
        context = error.context_mark
        reason += f" ({error.context} at line {context.line + 1}, column {context.column + 1})"
    return InvalidParameterError(where, f"not valid YAML: {reason}")
