"""The bench wing: what measures memtrace-otel, built on top of it.

The reference memory systems and the benchmark generator (:mod:`memtrace_bench.systems`), the
optimiser, the replay and fidelity methods, the MemTraceBench export of our own systems, the suite of
real apps, and the ``memtrace bench`` / ``memtrace optimize`` / ``memtrace demo`` commands. It imports
the product (:mod:`memtrace_otel`); nothing in the product imports it (``tests/test_semconv.py``).
"""
