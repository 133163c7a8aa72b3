"""The Fabric page's data: aggregation by tier and group, banding, live placement, the view query, config."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES
from twin.core.errors import SpecError
from twin.server.server_config import load_config
from twin.web import fabric_picture


@pytest.fixture(scope="module")
def layout16k(engine):
    scn = engine.scenario(str(EXAMPLES / "llama3-405b-16k-roce.yaml"))
    est = engine.evaluate(scn)
    c = scn.cluster
    return fabric_picture.layout_of(scn.name, c.num_gpus, c.gpus_per_node, c.nics_per_node, est.to_dict()["fabric"])


def comp(cid, host, kind, state, **labels):
    return {"id": cid, "host": host, "kind": kind, "state": state, "labels": labels, "capacity": 1.0}


def test_hosts_go_on_nodes_in_natural_order_and_extra_hosts_are_unplaced():
    comps = [comp("node-10/gpu:0", "node-10", "gpu", "up", gpu="0"),
             comp("node-2/ib_port:mlx5_5/1", "node-2", "ib_port", "down", device="mlx5_5", port="1"),
             comp("node-1/gpu:0", "node-1", "gpu", "up", gpu="0"),
             comp("job:x", "", "job", "up")]
    placed = fabric_picture.place(comps, nodes=2)
    assert placed.hosts == {0: "node-1", 1: "node-2"}
    assert [c["id"] for c in placed.unplaced] == ["node-10/gpu:0"]
    assert placed.node_state(1) == "down" and placed.link_state(1, rail=5) == "down"
    assert placed.link_state(1, rail=4) == "nodata" and placed.node_state(0) == "up"


def test_a_16k_cluster_is_drawn_in_bounded_views(layout16k):
    top = fabric_picture.view(layout16k, fabric_picture.Placement(), fabric_picture.parse_at("", layout16k))
    boxes = [e for e in top["elements"] if e["data"].get("kind") == "group"]
    assert len(boxes) == layout16k.groups(1) and top["up"] is None  # the pods under the core
    pod = fabric_picture.view(layout16k, fabric_picture.Placement(),
                              fabric_picture.parse_at(boxes[0]["data"]["at"], layout16k))
    pod_boxes = [e for e in pod["elements"] if e["data"].get("kind") == "group"]
    assert pod["items"] > fabric_picture.MAX_BOXES >= len(pod_boxes)  # banded
    assert pod["band"] == -(-pod["items"] // fabric_picture.MAX_BOXES)
    assert pod["up"] == top["at"]


def test_states_roll_up_worst_first_and_an_uplink_takes_its_links_state(layout16k):
    comps = [comp("h1/gpu:0", "h1", "gpu", "degraded", gpu="0"),
             comp("h2/transceiver:mlx5_1", "h2", "transceiver", "down", device="mlx5_1")]
    placed = fabric_picture.place(comps, layout16k.nodes)
    leaf = fabric_picture.view(layout16k, placed, fabric_picture.parse_at("node:0:2", layout16k))
    by_id = {e["data"]["id"]: e["data"] for e in leaf["elements"]}
    assert by_id["box:node:0:1"]["state"] == "degraded" and by_id["edge:box:node:0:1"]["state"] == "nodata"
    assert by_id["box:node:1:2"]["state"] == "down" and by_id["edge:box:node:1:2"]["state"] == "down"
    node = fabric_picture.view(layout16k, placed, fabric_picture.parse_at("node:1", layout16k))
    rails = {e["data"]["id"]: e["data"]["state"] for e in node["elements"] if e["data"]["id"].startswith("rail:")}
    assert rails["rail:1"] == "down" and {s for r, s in rails.items() if r != "rail:1"} == {"nodata"}
    assert len(rails) == layout16k.nics_per_node


@pytest.mark.parametrize("at", ["bogus", "tier:9:0:1", "node:5:2", "node:999999", "tier:0:x:1"])
def test_a_bad_view_is_an_error_naming_at(layout16k, at):
    with pytest.raises(SpecError) as err:
        fabric_picture.parse_at(at, layout16k)
    assert err.value.field == "at"


def test_web_config_defaults_and_errors():
    assert load_config(env={}).web_bind == ("127.0.0.1", 8080)
    assert load_config(env={}, overrides={"port": 0}).web_bind == ("127.0.0.1", 0)
    assert load_config(env={"TWIN_WEB_ADDRESS": "127.0.0.1:9000"}).web_bind == ("127.0.0.1", 9000)
    assert not load_config(env={"TWIN_WEB_ENABLED": "0"}).web.enabled
    with pytest.raises(SpecError) as err:
        _ = load_config(env={"TWIN_WEB_ADDRESS": "nowhere"}).web_bind
    assert err.value.field == "config.web.address"
    with pytest.raises(SpecError) as err:
        load_config(env={"TWIN_WEB_ADDRESS": "127.0.0.1:50051"})
    assert err.value.field == "config.web.address"


def test_a_taken_default_port_moves_the_view_and_a_taken_address_is_an_error(monkeypatch, caplog):
    """The default port (8080) may belong to something else on the machine: the view moves to
    a free port rather than keep the twin from serving; an address asked for is never moved."""
    import socket

    from twin.server import server_config
    from twin.web.server import listen

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        monkeypatch.setattr(server_config, "WEB_PORT", port)
        with caplog.at_level("WARNING", logger="twin.web"):
            sock = listen(load_config(env={}))
        try:
            assert sock.getsockname()[1] not in (port, 0)
            assert f"port {port} of 127.0.0.1 is taken" in caplog.text
        finally:
            sock.close()
        with pytest.raises(SpecError) as err:
            listen(load_config(env={"TWIN_WEB_ADDRESS": f"127.0.0.1:{port}"}))
        assert err.value.field == "config.web.address" and "cannot listen" in str(err.value)
    finally:
        taken.close()
