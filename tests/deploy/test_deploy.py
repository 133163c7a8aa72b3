"""deploy/: the Helm chart renders to sound Kubernetes objects; the other manifests hang together.

Helm is not installable here, so the chart is rendered by tests/deploy/gotemplate.py (the
subset of Go templates the chart uses; anything else fails), its values are checked
against values.schema.json (which Helm itself enforces at install), and the ConfigMap's
twin.yaml is loaded by the service's real config loader.
"""

from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest
import yaml

from tests.conftest import ROOT
from tests.deploy.gotemplate import render_chart
from twin.server.config import load_config

DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "fabric-twin"


def chart_files() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((CHART / "templates").iterdir())}


def values(**overrides) -> dict:
    base = yaml.safe_load((CHART / "values.yaml").read_text())
    for dotted, value in overrides.items():
        node = base
        *parents, last = dotted.split("__")
        for key in parents:
            node = node[key]
        node[last] = value
    return base


def render(vals: dict, release: str = "fabric-twin") -> dict[str, dict]:
    jsonschema.validate(vals, json.loads((CHART / "values.schema.json").read_text()))
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    out: dict[str, dict] = {}
    for name, text in render_chart(chart_files(), copy.deepcopy(vals), release, chart).items():
        doc = yaml.safe_load(text)
        if doc is not None:
            assert doc["apiVersion"] and doc["metadata"]["name"], name
            out[doc["kind"]] = doc
    return out


def test_chart_metadata_and_schema_reject_bad_values():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "fabric-twin"
    schema = json.loads((CHART / "values.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values(podSecurityContext={"runAsNonRoot": False}), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values(service={"port": 0}), schema)


def test_default_render(tmp_path):
    objs = render(values())
    assert set(objs) == {"ConfigMap", "Deployment", "Service"}  # no Secret without auth or TLS
    dep = objs["Deployment"]
    assert dep["metadata"]["name"] == "fabric-twin"
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    (c,) = pod["containers"]
    assert c["image"] == "fabric-twin:0.1.0"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == ports["health"] == 8081  # native gRPC probes
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    svc = objs["Service"]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["port"] == ports["grpc"] == 50051
    # The ConfigMap is a config the service itself accepts.
    cfg_file = tmp_path / "twin.yaml"
    cfg_file.write_text(objs["ConfigMap"]["data"]["twin.yaml"])
    cfg = load_config(cfg_file, env={})
    assert (cfg.host, cfg.port, cfg.health_port, cfg.drain_s) == ("0.0.0.0", 50051, 8081, 5)
    assert not cfg.tls.enabled and not cfg.auth.token_file
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/etc/twin/config" in mounts and cfg.state_dir in mounts


def test_render_with_auth_and_mutual_tls(tmp_path):
    objs = render(values(auth={"enabled": True, "token": "t0k", "existingSecret": ""},
                         tls={"enabled": True, "mutual": True, "cert": "CERT", "key": "KEY", "clientCA": "CA",
                              "existingSecret": ""},
                         ray={"address": "ray://fabric-twin-ray-head-svc:10001"}), release="twin")
    secret = objs["Secret"]
    assert secret["stringData"] == {"token": "t0k", "tls.crt": "CERT", "tls.key": "KEY", "ca.crt": "CA"}
    dep = objs["Deployment"]
    assert dep["metadata"]["name"] == "twin-fabric-twin"
    pod = dep["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["tls"]["secret"]["secretName"] == vols["auth"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert {i["key"] for i in vols["tls"]["secret"]["items"]} == {"tls.crt", "tls.key", "ca.crt"}
    (c,) = pod["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["RAY_ADDRESS"] == "ray://fabric-twin-ray-head-svc:10001"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    cfg_file = tmp_path / "twin.yaml"
    cfg_file.write_text(objs["ConfigMap"]["data"]["twin.yaml"])
    cfg = load_config(cfg_file, env={})
    assert cfg.tls.mutual and cfg.tls.cert_file.startswith(mounts["tls"])
    assert cfg.auth.token_file.startswith(mounts["auth"])
    # Probes keep using the plaintext health port while the main port needs mTLS.
    assert c["readinessProbe"]["grpc"]["port"] == cfg.health_port


def test_existing_secrets_skip_the_chart_secret():
    objs = render(values(auth={"enabled": True, "token": "", "existingSecret": "ops-token"},
                         tls={"enabled": True, "mutual": False, "existingSecret": "ops-tls"}))
    assert "Secret" not in objs
    vols = {v["name"]: v for v in objs["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert vols["auth"]["secret"]["secretName"] == "ops-token" and vols["tls"]["secret"]["secretName"] == "ops-tls"


def test_dockerfile_runs_unprivileged_with_grpc_health_check():
    text = (DEPLOY / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and not users[-1].startswith(("0", "root"))
    health = re.search(r"^HEALTHCHECK.*\n\s*CMD (.*)$", text, re.M)
    assert health and "twin.server.healthcheck" in health.group(1)
    assert re.search(r'^ENTRYPOINT \["twin", "serve"\]', text, re.M)
    assert "EXPOSE 50051" in text
    for src in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for path in src.split():
            assert (ROOT / path).exists(), path


def test_kuberay_cluster_manifest():
    rc = yaml.safe_load((DEPLOY / "kuberay" / "raycluster.yaml").read_text())
    assert rc["apiVersion"] == "ray.io/v1" and rc["kind"] == "RayCluster"
    head = rc["spec"]["headGroupSpec"]
    head_ports = {p["name"]: p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
    assert head_ports["client"] == 10001 and head_ports["gcs"] == 6379
    values_ray = yaml.safe_load((CHART / "values.yaml").read_text())["ray"]
    assert "ray://" in (CHART / "values.yaml").read_text() and "address" in values_ray
    images = {head["template"]["spec"]["containers"][0]["image"]}
    for group in rc["spec"]["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        images |= {c["image"] for c in group["template"]["spec"]["containers"]}
        assert group["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert images == {"fabric-twin:0.1.0"}  # workers run the service's code and plugins


def test_otel_collector_pipeline_forwards_to_the_twin():
    cfg = yaml.safe_load((DEPLOY / "otel-collector" / "config.yaml").read_text())
    for pipeline in cfg["service"]["pipelines"].values():
        for section, key in (("receivers", "receivers"), ("processors", "processors"), ("exporters", "exporters")):
            for name in pipeline[key]:
                assert name in cfg[section], f"{name} used in a pipeline but not defined under {section}"
    exporter = cfg["exporters"]["otlp/twin"]
    assert exporter["endpoint"].endswith(":50051}") or exporter["endpoint"].endswith(":50051")
    assert exporter["headers"]["authorization"].startswith("Bearer ")
    assert "otlp/twin" in cfg["service"]["pipelines"]["metrics"]["exporters"]
    jobs = {j["job_name"] for j in cfg["receivers"]["prometheus"]["config"]["scrape_configs"]}
    assert {"dcgm-exporter", "node-exporter"} <= jobs


def test_otlp_http_port_is_off_by_default_and_exposed_when_set():
    off = render(values())
    assert [p["name"] for p in off["Service"]["spec"]["ports"]] == ["grpc"]
    on = render(values(otlpHttpPort=4318))
    container = on["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "otlp-http", "containerPort": 4318} in container["ports"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TWIN_OTLP_HTTP_PORT"] == "4318"  # what twin serve reads (twin/server/config.py)
    ports = {p["name"]: p for p in on["Service"]["spec"]["ports"]}
    assert ports["otlp-http"]["port"] == 4318 and ports["otlp-http"]["targetPort"] == "otlp-http"
    with pytest.raises(jsonschema.ValidationError):
        render(values(otlpHttpPort=70000))


def test_image_is_pinned_and_carries_the_ray_of_the_kuberay_cluster():
    text = (DEPLOY / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", text, re.M)
    assert bases and all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", b) for b in bases), bases
    assert '"fabric-twin[server,telemetry,ray]"' in text and "-c /constraints.txt" in text
    pins = {}
    for line in (DEPLOY / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            pins[name.lower()] = version
    rc = yaml.safe_load((DEPLOY / "kuberay" / "raycluster.yaml").read_text())
    assert pins["ray"] == rc["spec"]["rayVersion"]  # a Ray client must run the cluster's version
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    deps = [*project["dependencies"], *extras["server"], *extras["telemetry"], *extras["ray"]]
    from packaging.requirements import Requirement

    for dep in deps:
        req = Requirement(dep)
        name = req.name.lower()
        assert name in pins, f"{name} is not in deploy/constraints.txt"
        assert req.specifier.contains(pins[name]), f"deploy/constraints.txt pins {name}=={pins[name]}, outside {dep}"
