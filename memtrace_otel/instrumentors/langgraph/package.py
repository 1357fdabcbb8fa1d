"""The langgraph versions this instrumentor supports (the ``langgraph`` extra in ``pyproject.toml``)."""

_instruments = ("langgraph >= 1.0, < 2",)
