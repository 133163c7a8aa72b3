"""Config layering, wire <-> file-format conversion, and the .proto conventions."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from google.protobuf import descriptor_pb2

from tests.conftest import EXAMPLES, ROOT
from twin.core.errors import SpecError, TooLargeError
from twin.core.scenario_io import read_mapping
from twin.rpc.v1 import scenario_pb2
from twin.server.server_config import load_config
from twin.wire.convert import Limits, scenario_from_mapping, scenario_to_mapping


# ------------------------------------------------------------------------- config
def test_defaults_file_env_flags_in_that_order(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"port": 6000, "workers": 3, "limits": {"max_sweep_points": 10},
                                   "tls": {"cert_file": "a.pem", "key_file": "a.key"}}))
    c = load_config(cfg, env={"TWIN_WORKERS": "5", "TWIN_LIMITS_MAX_SWEEP_POINTS": "20", "TWIN_STATE_DIR": "/x"},
                    overrides={"port": 7000, "host": None})
    assert (c.port, c.workers, c.limits.max_sweep_points, c.state_dir) == (7000, 5, 20, "/x")
    assert c.host == "127.0.0.1"  # all interfaces only when asked for
    assert c.tls.enabled and not c.tls.mutual and c.limits.max_message_bytes == 64 * 1024 * 1024
    assert load_config(None, env={}).state_dir == "state" and load_config(None, env={}).port == 50051


@pytest.mark.parametrize(("text", "env", "field"), [
    ("prot: 1\n", {}, "config.prot"),
    ("limits: {max_sweep_points: 0}\n", {}, "config.limits.max_sweep_points"),
    ("", {"TWIN_PORT": "eighty"}, "TWIN_PORT"),
    ("", {"TWIN_OTEL_ENABLED": "maybe"}, "TWIN_OTEL_ENABLED"),
    ("tls: {client_ca_file: ca.pem}\n", {}, "config.tls.client_ca_file"),
    ("tls: {cert_file: a.pem}\n", {}, "config.tls"),
    ("port: 70000\n", {}, "config.port"),
])
def test_config_errors_name_the_key(tmp_path, text, env, field):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(SpecError) as info:
        load_config(cfg, env=env)
    assert info.value.field == field


def test_serve_reports_bad_config_without_traceback(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workers: -1\n")
    out = subprocess.run([sys.executable, "-m", "twin.cli", "serve", "--config", str(cfg)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT, check=False, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and "config.workers" in out.stderr and "Traceback" not in out.stderr


# ------------------------------------------------------------------------ convert
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_examples_round_trip(example):
    data = read_mapping(EXAMPLES / example)
    back = scenario_to_mapping(scenario_from_mapping(data))
    want = {k: v for k, v in data.items() if k != "model"}
    assert {k: v for k, v in back.items() if k != "model"} == want
    assert back["model"] == ({"preset": data["model"]} if isinstance(data["model"], str) else data["model"])


@pytest.mark.parametrize(("data", "field"), [
    ({"cluster": {"system": "DGX-H100", "num_gpus": "many"}}, "cluster.num_gpus"),
    ({"cluster": {"gpu": {"hbm_tbytes_per_s": 3.0}}}, "cluster.gpu.hbm_tbytes_per_s"),  # wire spelling: not a file key
    ({"plan": {"precision": "fp7"}}, "plan.precision"),
    ({"plan": {"tp": 2**70}}, "plan.tp"),
    ({"plan": {"tp": True}}, "plan.tp"),
    ({"cluster": {"scale_out": {"oversubscription": [1, "x"]}}}, "cluster.scale_out.oversubscription[1]"),
    ({"clusterr": {}}, "clusterr"),
])
def test_mapping_to_message_errors_name_the_field(data, field):
    with pytest.raises(SpecError) as info:
        scenario_from_mapping(data)
    assert info.value.field == field


def test_scale_out_none_and_limits():
    msg = scenario_from_mapping({"cluster": {"system": "DGX-H100", "num_gpus": 8, "scale_out": None}})
    assert msg.cluster.scale_out_disabled and scenario_to_mapping(msg)["cluster"]["scale_out"] is None
    msg = scenario_pb2.Scenario()
    msg.cluster.scale_out.tier_spans_gpus.extend(range(1, 20))
    with pytest.raises(TooLargeError) as info:
        scenario_to_mapping(msg, Limits(max_items=10))
    assert info.value.field == "cluster.scale_out.tier_spans"


# ------------------------------------------------------------------ proto conventions
def _descriptor_set(tmp_path) -> descriptor_pb2.FileDescriptorSet:
    from importlib import resources

    from grpc_tools import protoc

    out = tmp_path / "set.pb"
    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    wk = str(resources.files("grpc_tools") / "_proto")
    assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"-I{wk}", "--include_source_info",
                        f"--descriptor_set_out={out}", *protos]) == 0
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def test_every_proto_element_is_commented_and_enums_start_unspecified(tmp_path):
    missing: list[str] = []
    files = _descriptor_set(tmp_path).file
    # The remote-write messages (twin/rpc/prompb) follow Prometheus' specification and the Chakra
    # execution-trace schema (twin/rpc/chakra) is mlcommons/chakra's, field numbers and all: not
    # the conventions of the twin's own API checked below.
    assert {f.name for f in files if f.package == "twin.rpc.prompb"} == {"twin/rpc/prompb/remote.proto",
                                                                         "twin/rpc/prompb/types.proto"}
    assert {f.name for f in files if f.package == "twin.rpc.chakra"} == {"twin/rpc/chakra/et_def.proto"}
    for f in files:
        if f.package in ("twin.rpc.prompb", "twin.rpc.chakra"):
            continue
        assert f.package == "twin.rpc.v1" and f.name.startswith("twin/rpc/v1/")
        comments = {tuple(loc.path): loc.leading_comments.strip() for loc in f.source_code_info.location}

        def need(path: tuple[int, ...], what: str, comments=comments, name=f.name) -> None:
            if not comments.get(path):
                missing.append(f"{name}: {what}")

        def walk_message(m, path):
            need(path, m.name)
            for i, field in enumerate(m.field):
                need((*path, 2, i), f"{m.name}.{field.name}")
            for i, nested in enumerate(m.nested_type):
                if not nested.options.map_entry:
                    walk_message(nested, (*path, 3, i))
            for i, e in enumerate(m.enum_type):
                walk_enum(e, (*path, 4, i))

        def walk_enum(e, path):
            need(path, e.name)
            assert e.value[0].number == 0 and e.value[0].name.endswith("_UNSPECIFIED"), e.name
            for i, v in enumerate(e.value):
                need((*path, 2, i), f"{e.name}.{v.name}")

        for i, m in enumerate(f.message_type):
            walk_message(m, (4, i))
        for i, e in enumerate(f.enum_type):
            walk_enum(e, (5, i))
        for i, svc in enumerate(f.service):
            need((6, i), svc.name)
            for j, method in enumerate(svc.method):
                need((6, i, 2, j), f"{svc.name}.{method.name}")
    assert not missing, missing


def test_generated_modules_are_not_in_git():
    tracked = subprocess.run(["git", "ls-files", "twin/rpc"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked and all(p.endswith("__init__.py") for p in tracked), tracked
    assert (ROOT / "twin" / "rpc" / "v1" / "twin_service_pb2.py").exists()  # generated by the build
