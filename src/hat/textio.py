"""Reading the text files users hand to HAT: one reader, errors that name the file and the line.

Every command reads user files - a ``scripted:`` script, a ``--config`` YAML, a ``--data`` set - and
Python's own failures name neither: ``'utf-8' codec can't decode byte 0xe9 in position 25`` does not
say which of three files, and a :class:`json.JSONDecodeError` counts lines of the one string it was
given. This module turns those into :class:`~hat.errors.HatError` messages of the form
``path:line:column: what is wrong; what to do``, so the CLI can print them on one line.

Decisions:

- **UTF-8, and only UTF-8** (a leading byte-order mark is accepted and dropped, as editors on
  Windows write one). Guessing a legacy encoding would read a Latin-1 file as mojibake and carry on;
  a clear refusal that points at the byte is cheaper for the user than wrong data.
- **Byte offsets become line and column** by counting newlines before the bad byte, so the position
  matches what an editor shows (columns count bytes up to the bad one; they are exact for ASCII).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hat.errors import HatError

__all__ = ["check_text", "read_json", "read_jsonl", "read_text"]

_BOM = b"\xef\xbb\xbf"


def read_text(path: str | Path, *, what: str = "file") -> str:
    """The content of ``path`` decoded as UTF-8. A missing/unreadable file or a non-UTF-8 byte
    raises :class:`HatError` naming ``what``, the file and (for a bad byte) its line and column."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError as exc:
        raise HatError(f"{path}: is a folder; give the {what} file itself") from exc
    except OSError as exc:
        raise HatError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _position(data, exc.start)
        raise HatError(
            f"{path}:{line}:{column}: the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at byte offset "
            f"{exc.start}); save it as UTF-8 and retry"
        ) from exc


def check_text(path: str | Path, *, what: str = "file") -> None:
    """Raise as :func:`read_text` would; for checking a file before a library reads it itself."""
    read_text(path, what=what)


def read_jsonl(path: str | Path, *, what: str = "JSONL file") -> list[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of a JSON Lines file; a line that is not
    JSON raises :class:`HatError` as ``path:line:column: …``."""
    rows: list[tuple[int, Any]] = []
    for number, line in enumerate(read_text(path, what=what).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise HatError(f"{path}:{number}:{exc.colno}: not valid JSON ({exc.msg}) in the {what}") from exc
    return rows


def read_json(path: str | Path, *, what: str = "JSON file") -> Any:
    """One JSON document; a syntax error raises :class:`HatError` as ``path:line:column: …``."""
    text = read_text(path, what=what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HatError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}) in the {what}") from exc


def _position(data: bytes, offset: int) -> tuple[int, int]:
    """1-based ``(line, column)`` of byte ``offset``."""
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, column
