"""``python -m memtrace_otel.cli``."""

from memtrace_otel.cli import console_main

console_main()
