"""Variables: one value at one version, referenced as ``<id>@<version>``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memtrace_otel.semconv import Category, format_ref, parse_ref


@dataclass(frozen=True, slots=True)
class Variable:
    """An immutable variable of the memory evolution graph.

    Create one with :meth:`MemTracer.variable` or directly; derive the next version with
    :meth:`next` (an update) or :meth:`tombstone` (a delete). ``traceparent`` is the W3C
    ``traceparent`` of the span that wrote it, set by ``op.output(...)``; store it in the record's
    metadata so a reader in another process can link to the writer.

    Raises:
        ValueError: an empty id, a version below 1, or an unknown category.

    >>> fact = Variable("fact:1", 1, "lives in Porto", Category.MEMORY)
    >>> fact.ref, fact.next("lives in Lisbon").ref, fact.tombstone().deleted
    ('fact:1@1', 'fact:1@2', True)
    """

    id: str
    version: int = 1
    value: Any = None
    category: Category = Category.OTHER
    meta: Mapping[str, Any] | None = None
    deleted: bool = False
    traceparent: str | None = None

    def __post_init__(self) -> None:
        format_ref(self.id, self.version)  # validates both
        if not isinstance(self.category, Category):
            try:
                object.__setattr__(self, "category", Category(self.category))
            except ValueError:
                allowed = ", ".join(c.value for c in Category)
                raise ValueError(
                    f"invalid category {self.category!r} for {self.id!r}: expected one of {allowed}"
                ) from None

    @property
    def ref(self) -> str:
        """``<id>@<version>``."""
        return f"{self.id}@{self.version}"

    @classmethod
    def from_ref(
        cls,
        ref: str,
        value: Any = None,
        *,
        category: Category | str = Category.OTHER,
        meta: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> Variable:
        """A variable from its ref string (split at the last ``@``).

        >>> Variable.from_ref("U1:D1:3@2").version
        2
        """
        parsed = parse_ref(ref)
        return cls(parsed.id, parsed.version, value, Category(category), meta, False, traceparent)

    def next(
        self,
        value: Any,
        *,
        meta: Mapping[str, Any] | None = None,
        category: Category | str | None = None,
    ) -> Variable:
        """The next version of this variable holding ``value`` (an update)."""
        return Variable(
            self.id,
            self.version + 1,
            value,
            Category(category) if category is not None else self.category,
            meta if meta is not None else self.meta,
        )

    def tombstone(self, *, meta: Mapping[str, Any] | None = None) -> Variable:
        """The next version of this variable marking it deleted."""
        return Variable(self.id, self.version + 1, None, self.category, meta, deleted=True)

    def with_traceparent(self, traceparent: str | None) -> Variable:
        """A copy carrying its writer's ``traceparent``."""
        # Hot path (every op output): the fields are validated already.
        return unchecked_variable(
            self.id, self.version, self.value, self.category, self.meta, self.deleted, traceparent
        )


def unchecked_variable(
    id: str,
    version: int,
    value: Any,
    category: Category,
    meta: Mapping[str, Any] | None,
    deleted: bool,
    traceparent: str | None,
) -> Variable:
    """A :class:`Variable` from fields the caller guarantees valid (no ``__post_init__``).

    For hot paths only: a non-empty ``id``, an ``int`` ``version`` >= 1, a :class:`Category`.
    """
    var = _new(Variable)
    _set_id(var, id)
    _set_version(var, version)
    _set_value(var, value)
    _set_category(var, category)
    _set_meta(var, meta)
    _set_deleted(var, deleted)
    _set_traceparent(var, traceparent)
    return var


# The slots' own setters: what the frozen dataclass's ``__init__`` does through
# ``object.__setattr__``, without its attribute lookup (about a third cheaper per variable).
_new = object.__new__
_set_id, _set_version, _set_value, _set_category, _set_meta, _set_deleted, _set_traceparent = (
    Variable.__dict__[name].__set__
    for name in ("id", "version", "value", "category", "meta", "deleted", "traceparent")
)
