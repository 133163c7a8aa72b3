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
from twin.server.server_config import load_config

DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "fabric-twin"


def chart_files() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((CHART / "templates").iterdir())}


def other_chart_files() -> dict[str, str]:
    """The chart's files outside templates/ (what the templates' .Files.Get reads)."""
    return {str(p.relative_to(CHART)): p.read_text() for p in sorted(CHART.rglob("*"))
            if p.is_file() and "templates" not in p.relative_to(CHART).parts}


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
    """The rendered objects by kind; a second object of a kind is keyed ``kind/name``."""
    jsonschema.validate(vals, json.loads((CHART / "values.schema.json").read_text()))
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    out: dict[str, dict] = {}
    rendered = render_chart(chart_files(), copy.deepcopy(vals), release, chart, other_chart_files())
    for name, text in rendered.items():
        doc = yaml.safe_load(text)
        if doc is not None:
            assert doc["apiVersion"] and doc["metadata"]["name"], name
            key = doc["kind"] if doc["kind"] not in out else f"{doc['kind']}/{doc['metadata']['name']}"
            out[key] = doc
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
    for probe in ("startupProbe", "readinessProbe"):
        assert c[probe]["grpc"]["port"] == ports["health"] == 8081  # native gRPC probes
    # The web view ships on by default: its port, and liveness through its login page.
    assert ports["web"] == 8080
    assert c["livenessProbe"]["httpGet"] == {"path": "/login", "port": "web", "scheme": "HTTP"}
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
    assert cfg.web.enabled and cfg.web_bind == ("0.0.0.0", 8080)
    assert {"name": "web", "port": 8080, "targetPort": "web", "appProtocol": "http"} in svc["spec"]["ports"]
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
    # Probes keep using the plaintext health port while the main port needs mTLS (the kubelet has no
    # client certificate for the web view either).
    assert c["readinessProbe"]["grpc"]["port"] == c["livenessProbe"]["grpc"]["port"] == cfg.health_port
    assert cfg.web.enabled and cfg.web_bind == ("0.0.0.0", 8080)  # the web view has the token and mTLS too


def test_the_web_view_ships_with_its_port_probe_and_auth_and_can_be_turned_off(tmp_path):
    secured = render(values(auth={"enabled": True, "token": "t0k", "existingSecret": ""},
                            tls={"enabled": True, "mutual": False, "cert": "C", "key": "K", "clientCA": "",
                                 "existingSecret": ""},
                            web={"enabled": True, "port": 9000, "allowedHosts": ["twin.example.org"]}))
    (c,) = secured["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert {"name": "web", "containerPort": 9000} in c["ports"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/login", "port": "web", "scheme": "HTTPS"}
    ports = {p["name"]: p for p in secured["Service"]["spec"]["ports"]}
    assert ports["web"]["port"] == 9000 and ports["web"]["appProtocol"] == "https"
    cfg_file = tmp_path / "web.yaml"
    cfg_file.write_text(secured["ConfigMap"]["data"]["twin.yaml"])
    cfg = load_config(cfg_file, env={})
    assert cfg.web_bind == ("0.0.0.0", 9000) and cfg.web.allowed_hosts == ("twin.example.org",)
    assert cfg.auth.token_file and cfg.tls.enabled  # the web view serves with the main port's token and TLS

    off = render(values(web={"enabled": False, "port": 8080, "allowedHosts": []}))
    (c,) = off["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert "web" not in {p["name"] for p in c["ports"]} and c["livenessProbe"]["grpc"]["port"] == 8081
    assert "web" not in {p["name"] for p in off["Service"]["spec"]["ports"]}
    cfg_file.write_text(off["ConfigMap"]["data"]["twin.yaml"])
    assert not load_config(cfg_file, env={}).web.enabled
    for bad in (values(web={"enabled": True, "port": 0}), values(config__web={"enabled": True})):
        with pytest.raises(jsonschema.ValidationError):
            render(bad)


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
    assert re.search(r"^EXPOSE 50051 8080$", text, re.M)  # gRPC and the web view
    assert "TWIN_WEB_ENABLED" not in re.sub(r"#.*", "", text)  # the web view is on in the image
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
    assert "otlp-http" not in [p["name"] for p in off["Service"]["spec"]["ports"]]
    on = render(values(otlpHttpPort=4318))
    container = on["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "otlp-http", "containerPort": 4318} in container["ports"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TWIN_OTLP_HTTP_PORT"] == "4318"  # what twin serve reads (twin/server/server_config.py)
    ports = {p["name"]: p for p in on["Service"]["spec"]["ports"]}
    assert ports["otlp-http"]["port"] == 4318 and ports["otlp-http"]["targetPort"] == "otlp-http"
    with pytest.raises(jsonschema.ValidationError):
        render(values(otlpHttpPort=70000))


def test_image_is_pinned_and_carries_the_ray_of_the_kuberay_cluster():
    text = (DEPLOY / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", text, re.M)
    assert bases and all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", b) for b in bases), bases
    assert '"fabric-twin[server,telemetry,web,ray]"' in text and "-c /constraints.txt" in text
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
    deps = [*project["dependencies"], *extras["server"], *extras["telemetry"], *extras["web"], *extras["ray"]]
    from packaging.requirements import Requirement

    for dep in deps:
        req = Requirement(dep)
        name = req.name.lower()
        assert name in pins, f"{name} is not in deploy/constraints.txt"
        assert req.specifier.contains(pins[name]), f"deploy/constraints.txt pins {name}=={pins[name]}, outside {dep}"


# ------------------------------------------------------------------ /metrics and Grafana
GRAFANA = DEPLOY / "grafana"


def test_the_charts_dashboards_are_deploy_grafana_byte_for_byte():
    """Helm reads only files inside the chart, so dashboards/ is a copy of deploy/grafana/
    (the source, whose queries tests/telemetry/test_promexport.py checks). After editing one:
    cp deploy/grafana/*.json deploy/helm/fabric-twin/dashboards/"""
    source = {p.name: p.read_bytes() for p in GRAFANA.glob("*.json")}
    copies = {p.name: p.read_bytes() for p in (CHART / "dashboards").glob("*.json")}
    assert source and copies == source


def test_grafana_dashboards_are_off_by_default_and_a_sidecar_configmap_when_on():
    assert not [k for k, o in render(values()).items() if o["metadata"]["name"].endswith("-dashboards")]
    objs = render(values(grafana__dashboards__enabled=True), release="twin")
    cm = objs["ConfigMap/twin-fabric-twin-dashboards"]
    assert cm["kind"] == "ConfigMap" and cm["apiVersion"] == "v1"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label, a string
    assert cm["metadata"]["labels"]["app.kubernetes.io/instance"] == "twin"
    assert "annotations" not in cm["metadata"]
    assert set(cm["data"]) == {p.name for p in GRAFANA.glob("*.json")}
    for name, text in cm["data"].items():
        assert json.loads(text) == json.loads((GRAFANA / name).read_text())  # the dashboard itself
        assert text == (GRAFANA / name).read_text().rstrip("\n")
    custom = render(values(grafana={"dashboards": {"enabled": True, "label": "team-dashboards", "labelValue": "fabric",
                                                   "annotations": {"grafana_folder": "Fabric Twin"}}}))
    meta = custom["ConfigMap/fabric-twin-dashboards"]["metadata"]
    assert meta["labels"]["team-dashboards"] == "fabric" and "grafana_dashboard" not in meta["labels"]
    assert meta["annotations"] == {"grafana_folder": "Fabric Twin"}
    with pytest.raises(jsonschema.ValidationError):
        render(values(grafana={"dashboards": {"enabled": True, "label": ""}}))


def test_metrics_port_off_by_default_then_served_annotated_and_monitored(tmp_path):
    from twin.telemetry.telemetry_config import TelemetryConfig

    off = render(values())
    assert "ServiceMonitor" not in off and [p["name"] for p in off["Service"]["spec"]["ports"]] == ["grpc", "web"]
    assert "annotations" not in off["Deployment"]["spec"]["template"]["metadata"]
    cfg_file = tmp_path / "off.yaml"
    cfg_file.write_text(off["ConfigMap"]["data"]["twin.yaml"])
    assert TelemetryConfig.from_server_config(load_config(cfg_file, env={})).metrics_address is None

    scrape = [{"url": "http://node-1:9400/metrics", "job": "dcgm-exporter"}]
    on = render(values(metrics__port=9464, config__telemetry={"scrape": scrape}))
    pod = on["Deployment"]["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": "9464",
                                              "prometheus.io/path": "/metrics"}
    assert {"name": "metrics", "containerPort": 9464} in pod["spec"]["containers"][0]["ports"]
    ports = {p["name"]: p for p in on["Service"]["spec"]["ports"]}
    assert ports["metrics"]["port"] == 9464 and ports["metrics"]["targetPort"] == "metrics"
    cfg_file = tmp_path / "on.yaml"
    cfg_file.write_text(on["ConfigMap"]["data"]["twin.yaml"])
    telemetry = TelemetryConfig.from_server_config(load_config(cfg_file, env={}))
    assert telemetry.metrics_address == "0.0.0.0:9464"  # all interfaces, as in a container it must
    assert [t["url"] for t in telemetry.scrape] == [scrape[0]["url"]]  # the user's telemetry settings kept
    assert "ServiceMonitor" not in on  # needs the operator's CRD: asked for explicitly

    mon = render(values(metrics={"port": 9464, "podAnnotations": False,
                                 "serviceMonitor": {"enabled": True, "interval": "15s",
                                                    "labels": {"release": "kube-prometheus-stack"}}}))
    sm = mon["ServiceMonitor"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["selector"]["matchLabels"].items() <= mon["Service"]["metadata"]["labels"].items()
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "15s"}
    assert endpoint["port"] in {p["name"] for p in mon["Service"]["spec"]["ports"]}
    assert "annotations" not in mon["Deployment"]["spec"]["template"]["metadata"]
    # Under the main port's token and TLS the ServiceMonitor sends the token and speaks HTTPS.
    secured = render(values(metrics={"port": 9464, "podAnnotations": True,
                                     "serviceMonitor": {"enabled": True, "interval": "30s", "labels": {},
                                                        "tlsConfig": {"ca": {"secret": {"name": "ca",
                                                                                        "key": "ca.crt"}}}}},
                            auth={"enabled": True, "token": "t", "existingSecret": ""},
                            tls={"enabled": True, "mutual": False, "cert": "c", "key": "k", "clientCA": "",
                                 "existingSecret": ""}))
    (endpoint,) = secured["ServiceMonitor"]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"ca": {"secret": {"name": "ca",
                                                                                         "key": "ca.crt"}}}
    secret = secured["Secret"]["metadata"]["name"]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": secret, "key": "token"}}
    assert secured["Deployment"]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scheme"] == "https"
    for bad in (values(metrics={"port": 0, "serviceMonitor": {"enabled": True}}),  # nothing to monitor
                values(config__telemetry={"metrics_address": "0.0.0.0:1"}),  # metrics.port sets it
                values(metrics__serviceMonitor__interval="soon")):
        with pytest.raises(jsonschema.ValidationError):
            render(bad)


def _dockerfile_runtime() -> tuple[dict[str, str], list[str], list[str], str]:
    """(ENV, ENTRYPOINT argv, HEALTHCHECK argv, STOPSIGNAL) of the image's final stage."""
    text = (DEPLOY / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM "):]
    env: dict[str, str] = {}
    for block in re.findall(r"^ENV (.*?)(?<!\\)$", final, re.M | re.S):
        for key, value in re.findall(r"(\w+)=(\S+)", block.replace("\\\n", " ")):
            env[key] = value
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", final, re.M).group(1))
    health = json.loads(re.search(r"^HEALTHCHECK.*\n\s*CMD (\[.*\])$", final, re.M).group(1))
    stop = re.search(r"^STOPSIGNAL (\S+)$", final, re.M).group(1)
    return env, entry, health, stop


def test_the_image_entry_point_and_health_check_run_as_the_container_runs_them(tmp_path):
    """No container engine runs here, so the image's own ENTRYPOINT, ENV, HEALTHCHECK and
    STOPSIGNAL are run as processes (issue 13 item 6): only the host is 127.0.0.1 (tests stay
    on loopback; the image's 0.0.0.0 is checked as text), the port a free one and the state
    directory a scratch one."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    env_image, entry, health, stop = _dockerfile_runtime()
    assert env_image["TWIN_HOST"] == "0.0.0.0" and env_image["TWIN_PORT"] == "50051"
    assert entry == ["twin", "serve"] and health[:3] == ["python", "-m", "twin.server.healthcheck"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bindir = os.path.dirname(sys.executable)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), **env_image,
           "TWIN_HOST": "127.0.0.1", "TWIN_PORT": str(port), "TWIN_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen([os.path.join(bindir, entry[0]), *entry[1:]], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            check = subprocess.run([sys.executable, *health[1:]], env=env, capture_output=True, text=True,
                                   timeout=30, check=False)
            if check.returncode == 0 or time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(0.5)
        assert check.returncode == 0 and check.stdout.strip() == "SERVING", (check.stdout, check.stderr)
        proc.send_signal(getattr(signal, stop))
        assert proc.wait(30) == 0
        after = subprocess.run([sys.executable, *health[1:]], env=env, capture_output=True, text=True,
                               timeout=30, check=False)
        assert after.returncode == 1                      # the check fails once the server is gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
