"""The mem0ai versions this instrumentor supports (the ``mem0`` extra in ``pyproject.toml``)."""

_instruments = ("mem0ai >= 1.0.0, < 3",)
"""1.x runs the classic pipeline, 2.x the additive one; both are tested (1.0.0 and 2.2.1)."""
