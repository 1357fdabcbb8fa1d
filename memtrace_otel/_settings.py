"""The package's one settings resolver: argument > environment variable > default.

Every setting a user can give in code or in the environment (the names live in
:mod:`memtrace_otel.semconv.env`) is resolved here, once, at construction, with one message:
``invalid <argument or variable> <value>: expected <what>``. The rule is the OpenTelemetry SDK's
(``OTEL_BSP_EXPORT_TIMEOUT=-1``):

- a wrong *argument* is a bug in code: ``ValueError`` at construction;
- a bad *environment variable* is a typo in a deployment, which must not break the app at
  ``import`` or at ``MemTracer()``: it is logged once (per variable and value) and the default
  is used. Offline code that would rather stop before any work (the batch job's size caps)
  asks for ``bad_env="raise"``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Literal, TypeVar

from memtrace_otel._internal import data_warning

T = TypeVar("T")
BadEnv = Literal["raise", "warn"]


def resolve(
    name: str,
    argument: object,
    env: str | None,
    default: T,
    parse: Callable[[object], T],
    *,
    bad_env: BadEnv = "warn",
) -> T:
    """A setting: ``argument`` if not ``None``, else the variable ``env`` if set, else ``default``.

    Args:
        name: the argument's name, for the error message.
        argument: the value given in code (``None``: not given).
        env: the environment variable read when no argument is given (``None``: none).
        default: the value when neither is given (returned as it is, not parsed).
        parse: turns a given value (the argument, or the variable's stripped text) into the
            setting; raises ``ValueError("expected ...")`` for a bad one.
        bad_env: what a bad variable does: ``"warn"`` (log once per variable and value, and
            use ``default``) or ``"raise"`` a ``ValueError``.

    Raises:
        ValueError: a bad argument, or a bad variable with ``bad_env="raise"``.

    >>> resolve("size", None, "MEMTRACE_NO_SUCH_VARIABLE", 64, positive_int)
    64
    >>> resolve("size", 0, "MEMTRACE_NO_SUCH_VARIABLE", 64, positive_int)
    Traceback (most recent call last):
    ValueError: invalid size 0: expected a positive integer
    """
    if argument is not None:
        return check(name, argument, parse)
    raw = os.environ.get(env, "").strip() if env else ""
    if not raw:
        return default
    try:
        return parse(raw)
    except ValueError as e:
        if bad_env == "raise":
            raise ValueError(f"invalid {env} {raw!r}: {e}") from None
        data_warning(
            f"env:{env}={raw}",
            "memtrace-otel: invalid %s %r: %s; using the default %s",
            env,
            raw,
            e,
            default,
        )
        return default


def check(name: str, value: object, parse: Callable[[object], T]) -> T:
    """``parse(value)``, a ``ValueError`` naming ``name`` if it is bad (a setting given in code).

    >>> check("max_line_bytes", -1, positive_int)
    Traceback (most recent call last):
    ValueError: invalid max_line_bytes -1: expected a positive integer
    """
    try:
        return parse(value)
    except ValueError as e:
        raise ValueError(f"invalid {name} {value!r}: {e}") from None


def positive_int(value: object) -> int:
    """An integer >= 1: an ``int`` (not ``bool``) or its ASCII decimal digits.

    >>> positive_int("4096"), positive_int(7)
    (4096, 7)
    """
    return _int(value, 1, "a positive integer")


def non_negative_int(value: object) -> int:
    """An integer >= 0: an ``int`` (not ``bool``) or its ASCII decimal digits.

    >>> non_negative_int("0")
    0
    """
    return _int(value, 0, "an integer >= 0")


def seconds(value: object) -> float:
    """A finite number of seconds >= 0: an ``int``, a ``float`` or its text.

    >>> seconds("0.5"), seconds(2)
    (0.5, 2.0)
    """
    number: float
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = -1.0
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        number = -1.0
    if not number >= 0 or math.isinf(number):  # NaN fails the comparison
        raise ValueError("expected a finite number of seconds >= 0")
    return number


def _int(value: object, least: int, expected: str) -> int:
    if isinstance(value, str):
        number = int(value) if value.isascii() and value.isdigit() else least - 1
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        number = least - 1
    if number < least:
        raise ValueError(f"expected {expected}")
    return number
