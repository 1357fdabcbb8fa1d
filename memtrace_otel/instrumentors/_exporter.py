"""The old home of :class:`~memtrace_otel.export.TracesFileExporter`.

The ``memtrace_file`` exporter entry point now names ``memtrace_otel.export``; this module keeps
entry points installed from an older version of the package loading.
"""

from memtrace_otel.export import TracesFileExporter

__all__ = ["TracesFileExporter"]
