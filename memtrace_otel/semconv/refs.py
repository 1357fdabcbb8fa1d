"""Variable references: ``<id>@<version>``, the version an integer from 1.

The id may itself contain ``@`` and ``:`` (``U1:D1:3@1``, ``user@example.com@2``): the version is
always what follows the *last* ``@``.
"""

from __future__ import annotations

from typing import NamedTuple


class Ref(NamedTuple):
    """A parsed variable reference."""

    id: str
    version: int

    def __str__(self) -> str:
        return f"{self.id}@{self.version}"

    def next(self) -> Ref:
        """The ref of the next version of the same variable.

        >>> Ref("memory:42", 1).next()
        Ref(id='memory:42', version=2)
        """
        return Ref(self.id, self.version + 1)


def parse_ref(text: str) -> Ref:
    """Split ``<id>@<version>`` at the last ``@``.

    Raises:
        ValueError: the text has no ``@``, an empty id, or a version that is not an integer >= 1.

    >>> parse_ref("U1:D1:3@1")
    Ref(id='U1:D1:3', version=1)
    >>> parse_ref("fact")
    Traceback (most recent call last):
    ...
    ValueError: invalid variable ref 'fact': expected '<id>@<version>'
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid variable ref {text!r}: expected a string '<id>@<version>'")
    ident, sep, version = text.rpartition("@")
    if not sep or not ident:
        raise ValueError(f"invalid variable ref {text!r}: expected '<id>@<version>'")
    if not version.isdigit() or not version.isascii() or int(version) < 1:
        raise ValueError(f"invalid variable ref {text!r}: the version must be an integer >= 1")
    return Ref(ident, int(version))


def format_ref(ident: str, version: int) -> str:
    """Join an id and a version into a ref, checking both.

    >>> format_ref("memory:42", 3)
    'memory:42@3'
    """
    if not isinstance(ident, str) or not ident:
        raise ValueError(f"invalid variable id {ident!r}: expected a non-empty string")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"invalid version {version!r} for {ident!r}: expected an integer >= 1")
    return f"{ident}@{version}"


def is_ref(text: object) -> bool:
    """Whether ``text`` is a well-formed ref.

    >>> is_ref("a@1"), is_ref("a@0"), is_ref("a")
    (True, False, False)
    """
    if not isinstance(text, str):
        return False
    # parse_ref's checks without building the Ref or an exception: this runs once per record
    # a search returns. int(version) >= 1 for ASCII digits is "not all zeros".
    ident, sep, version = text.rpartition("@")
    return bool(sep and ident and version.isdigit() and version.isascii() and version.strip("0"))
