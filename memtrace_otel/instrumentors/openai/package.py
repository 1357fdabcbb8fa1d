"""The openai versions this instrumentor supports (the ``openai`` extra in ``pyproject.toml``)."""

_instruments = ("openai >= 1.40",)
