"""The exception tree of HAT.

Every error HAT raises on purpose derives from :class:`HatError`, so callers can catch one type.
Messages say what went wrong *and what to do next*; harness problems name the file and line.

    HatError
    ├── HarnessError            a harness folder cannot be loaded
    │   └── HarnessValidationError   one or more problems, each with file and line (``.problems``)
    ├── ModelSpecError          an unknown or malformed model spec string
    ├── MissingDependencyError  an optional package is missing; the message carries the install hint
    ├── ModelError              a model backend failed to generate (server down, bad response, ...)
    └── ToolBindingError        a tool binding cannot be resolved (import failed, MCP server down)

Tool *failures at run time* are not exceptions: they become observations the model sees (see
``hat.harness.tools``), and malformed model output becomes feedback for the next round (see
``hat.harness.protocol``). Only programming errors and unusable configuration raise.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "HarnessError",
    "HarnessValidationError",
    "HatError",
    "MissingDependencyError",
    "ModelError",
    "ModelSpecError",
    "Problem",
    "ToolBindingError",
]


class HatError(Exception):
    """Root of every error HAT raises on purpose."""


class HarnessError(HatError):
    """A harness folder or name cannot be loaded."""


@dataclass(frozen=True)
class Problem:
    """One validation problem, located in a file (and a line when one is known)."""

    file: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


class HarnessValidationError(HarnessError):
    """The harness has problems; ``problems`` lists every one of them, not just the first."""

    def __init__(self, problems: list[Problem], root: str = "") -> None:
        self.problems = list(problems)
        head = f"harness {root!r} is invalid" if root else "harness is invalid"
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{head} ({len(self.problems)} problem(s)); fix these and retry:\n{lines}")


class ModelSpecError(HatError):
    """A model spec string that no backend understands."""


class MissingDependencyError(HatError):
    """An optional dependency is not installed."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the package {package!r}, which is not installed. "
            f"Install it with: pip install 'hat-agent[{extra}]' (or run `make install`)."
        )


class ModelError(HatError):
    """A model backend could not produce a generation."""


class ToolBindingError(HatError):
    """A tool binding cannot be resolved to something callable."""
