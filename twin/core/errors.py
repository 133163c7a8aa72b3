"""Domain errors of the twin.

Every error names the offending field (a dotted path such as ``plan.tp``) and the rule it
broke, so the CLI, the gRPC service and library users can all report it the same way.
The gRPC adapter maps each class to one status code (see ``twin.wire.status_table``).
"""

from __future__ import annotations

import re

_PARENS = re.compile(r"\s*\([^()]*\)")

class TwinError(Exception):
    """Base class of every error the twin raises on purpose."""


class SpecError(TwinError, ValueError):
    """Bad input: a field is missing, unknown, of the wrong type or breaks a rule."""

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}" if field else rule)


class NotFoundError(TwinError, LookupError):
    """A named preset, fabric, strategy or plugin does not exist."""

    def __init__(self, field: str, name: str, known: list[str] | tuple[str, ...] = ()) -> None:
        self.field = field
        self.name = name
        self.known = tuple(sorted(known))
        hint = f"; known: {', '.join(self.known)}" if self.known else ""
        super().__init__(f"{field}: unknown name {name!r}{hint}")


class InfeasibleError(TwinError):
    """The scenario is well formed but cannot run (e.g. the plan does not fit in memory)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)


class MissingExtraError(InfeasibleError):
    """A feature needs an optional dependency group (a pyproject extra) that is not installed.

    A precondition of the request, not bad input and not a fault of the twin: over gRPC it is
    FAILED_PRECONDITION (an :class:`InfeasibleError`); the CLI prints it and exits 2. The
    message names the extra and the command that installs it.
    """

    def __init__(self, field: str, extra: str, feature: str, missing: str, alternative: str = "") -> None:
        self.extra = extra
        self.feature = feature
        self.missing = missing
        super().__init__(field, f"{feature} needs the '{extra}' extra (cannot import {missing}): "
                                f"pip install 'fabric-twin[{extra}]'" + (f" ({alternative})" if alternative else ""))


class TooLargeError(TwinError):
    """A request exceeds a configured limit (sweep size, message size, ...)."""

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}")


class PluginError(TwinError):
    """A plugin is broken: duplicate kind, wrong hook result, failed import."""


def reason_of(err: Exception) -> str:
    """A point-independent infeasibility reason: the field and the rule, numbers dropped.

    ``plan.tp: tp*pp*cp (24) must divide num_gpus (1000)`` -> ``plan.tp: tp*pp*cp must
    divide num_gpus``, so points failing the same rule count together.
    """
    if isinstance(err, SpecError):
        return f"{err.field}: {_PARENS.sub('', err.rule)}" if err.field else _PARENS.sub("", err.rule)
    if isinstance(err, NotFoundError):
        return f"{err.field}: unknown name {err.name!r}"
    if isinstance(err, TwinError):
        return _PARENS.sub("", str(err))
    return f"{type(err).__name__}: {err}"
