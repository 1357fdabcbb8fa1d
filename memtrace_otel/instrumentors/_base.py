"""What the three instrumentors share: the version check, patching and undoing it.

Each instrumentor stays thin (as in opentelemetry-python-contrib): it names its package's
``_instruments``, builds its telemetry object and hands it to :meth:`_install` with the
targets to patch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# BaseInstrumentor is untyped (Any): subclassing it needs the ignores below.
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from memtrace_otel.instrumentors._common import (
    Patcher,
    Target,
    forget_outputs,
    forget_retrievals,
    supported_version,
)


class PatchingInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """A ``BaseInstrumentor`` that wraps its targets with a telemetry object's wrapper.

    Subclasses return their package's ``_instruments`` from ``instrumentation_dependencies``
    and implement ``_instrument`` as: check :meth:`_supported_version`, build the telemetry,
    call :meth:`_install`.
    """

    _patcher: Patcher | None = None
    _telemetry: Any = None

    def _check_dependency_conflicts(self) -> None:
        # Checked in _instrument instead, so that an unsupported version is one warning on
        # both paths (opentelemetry-instrument skips the check; a manual call would log an error).
        return None

    def _supported_version(self) -> str | None:
        """The installed version if supported; else ``None`` (and a warning was logged)."""
        return supported_version(self.instrumentation_dependencies(), type(self).__name__)

    def _install(
        self,
        targets: Sequence[Target],
        telemetry: Any,
        module_hooks: dict[str, Callable[[Any], Callable[[], None] | None]] | None = None,
    ) -> None:
        """Patch ``targets`` with ``telemetry.wrapper`` (closed again by ``_uninstrument``)."""
        patcher = Patcher(targets, telemetry.wrapper, module_hooks)
        self._telemetry, self._patcher = telemetry, patcher
        patcher.apply()

    def _uninstrument(self, **kwargs: Any) -> None:
        patcher, telemetry = self._patcher, self._telemetry
        self._patcher = self._telemetry = None
        if patcher is not None:
            patcher.undo()
        if telemetry is not None:
            telemetry.close()
        forget_retrievals()  # what was kept for linking goes with the instrumentation
        forget_outputs()
