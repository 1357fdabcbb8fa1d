"""Our own runs as MemTraceBench files, recorded by the real ``smartcomment`` recorder.

The product reads MemTraceBench files (:func:`memtrace_otel.sources.load_memtracebench`); writing
them from a run of the reference systems is the bench wing's (``memtrace bench memtracebench``).
"""

from memtrace_bench.memtracebench._export import ExportSummary, export_memtracebench

__all__ = ["ExportSummary", "export_memtracebench"]
