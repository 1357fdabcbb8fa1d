"""``python -m memtrace_otel.cli``."""

from memtrace_otel.cli import console_main

if __name__ == "__main__":
    console_main()
