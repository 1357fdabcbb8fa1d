"""The deployment files hold together: they parse, every file they mention exists, and the ports,
hosts, data source URLs and environment variables agree between docker compose, the Collector
configs, Jaeger, Tempo, Grafana and the Kubernetes manifests.

No container runs here (the machine has no Docker); the real programs are exercised by
``tests/test_backends.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from memtrace_otel.semconv import attributes as A

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
CONFIGS = REPO / "collector_config"
K8S = DEPLOY / "k8s"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _port(endpoint: str) -> int:
    """The port of ``host:port`` or ``scheme://host:port/path``."""
    match = re.search(r":(\d+)(?:/|$)", endpoint)
    assert match, endpoint
    return int(match.group(1))


def _host(endpoint: str) -> str:
    return re.sub(r"^\w+://", "", endpoint).split(":")[0]


def _env_default(config_text: str, name: str) -> str:
    """The default of ``${env:NAME:-default}`` in a Collector config."""
    match = re.search(r"\$\{env:" + re.escape(name) + r":-([^}]*)\}", config_text)
    assert match, f"{name} not in config"
    return match.group(1)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = _load(DEPLOY / "docker-compose.yaml")
    return data


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """``{container path: host source}`` of a compose service's short-syntax volumes."""
    result = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        result[target] = source
    return result


def _published(service: dict[str, Any]) -> dict[int, int]:
    """``{container port: host port}`` of a compose service."""
    result = {}
    for entry in service.get("ports", []):
        host, container = str(entry).split(":")[-2:]
        result[int(container)] = int(host)
    return result


# --- Everything parses -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    sorted(
        [*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.json"), *CONFIGS.glob("*.yaml")],
        key=str,
    ),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_file_parses(path: Path) -> None:
    if path.suffix == ".json":
        assert isinstance(json.loads(path.read_text()), dict)
    else:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        assert documents and all(isinstance(doc, dict) for doc in documents)


# --- docker compose ----------------------------------------------------------------------------


def test_compose_has_the_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"collector", "jaeger", "tempo", "grafana", "batch"}
    # The batch job is one-shot: never restarted, not started by `up`.
    batch = compose["services"]["batch"]
    assert batch["restart"] == "no" and batch["profiles"] == ["batch"]
    assert "memtrace attribute /data/traces/*.jsonl" in " ".join(batch["command"])
    # Its write-back endpoint is the Collector's OTLP/HTTP port inside the compose network.
    if "--write-back" in " ".join(batch["command"]):
        endpoint = batch["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
        assert _host(endpoint) == "collector"
        env = compose["services"]["collector"]["environment"]
        assert _port(endpoint) == _port(env["MEMTRACE_OTLP_HTTP_ENDPOINT"])


def test_compose_references_existing_files(compose: dict[str, Any]) -> None:
    declared_volumes = set(compose.get("volumes", {}))
    for name, service in compose["services"].items():
        for target, source in _mounts(service).items():
            if source.startswith((".", "/")):
                assert (DEPLOY / source).resolve().is_file(), f"{name}: {source} -> {target}"
            else:
                assert source in declared_volumes, f"{name}: undeclared volume {source}"
        if "build" in service:
            context = (DEPLOY / service["build"]["context"]).resolve()
            assert (context / service["build"]["dockerfile"]).is_file()


def test_compose_services_have_health_checks(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        if name != "batch":
            assert "healthcheck" in service, name


def test_every_config_a_service_starts_with_is_mounted(compose: dict[str, Any]) -> None:
    expected = {
        "collector": CONFIGS / "otelcol.yaml",
        "jaeger": DEPLOY / "jaeger.yaml",
        "tempo": DEPLOY / "tempo.yaml",
    }
    for name, source in expected.items():
        service = compose["services"][name]
        [config_arg] = [a for a in service["command"] if "config" in a]
        container_path = config_arg.split("=", 1)[1]
        assert (DEPLOY / _mounts(service)[container_path]).resolve() == source


def test_collector_environment_names_exist_in_its_config(compose: dict[str, Any]) -> None:
    text = (CONFIGS / "otelcol.yaml").read_text()
    for name in compose["services"]["collector"]["environment"]:
        assert "${env:" + name + ":-" in text, name


def test_ports_agree_between_compose_collector_and_backends(compose: dict[str, Any]) -> None:
    services = compose["services"]
    env = services["collector"]["environment"]
    jaeger = _load(DEPLOY / "jaeger.yaml")
    tempo = _load(DEPLOY / "tempo.yaml")

    # Collector -> Jaeger and Tempo: service names and OTLP gRPC receiver ports.
    jaeger_otlp = jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    tempo_otlp = tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert _host(env["MEMTRACE_JAEGER_OTLP_ENDPOINT"]) == "jaeger"
    assert _port(env["MEMTRACE_JAEGER_OTLP_ENDPOINT"]) == _port(jaeger_otlp)
    assert _host(env["MEMTRACE_TEMPO_OTLP_ENDPOINT"]) == "tempo"
    assert _port(env["MEMTRACE_TEMPO_OTLP_ENDPOINT"]) == _port(tempo_otlp)

    # What the apps reach on the host is what the Collector listens on.
    published = _published(services["collector"])
    assert _port(env["MEMTRACE_OTLP_GRPC_ENDPOINT"]) in published
    assert _port(env["MEMTRACE_OTLP_HTTP_ENDPOINT"]) in published

    # Jaeger's query port (UI and API) and Tempo's HTTP port are the published ones.
    assert _port(jaeger["extensions"]["jaeger_query"]["http"]["endpoint"]) in _published(
        services["jaeger"]
    )
    assert tempo["server"]["http_listen_port"] in _published(services["tempo"])

    # Health checks probe the ports the programs serve their health on.
    def probed(name: str) -> int:
        return _port(next(a for a in services[name]["healthcheck"]["test"] if "http://" in a))

    assert probed("collector") == _port(env["MEMTRACE_HEALTH_ENDPOINT"])
    assert probed("jaeger") == _port(jaeger["extensions"]["healthcheckv2"]["http"]["endpoint"])
    assert probed("tempo") == tempo["server"]["http_listen_port"]

    # Jaeger's and the Collector's own metrics both default to 8888: they must differ.
    jaeger_metrics = jaeger["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]
    assert jaeger_metrics["prometheus"]["port"] != int(env["MEMTRACE_COLLECTOR_METRICS_PORT"])


def test_receive_limits_are_raised_along_the_path() -> None:
    # 64 MiB on every OTLP gRPC receiver the memory payloads cross (the default 4 MiB drops them).
    collector_text = (CONFIGS / "otelcol.yaml").read_text()
    assert int(_env_default(collector_text, "MEMTRACE_OTLP_MAX_MIB")) >= 64
    jaeger = _load(DEPLOY / "jaeger.yaml")
    tempo = _load(DEPLOY / "tempo.yaml")
    assert jaeger["receivers"]["otlp"]["protocols"]["grpc"]["max_recv_msg_size_mib"] >= 64
    assert (
        tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["max_recv_msg_size_mib"]
        >= 64
    )


# --- Grafana -----------------------------------------------------------------------------------


def test_grafana_data_sources_point_at_the_backends(compose: dict[str, Any]) -> None:
    sources = {
        s["type"]: s
        for s in _load(DEPLOY / "grafana/provisioning/datasources/datasources.yaml")["datasources"]
    }
    assert set(sources) == {"jaeger", "tempo"}
    jaeger = _load(DEPLOY / "jaeger.yaml")
    tempo = _load(DEPLOY / "tempo.yaml")
    assert _host(sources["jaeger"]["url"]) == "jaeger"
    assert _port(sources["jaeger"]["url"]) == _port(
        jaeger["extensions"]["jaeger_query"]["http"]["endpoint"]
    )
    assert _host(sources["tempo"]["url"]) == "tempo"
    assert _port(sources["tempo"]["url"]) == tempo["server"]["http_listen_port"]
    for name in ("jaeger", "tempo"):
        assert name in compose["services"]


def test_grafana_loads_the_dashboard_from_where_it_is_mounted(compose: dict[str, Any]) -> None:
    provider = _load(DEPLOY / "grafana/provisioning/dashboards/dashboards.yaml")["providers"][0]
    mounts = _mounts(compose["services"]["grafana"])
    dashboards = [t for t, s in mounts.items() if s.endswith(".json")]
    assert dashboards and all(
        Path(t).parent == Path(provider["options"]["path"]) for t in dashboards
    )


def test_dashboard_counts_failures_from_verdict_spans() -> None:
    dashboard = json.loads((DEPLOY / "grafana/dashboards/memtrace-failures.json").read_text())
    uids = {
        s["uid"]
        for s in _load(DEPLOY / "grafana/provisioning/datasources/datasources.yaml")["datasources"]
    }
    queries = [t["query"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert all(panel["datasource"]["uid"] in uids for panel in dashboard["panels"])
    # Failure counts over time by error type and by culprit op, from memtrace.attribution spans.
    selector = f'{{ name = "{A.MEMTRACE_ATTRIBUTION_SPAN}" }}'
    by_type = f"count_over_time() by (span.{A.MEMTRACE_ATTRIBUTION_ERROR_TYPE})"
    by_op = f"count_over_time() by (span.{A.MEMTRACE_ATTRIBUTION_OP_NAME})"
    assert any(q.startswith(selector) and q.endswith(by_type) for q in queries)
    assert any(q.startswith(selector) and q.endswith(by_op) for q in queries)
    # Every attribute a query names is one of the trace contract's names.
    named = {m for q in queries for m in re.findall(r"span\.([\w.]+)", q)}
    assert named and named <= set(A.ALL_ATTRIBUTE_NAMES), named - set(A.ALL_ATTRIBUTE_NAMES)


# --- Kubernetes --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    data: dict[str, Any] = _load(K8S / "kustomization.yaml")
    return data


def _k8s_objects(kustomization: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        doc
        for resource in kustomization["resources"]
        for doc in yaml.safe_load_all((K8S / resource).read_text())
        if doc
    ]


def test_kustomization_resources_exist(kustomization: dict[str, Any]) -> None:
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), resource
    kinds = {obj["kind"] for obj in _k8s_objects(kustomization)}
    assert {"Deployment", "DaemonSet", "CronJob", "Service", "PersistentVolumeClaim"} <= kinds


def test_k8s_config_copies_match_collector_config(kustomization: dict[str, Any]) -> None:
    for generator in kustomization["configMapGenerator"]:
        for entry in generator["files"]:
            key, path = entry.split("=", 1)
            copy = K8S / path
            assert copy.read_text() == (CONFIGS / key).read_text(), (
                f"{copy} differs from collector_config/{key}: "
                "cp collector_config/otelcol.yaml collector_config/gateway.yaml deploy/k8s/config/"
            )


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    pod = spec.get("template", {}).get("spec", {})
    containers: list[dict[str, Any]] = pod.get("containers", [])
    return containers


def test_k8s_workloads_reference_what_exists(kustomization: dict[str, Any]) -> None:
    objects = _k8s_objects(kustomization)
    config_maps = {g["name"]: g for g in kustomization["configMapGenerator"]}
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    images = {i["name"] for i in kustomization["images"]}
    services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet", "CronJob"):
            continue
        spec = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj["spec"]
        volumes = {v["name"]: v for v in spec["template"]["spec"].get("volumes", [])}
        for volume in volumes.values():
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
        for container in _containers(obj):
            assert container["image"] in images
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes
            # A Collector started with --config=/etc/memtrace/<file> gets <file> from its ConfigMap,
            # and every variable it sets is one that config reads.
            for arg in container.get("args", []):
                if arg.startswith("--config="):
                    name = Path(arg.split("=", 1)[1]).name
                    [volume] = [
                        volumes[m["name"]]
                        for m in container["volumeMounts"]
                        if m["mountPath"] == "/etc/memtrace"
                    ]
                    generator = config_maps[volume["configMap"]["name"]]
                    assert any(f.startswith(name + "=") for f in generator["files"])
                    text = (CONFIGS / name).read_text()
                    for env in container.get("env", []):
                        if env["name"] != "POD_NAME":
                            assert "${env:" + env["name"] + ":-" in text, (name, env["name"])
                    # Probes and container ports use the config's health port.
                    health = _port(_env_default(text, "MEMTRACE_HEALTH_ENDPOINT"))
                    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
                    assert ports["health"] == health
                    assert ports["otlp-grpc"] == _port(
                        _env_default(text, "MEMTRACE_OTLP_GRPC_ENDPOINT")
                    )
    # The agents route to the headless Service of the Collector tier, on its OTLP port.
    [agent] = [o for o in objects if o["kind"] == "DaemonSet"]
    env = {e["name"]: e.get("value") for e in _containers(agent)[0]["env"]}
    assert env["MEMTRACE_COLLECTORS_HOSTNAME"].split(".")[0] in services
    [headless] = [
        o for o in objects if o["kind"] == "Service" and o["spec"].get("clusterIP") == "None"
    ]
    assert int(env["MEMTRACE_COLLECTORS_PORT"]) in {p["port"] for p in headless["spec"]["ports"]}


def test_k8s_batch_job_runs_attribution_over_the_collector_files(
    kustomization: dict[str, Any],
) -> None:
    objects = _k8s_objects(kustomization)
    [cronjob] = [o for o in objects if o["kind"] == "CronJob"]
    [container] = _containers(cronjob)
    assert " ".join(container["args"]).startswith(
        "memtrace attribute /data/traces/*.jsonl --out /data/verdicts.jsonl --report /data/report"
    )
    # Write-back goes to a Service of this deployment, on the Collector's OTLP/HTTP port.
    env_batch = {e["name"]: e["value"] for e in container.get("env", [])}
    if "--write-back" in container["args"][0]:
        endpoint = env_batch["OTEL_EXPORTER_OTLP_ENDPOINT"]
        services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
        ports = {p["port"] for p in services[_host(endpoint)]["spec"]["ports"]}
        assert _port(endpoint) in ports
        assert _port(endpoint) == _port(
            _env_default((CONFIGS / "otelcol.yaml").read_text(), "MEMTRACE_OTLP_HTTP_ENDPOINT")
        )
    [collector] = [o for o in objects if o["kind"] == "Deployment"]
    env = {e["name"]: e.get("value", "") for e in _containers(collector)[0]["env"]}
    assert env["MEMTRACE_TRACES_PATH"].startswith("/data/traces/")
    assert env["MEMTRACE_TRACES_PATH"].endswith(".jsonl")


def test_jaeger_binds_loopback_unless_told(compose: dict[str, Any]) -> None:
    text = (DEPLOY / "jaeger.yaml").read_text()
    assert "0.0.0.0" not in text.split("\n", 3)[-1]  # below the header comment
    jaeger = _load(DEPLOY / "jaeger.yaml")
    endpoints = [
        jaeger["extensions"]["jaeger_query"]["http"]["endpoint"],
        jaeger["extensions"]["jaeger_query"]["grpc"]["endpoint"],
        jaeger["extensions"]["healthcheckv2"]["http"]["endpoint"],
        jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
        jaeger["receivers"]["otlp"]["protocols"]["http"]["endpoint"],
    ]
    for endpoint in endpoints:
        assert endpoint.startswith("${env:JAEGER_LISTEN_HOST:-127.0.0.1}:"), endpoint
    # In compose, the Collector and Grafana reach Jaeger over the network: all interfaces there.
    assert compose["services"]["jaeger"]["environment"]["JAEGER_LISTEN_HOST"] == "0.0.0.0"


def test_failed_answers_panel_counts_feedback_flagged_failures_too() -> None:
    dashboard = json.loads((DEPLOY / "grafana/dashboards/memtrace-failures.json").read_text())
    [panel] = [p for p in dashboard["panels"] if p["title"].startswith("Failed answers")]
    queries = [t["query"] for t in panel["targets"]]
    feedback = f'{{ name = "{A.MEMTRACE_FEEDBACK_SPAN}" && '
    assert any(
        q.startswith(feedback)
        and f'event.{A.GEN_AI_EVALUATION_SCORE_LABEL} = "incorrect"' in q
        and f"event.{A.GEN_AI_EVALUATION_SCORE_VALUE} = 0" in q
        and q.endswith("| count_over_time()")
        for q in queries
    ), queries
    assert any(f'span.{A.MEMTRACE_JUDGE_VERDICT} = "incorrect"' in q for q in queries)
    # Every event attribute a query names is a contract (or upstream GenAI) name, and the query's
    # braces and quotes balance (TraceQL has no escape for either here).
    all_queries = [t["query"] for p in dashboard["panels"] for t in p["targets"]]
    named = {m for q in all_queries for m in re.findall(r"event\.([\w.]+)", q)}
    assert named and named <= set(A.ALL_ATTRIBUTE_NAMES), named - set(A.ALL_ATTRIBUTE_NAMES)
    for q in all_queries:
        assert (
            q.count("{") == q.count("}") and q.count("(") == q.count(")") and q.count('"') % 2 == 0
        )
