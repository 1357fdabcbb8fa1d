# memtrace-otel's CLI for the batch job (`memtrace attribute ...`). Build context: the repository root.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY memtrace_otel ./memtrace_otel
RUN pip install --no-cache-dir . && rm -rf /src
# Same uid as the Collector image, so both can use the shared /data volume.
RUN mkdir -p /data && chown 10001:10001 /data
USER 10001
WORKDIR /data
ENTRYPOINT ["memtrace"]
