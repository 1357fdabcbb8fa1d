# The project's Collector distribution (collector_config/builder-config.yaml), built with OCB.
# Build context: the repository root (see deploy/docker-compose.yaml).
FROM golang:1.25-alpine AS build
ENV CGO_ENABLED=0
RUN go install go.opentelemetry.io/collector/cmd/builder@v0.155.0
WORKDIR /build
COPY collector_config/builder-config.yaml .
RUN builder --config=builder-config.yaml

FROM alpine:3.22
# wget (busybox) serves the compose health check.
COPY --from=build /build/_build/memtrace-otelcol/memtrace-otelcol /usr/local/bin/memtrace-otelcol
# The file exporter writes under /data; a named volume mounted there inherits this owner.
RUN mkdir -p /data/traces && chown -R 10001:10001 /data
USER 10001
ENTRYPOINT ["/usr/local/bin/memtrace-otelcol"]
CMD ["--config=/etc/memtrace/otelcol.yaml"]
