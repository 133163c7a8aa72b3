"""The PCIe, TCP, torus and dragonfly fabrics behave as their sources say, and reject what they do not model."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml
from twin_plugins.dragonfly import DragonflyFabric
from twin_plugins.pcie import PCIeFabric, protocol_efficiency, root_complex_fraction
from twin_plugins.tcp import TCPFabric
from twin_plugins.torus import TorusFabric

from tests.conftest import EXAMPLES, ROOT
from twin.api import SpecError, read_param
from twin.plugins import BUILTIN
from twin.testing import assert_scale_out_fabric_conforms, assert_scale_up_fabric_conforms


def _scenario(scale_out: dict | None = None, scale_up: dict | None = None, num_gpus: int = 1024,
              **cluster: object) -> dict:
    c: dict = {"system": "DGX-H100", "num_gpus": num_gpus, **cluster}
    if scale_out is not None:
        c["scale_out"] = scale_out
    if scale_up is not None:
        c["scale_up"] = scale_up
    return {"cluster": c, "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 4, "vp": 5, "gbs": 1024, "mbs": 1}}


def _tiers(engine, data: dict) -> list:
    return list(engine.hierarchy(engine.scenario(data)).tiers)


def _field(engine, data: dict) -> str:
    with pytest.raises(SpecError) as info:
        engine.evaluate(data)
    return info.value.field


def _pcie_example() -> dict:
    return yaml.safe_load((EXAMPLES / "h100-pcie-tcp.yaml").read_text())


def _with(data: dict, section: str, **fields: object) -> dict:
    out = copy.deepcopy(data)
    out["cluster"][section] = {**out["cluster"][section], **fields}
    return out


def _with_params(data: dict, section: str, **params: object) -> dict:
    out = copy.deepcopy(data)
    sec = out["cluster"][section]
    sec["params"] = {**sec.get("params", {}), **params}
    return out


# ----------------------------------------------------------------------- catalog
def test_the_new_fabrics_are_builtin_and_listed(engine):
    kinds = engine.fabrics.kinds()
    assert "pcie" in kinds["scale_up"]
    assert {"tcp", "torus", "dragonfly"} <= set(kinds["scale_out"])
    infos = {i.name: i for i in engine.plugins()}
    for name in ("pcie", "tcp", "torus", "dragonfly"):
        assert name in BUILTIN and infos[name].builtin


def test_twin_plugins_lists_them():
    out = subprocess.run([sys.executable, "-m", "twin.cli", "plugins"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, check=True, env={"PATH": "/usr/bin:/bin", "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1",
                                                    "COLUMNS": "200"})
    for kind in ("pcie", "tcp", "torus", "dragonfly"):
        assert kind in out.stdout


@pytest.mark.parametrize("example", ["h100-pcie-tcp.yaml", "torus-3d.yaml", "dragonfly-slingshot.yaml"])
def test_the_examples_predict_and_fit(example):
    out = subprocess.run([sys.executable, "-m", "twin.cli", "predict", str(EXAMPLES / example), "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
                         env={"PATH": "/usr/bin:/bin", "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1"})
    est = json.loads(out.stdout)
    assert est["step_time_s"] > 0 and est["memory"]["fits"]


# ------------------------------------------------------------------------- PCIe
def test_pcie_generations_double_and_gen5_beats_gen4(engine):
    ex = _pcie_example()
    bw = {g: _tiers(engine, _with(ex, "scale_up", generation=g))[0].bw_Bps for g in (4, 5, 6)}
    assert bw[5] == pytest.approx(2 * bw[4])                         # 32 vs 16 GT/s, same encoding
    assert bw[5] / 1e9 == pytest.approx(63.0 * 0.85, rel=1e-3)      # Gen5 x16 at the 0.85 DMA share
    assert bw[6] > 2 * bw[5]                                         # 128 GB/s raw, FLIT mode slightly leaner
    step4 = engine.evaluate(_with(ex, "scale_up", generation=4)).step_time_s
    step5 = engine.evaluate(_with(ex, "scale_up", generation=5)).step_time_s
    assert step5 < step4


def test_pcie_efficiency_and_lanes(engine):
    assert protocol_efficiency(4) == pytest.approx(0.85)
    assert protocol_efficiency(6) == pytest.approx(236 / 256 * 256 / 272)
    ex = _pcie_example()
    x16 = _tiers(engine, ex)[0].bw_Bps
    x8 = _tiers(engine, _with_params(ex, "scale_up", lanes=8))[0].bw_Bps
    assert x8 == pytest.approx(x16 / 2)


def test_pcie_root_complex_is_slower_than_a_switch(engine):
    ex = _pcie_example()
    switch = engine.evaluate(ex)
    rc = engine.evaluate(_with_params(ex, "scale_up", p2p_path="root_complex"))
    assert rc.fabric["tiers"][0]["bw_GBps_per_gpu"] == pytest.approx(
        switch.fabric["tiers"][0]["bw_GBps_per_gpu"] * 28.0 / 53.7)    # nccl#1639: 8 GPUs through the CPUs
    assert rc.step_time_s > switch.step_time_s
    assert root_complex_fraction(1) == 1.0 > root_complex_fraction(2) > root_complex_fraction(4) \
        > root_complex_fraction(8) == root_complex_fraction(16)


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: _with_params(d, "scale_up", lanes=12), "cluster.scale_up.params.lanes"),
    (lambda d: _with_params(d, "scale_up", p2p_path="nvlink"), "cluster.scale_up.params.p2p_path"),
    (lambda d: _with_params(d, "scale_up", gpudirect_rdma=True), "cluster.scale_up.params.gpudirect_rdma"),
    (lambda d: _with(d, "scale_up", generation=7), "cluster.scale_up.generation"),
    (lambda d: _with(d, "scale_up", nvls=True), "cluster.scale_up.nvls"),
    (lambda d: _with(d, "scale_up", domain_gpus=4), "cluster.scale_up.domain_gpus"),
])
def test_pcie_rejects_what_it_does_not_model(engine, change, field):
    assert _field(engine, change(_pcie_example())) == field


def test_pcie_passes_the_conformance_kit():
    class Renamed(PCIeFabric):
        kind = "test-pcie"

    assert_scale_up_fabric_conforms(Renamed())


# -------------------------------------------------------------------------- TCP
def test_tcp_is_slower_than_roce_at_the_same_line_rate(engine):
    for data in (_scenario({"fabric": "roce"}), _with(_pcie_example(), "scale_out", fabric="roce", params={})):
        tcp = copy.deepcopy(data)
        tcp["cluster"]["scale_out"]["fabric"] = "tcp"
        roce_est, tcp_est = engine.evaluate(data), engine.evaluate(tcp)
        assert tcp_est.fabric["tiers"][1]["bw_GBps_per_gpu"] < roce_est.fabric["tiers"][1]["bw_GBps_per_gpu"]
        assert tcp_est.step_time_s > roce_est.step_time_s
        # Per-message latency of the socket stack (reported): several times a switch hop.
        assert tcp_est.fabric["tiers"][1]["latency_us"] > 10 * roce_est.fabric["tiers"][1]["latency_us"]


def test_tcp_socket_count_mtu_and_host_bounce(engine):
    def gbps(data: dict) -> float:   # one NIC per node of 8 GPUs: the leaf tier's per-GPU rate x 8, in Gb/s
        return _tiers(engine, data)[1].bw_Bps * 8 * 8 / 1e9

    # A host that copies fast enough: 2 channels x 1 socket x 16.5 Gb/s (NVIDIA/nccl#209) is the limit.
    base = _scenario({"fabric": "tcp", "nic_gbps": 100, "nics_per_node": 1, "topology": "fat_tree",
                      "params": {"host_copy_gbps": 1000}})
    assert gbps(base) == pytest.approx(2 * 16.5)
    tuned = _with_params(base, "scale_out", socket_threads=2, sockets_per_thread=4)
    assert gbps(tuned) == pytest.approx(100 * 1448 / 1538)             # 16 sockets: now the 1500-byte MTU
    assert gbps(_with_params(tuned, "scale_out", mtu=9000)) == pytest.approx(100 * 8948 / 9038)
    # 100 GbE (NVIDIA/nccl#450): defaults 33 Gb/s, tuned sockets stop at the host's 48.
    ex = _pcie_example()
    tuned = _tiers(engine, ex)[1].bw_Bps * 8 * 8 / 1e9
    default = _tiers(engine, _with(ex, "scale_out", params={"mtu": 9000}))[1].bw_Bps * 8 * 8 / 1e9
    assert default == pytest.approx(33.0) and tuned == pytest.approx(48.0)
    tcpx = _tiers(engine, _with_params(ex, "scale_out", gpudirect_tcpx=True))[1].bw_Bps * 8 * 8 / 1e9
    assert tcpx == pytest.approx(100 * 0.966)
    assert engine.evaluate(_with_params(ex, "scale_out", gpudirect_tcpx=True)).step_time_s < \
        engine.evaluate(ex).step_time_s


def test_tcp_ecmp_spreads_better_with_more_sockets(engine):
    base = _scenario({"fabric": "tcp", "params": {"host_copy_gbps": 1e5, "socket_gbps": 1e4}})
    one, many = (engine.evaluate(_with_params(base, "scale_out", sockets_per_thread=n)) for n in (1, 16))
    assert one.fabric["scale_out"]["ecmp_efficiency"] < many.fabric["scale_out"]["ecmp_efficiency"] < 1.0
    assert one.fabric["tiers"][2]["bw_GBps_per_gpu"] < one.fabric["tiers"][1]["bw_GBps_per_gpu"]


@pytest.mark.parametrize(("scale_out", "field"), [
    ({"fabric": "tcp", "sharp": True}, "cluster.scale_out.sharp"),
    ({"fabric": "tcp", "adaptive_routing": True}, "cluster.scale_out.adaptive_routing"),
    ({"fabric": "tcp", "params": {"socket_threads": 16, "sockets_per_thread": 8}},
     "cluster.scale_out.params.sockets_per_thread"),
    ({"fabric": "tcp", "params": {"socket_threads": 17}}, "cluster.scale_out.params.socket_threads"),
    ({"fabric": "tcp", "params": {"mtu": 100}}, "cluster.scale_out.params.mtu"),
    ({"fabric": "tcp", "params": {"gpudirect_tcpx": "yes"}}, "cluster.scale_out.params.gpudirect_tcpx"),
    ({"fabric": "tcp", "params": {"gpudirect_rdma": True}}, "cluster.scale_out.params.gpudirect_rdma"),
])
def test_tcp_rejects_what_it_does_not_model(engine, scale_out, field):
    assert _field(engine, _scenario(scale_out)) == field


def test_tcp_failure_inventory_is_the_fat_tree_with_hashed_flows(engine):
    from twin_plugins import tcp

    scn = engine.scenario(_scenario({"fabric": "tcp", "topology": "fat_tree"}))
    h = engine.hierarchy(scn)
    groups = {g.name: g for g in tcp.twin_components(scn, h, None)}
    assert {"nic", "link.nic-leaf", "switch.leaf", "switch.spine", "link.leaf-spine"} <= set(groups)
    link = groups["link.leaf-spine"]
    assert link.attrs["hashed_flows_per_uplink"] == 2.0 and not link.attrs["adaptive_routing"]
    (spine_cable,) = tcp.twin_failure_modes(link, scn, h, None)
    assert not spine_cable.interrupts and spine_cable.degraded.uplinks[0].hashed    # TCP rides the re-route
    (nic,) = (m for m in tcp.twin_failure_modes(groups["nic"], scn, h, None) if m.name == "down")
    assert nic.interrupts


# ------------------------------------------------------------------------ torus
def test_torus_dims_must_multiply_to_the_node_count(engine):
    with pytest.raises(SpecError) as info:
        engine.evaluate(_scenario({"fabric": "torus", "params": {"dims": "4x4x4"}}))
    assert info.value.field == "cluster.scale_out.params.dims"
    assert "128" in info.value.rule and "64" in info.value.rule
    assert _field(engine, _scenario({"fabric": "torus"})) == "cluster.scale_out.params.dims"
    assert _field(engine, _scenario({"fabric": "torus", "params": {"dims": "8x4xfour"}})) == \
        "cluster.scale_out.params.dims"


def test_torus_tiers_follow_the_dimensions(engine):
    tiers = _tiers(engine, _scenario({"fabric": "torus", "params": {"dims": "8x4x4"}}))
    assert [t.name for t in tiers[1:]] == ["torus-x", "torus-y", "torus-z"]
    assert [t.span_gpus for t in tiers[1:]] == [64, 256, 1024]
    # 8 ports / 6 directions: 1 link of 400G each way; both ring directions; 8 GPUs share a node.
    ring = 2 * 50e9 * 0.94 / 8
    assert [t.bw_Bps for t in tiers[1:]] == pytest.approx([ring, 2 * ring, 3 * ring])
    # All-to-all: bisection 8 L b / k across the largest dimension (k = 8), below the ring figure.
    assert tiers[3].a2a_bw_Bps == pytest.approx(8 * 50e9 * 0.94 / 8 / 8)
    assert all(t.oversubscription == 1.0 for t in tiers[1:])
    mesh = _tiers(engine, _scenario({"fabric": "torus", "params": {"dims": "8x4x4", "wraparound": False}}))
    assert [t.bw_Bps for t in mesh[1:]] == pytest.approx([t.bw_Bps / 2 for t in tiers[1:]])


def _torus_layout(dims: str) -> dict:
    data = yaml.safe_load((EXAMPLES / "torus-3d.yaml").read_text())
    data["cluster"]["scale_out"]["params"]["dims"] = dims
    return data


def test_a_group_over_several_torus_dimensions_runs_on_all_their_rings(engine):
    """Issue 36: a torus's rings over several dimensions run at once (its tiers are nested), so a
    group over two dimensions moves its bytes at both rings' rate, not one dimension's. The
    example's data-parallel groups are 8 consecutive nodes: inside the 16-node rows of 16x4 (one
    ring), across two 4-node rows of 4x16 and 4x4x4 (two rings)."""
    one_dim = engine.evaluate(_torus_layout("16x4")).comm_issued_s["dp"]
    two_dims = engine.evaluate(_torus_layout("4x16")).comm_issued_s["dp"]
    assert engine.hierarchy(engine.scenario(_torus_layout("4x16"))).tiers[2].nested
    assert 0.4 < two_dims / one_dim < 0.6  # twice the ring bandwidth, less the fixed latency
    assert engine.evaluate(_torus_layout("4x4x4")).comm_issued_s["dp"] == pytest.approx(two_dims, rel=1e-9)


def test_torus_layouts_cost_the_same_on_the_batch_path(engine):
    layouts = ["16x4", "4x16", "4x4x4", "64"]
    batch = engine.evaluate_many([_torus_layout(d) for d in layouts])
    for i, d in enumerate(layouts):
        assert batch.estimate(i).step_time_s == pytest.approx(engine.evaluate(_torus_layout(d)).step_time_s,
                                                              rel=1e-12)
    assert len({round(batch.estimate(i).step_time_s, 6) for i in range(len(layouts))}) == len(layouts)


def test_torus_example_and_ports(engine):
    data = yaml.safe_load((EXAMPLES / "torus-3d.yaml").read_text())
    est = engine.evaluate(data)
    assert est.fabric["scale_out"]["links_per_neighbor"] == 1 and est.fabric["scale_out"]["unused_ports_per_node"] == 0
    assert est.fabric["scale_out"]["links"] == 64 * 3
    few = _with(data, "scale_out", nics_per_node=4)
    assert _field(engine, few) == "cluster.scale_out.nics_per_node"
    assert engine.evaluate(_with(data, "scale_out", nic_gbps=800)).step_time_s < est.step_time_s


@pytest.mark.parametrize(("extra", "field"), [
    ({"tier_spans": [64, 256, 1024], "tiers": 3}, "cluster.scale_out.tiers"),
    ({"oversubscription": [2.0]}, "cluster.scale_out.oversubscription"),
    ({"sharp": True}, "cluster.scale_out.sharp"),
    ({"params": {"dims": "8x4x4", "radix": 8}}, "cluster.scale_out.params.radix"),
    ({"params": {"dims": "8x4x4", "wraparound": "sometimes"}}, "cluster.scale_out.params.wraparound"),
])
def test_torus_rejects_what_it_does_not_model(engine, extra, field):
    assert _field(engine, _scenario({"fabric": "torus", "params": {"dims": "8x4x4"}, **extra})) == field


def test_torus_link_failures_crash_then_run_with_a_ring_cut(engine):
    from twin_plugins import torus

    from twin.api import ComponentGroup

    scn = engine.scenario(_scenario({"fabric": "torus", "params": {"dims": "8x4x4"}}))
    h = engine.hierarchy(scn)
    groups = torus.twin_components(scn, h, None)
    assert [(g.name, g.count, g.tier) for g in groups] == [("link.torus-x", 128, 1), ("link.torus-y", 128, 2),
                                                           ("link.torus-z", 128, 3)]
    (mode,) = torus.twin_failure_modes(groups[1], scn, h, None)
    assert mode.interrupts and dict(mode.degraded.tier_bw) == {2: 0.75, 3: pytest.approx(5 / 6)}
    assert torus.twin_failure_modes(ComponentGroup("gpu", "gpu", 1), scn, h, None) is None


def test_torus_passes_the_conformance_kit():
    class Renamed(TorusFabric):
        kind = "test-torus"

    assert_scale_out_fabric_conforms(Renamed(), {"dims": "8x4x4"})


# -------------------------------------------------------------------- dragonfly
def test_dragonfly_valiant_halves_the_global_bandwidth(engine):
    data = yaml.safe_load((EXAMPLES / "dragonfly-slingshot.yaml").read_text())
    tiers = {r: _tiers(engine, _with_params(data, "scale_out", routing=r)) for r in ("minimal", "valiant", "ugal")}
    assert [t.name for t in tiers["minimal"][1:]] == ["router", "group", "global"]
    assert tiers["valiant"][3].bw_Bps == pytest.approx(tiers["minimal"][3].bw_Bps / 2)
    assert tiers["valiant"][2].bw_Bps == tiers["minimal"][2].bw_Bps      # inside a group: no intermediate group
    assert tiers["ugal"][3].bw_Bps == tiers["minimal"][3].bw_Bps          # benign traffic: UGAL routes minimally
    assert tiers["valiant"][3].latency_s > tiers["minimal"][3].latency_s


def test_dragonfly_shape_from_radix_and_tapers(engine):
    est = engine.evaluate(yaml.safe_load((EXAMPLES / "dragonfly-slingshot.yaml").read_text()))
    df = est.fabric["scale_out"]
    assert (df["nics_per_router"], df["routers_per_group"], df["global_links_per_router"]) == (16, 32, 16)
    assert df["groups"] == 2 and df["max_groups"] == 513
    tapered = _tiers(engine, _scenario({"fabric": "dragonfly", "switch_radix": 64,
                                        "params": {"nics_per_router": 32, "routers_per_group": 16,
                                                   "global_links_per_router": 8}}))
    assert tapered[2].oversubscription == pytest.approx(32 / 15)                # p / (a - 1)
    assert tapered[3].oversubscription == pytest.approx(32 / 15 * 32 / 8)       # and p / h above


@pytest.mark.parametrize(("scale_out", "field"), [
    ({"fabric": "dragonfly", "switch_radix": 16, "params": {"nics_per_router": 8, "routers_per_group": 8}},
     "cluster.scale_out.switch_radix"),
    ({"fabric": "dragonfly", "params": {"nics_per_router": 1, "routers_per_group": 2, "global_links_per_router": 1}},
     "cluster.scale_out.params.global_links_per_router"),
    ({"fabric": "dragonfly", "params": {"routing": "random"}}, "cluster.scale_out.params.routing"),
    ({"fabric": "dragonfly", "adaptive_routing": True}, "cluster.scale_out.adaptive_routing"),
    ({"fabric": "dragonfly", "params": {"global_taper": 2}}, "cluster.scale_out.params.global_taper"),
])
def test_dragonfly_rejects_what_it_does_not_model(engine, scale_out, field):
    assert _field(engine, _scenario(scale_out)) == field


def test_dragonfly_components_and_failures(engine):
    from twin_plugins import dragonfly

    scn = engine.scenario(_scenario({"fabric": "dragonfly", "switch_radix": 32}))
    h = engine.hierarchy(scn)
    groups = {g.name: g for g in dragonfly.twin_components(scn, h, None)}
    assert groups["switch.router"].count == 8 * 16 and groups["link.global"].count == 8 * 16 * 8 // 2
    (router,) = dragonfly.twin_failure_modes(groups["switch.router"], scn, h, None)
    assert router.interrupts and router.nodes_lost == 1
    (glob,) = dragonfly.twin_failure_modes(groups["link.global"], scn, h, None)
    assert not glob.interrupts and dict(glob.degraded.tier_bw) == {3: pytest.approx(127 / 128)}
    assert dragonfly.twin_failure_modes(groups["nic"], scn, h, None)[0].interrupts


def test_dragonfly_passes_the_conformance_kit():
    class Renamed(DragonflyFabric):
        kind = "test-dragonfly"

    assert_scale_out_fabric_conforms(Renamed())
    assert_scale_out_fabric_conforms(Renamed(), {"routing": "valiant", "nics_per_router": 8})


def test_tcp_passes_the_conformance_kit():
    class Renamed(TCPFabric):
        kind = "test-tcp"

    assert_scale_out_fabric_conforms(Renamed())


def test_the_example_plugin_no_longer_clashes_with_the_builtin_dragonfly(example_plugin):
    from twin_example_dragonfly.plugin import DragonflyFabric as Example

    assert Example.kind == "example-dragonfly" != DragonflyFabric.kind


# ---------------------------------------------------------------- API helpers
def test_read_param_checks_and_names_the_field():
    f = "cluster.scale_out.params.n"
    assert read_param({}, f, 3) == 3
    four = read_param({"n": 4.0}, f, 3, integer=True)
    assert four == 4 and isinstance(four, int)
    assert read_param({"n": 16.0}, f, 1, integer=True, choices=(1, 16)) == 16
    for bad, rule in (({"n": True}, {}), ({"n": 2.5}, {"integer": True}), ({"n": 0}, {"minimum": 1}),
                      ({"n": "x"}, {}), ({"n": True}, {"choices": (1, 2)}), ({"n": 3}, {"choices": (1, 2)})):
        with pytest.raises(SpecError) as info:
            read_param(bad, f, 1, **rule)
        assert info.value.field == f


def test_roce_refuses_knobs_it_does_not_model_naming_them():
    from twin.core.errors import SpecError
    from twin.engine import Engine

    engine = Engine(autoload=False)
    base = {"cluster": {"system": "Meta-RoCE-H100", "num_gpus": 1024}, "model": "llama3.1-8b",
            "plan": {"tp": 8, "gbs": 128}}
    for key in ("pfc", "ecn", "deep_buffer_spine"):
        bad = {**base, "cluster": {**base["cluster"], "scale_out": {"params": {key: True}}}}
        with pytest.raises(SpecError) as err:
            engine.evaluate(bad)
        assert err.value.field == f"cluster.scale_out.params.{key}" and "not modelled" in err.value.rule
    with pytest.raises(SpecError) as err:
        engine.evaluate({**base, "cluster": {**base["cluster"], "scale_out": {"sharp": True}}})
    assert err.value.field == "cluster.scale_out.sharp" and "InfiniBand" in err.value.rule


def _with_optics(data: dict, kind: str) -> dict:
    out = copy.deepcopy(data)
    out["cluster"]["optics"] = {"kind": kind}
    return out


def test_optics_price_the_links_a_torus_or_dragonfly_has(engine):
    """Not a fat tree's: every torus link, and a dragonfly's global links (its local and NIC
    cables are electrical, Kim et al. 2008); energy and transceivers follow that count."""
    from twin.failure_analyzer import FailureAnalyzer

    torus = yaml.safe_load((EXAMPLES / "torus-3d.yaml").read_text())
    dragonfly = yaml.safe_load((EXAMPLES / "dragonfly-slingshot.yaml").read_text())
    # 4,096 NICs: two groups even of the 144-port routers co-packaged optics bring.
    dragonfly["cluster"]["num_gpus"] = 4096
    for data, links_of in ((torus, lambda so: so["links"]), (dragonfly, lambda so: so["global_links"])):
        by_kind = {}
        for kind in ("pluggable", "cpo"):
            est = engine.evaluate(_with_optics(data, kind))
            optics, so = est.fabric["optics"], est.fabric["scale_out"]
            links = links_of(so)
            assert optics["links"] == links > 0 and "switches_per_tier" not in optics
            so_gbps = data["cluster"]["scale_out"].get("nic_gbps", 400)
            want_w = links * so_gbps * 1e9 * 2 * optics["pj_per_bit"] * 1e-12
            assert est.energy.optics_j == pytest.approx(want_w * est.step_time_s)
            by_kind[kind] = est.energy.optics_j
            inv = FailureAnalyzer(engine).inventory(engine.scenario(_with_optics(data, kind)))
            parts = {g.name: g.count for g in inv.groups}
            assert parts["transceiver" if kind == "pluggable" else "optical_engine"] == 2 * links
            optical_modes = {m.component for m in inv.modes if m.name == "optics"}
            if data is dragonfly:  # the inventory is the dragonfly the estimate has (routers of the forced radix)
                assert optical_modes == {"link.global"} and parts["link.global"] == links
        assert by_kind["cpo"] < by_kind["pluggable"]


def test_one_dragonfly_group_has_no_global_links(engine):
    data = yaml.safe_load((EXAMPLES / "dragonfly-slingshot.yaml").read_text())
    data["cluster"]["num_gpus"] = 64  # 64 NICs: one group
    est = engine.evaluate(_with_optics(data, "pluggable"))
    assert est.fabric["scale_out"]["groups"] == 1
    assert est.fabric["scale_out"]["global_links"] == est.fabric["optics"]["links"] == 0


# ------------------------------------------------- scale_out fields every fabric reads
@pytest.mark.parametrize("scale_out", [
    {"fabric": "infiniband"}, {"fabric": "roce"}, {"fabric": "ethernet"}, {"fabric": "efa"}, {"fabric": "tcp"},
    {"fabric": "dragonfly"}, "torus"])
def test_a_stated_hop_latency_reaches_every_scale_out_tier(engine, scale_out):
    """``scale_out.latency_us`` (one hop's latency) replaces each fabric's own hop figure in every
    scale-out tier, as many times as the tier's hops; it was accepted and ignored."""
    if scale_out == "torus":
        base = yaml.safe_load((EXAMPLES / "torus-3d.yaml").read_text())
    else:
        base = _scenario(scale_out, num_gpus=4096)
    slow = _with(base, "scale_out", latency_us=500.0)
    own, stated = _tiers(engine, base)[1:], _tiers(engine, slow)[1:]
    assert own and len(own) == len(stated)
    for a, b in zip(own, stated, strict=True):
        assert b.latency_s > a.latency_s
        assert b.latency_s >= 500e-6 - 1e-12  # at least one hop of it (EFA keeps its floor, TCP adds its stack)
    # and a latency-bound collective across the network pays it
    assert engine.evaluate(slow).step_time_s > engine.evaluate(base).step_time_s


def test_a_stated_leaf_below_the_cluster_puts_a_spine_above_it(engine):
    """``scale_out.gpus_per_leaf`` below the cluster needs a tier above the leaf, whatever the
    radix: a 16-GPU leaf on 256 GPUs was one 256-GPU leaf (the stated span ignored)."""
    base = _scenario({"fabric": "infiniband"}, num_gpus=256)
    assert [t.span_gpus for t in _tiers(engine, base)[1:]] == [256]
    for leaf in (16, 128):
        tiers = _tiers(engine, _with(base, "scale_out", gpus_per_leaf=leaf))[1:]
        assert [t.span_gpus for t in tiers] == [leaf, 256]
        assert tiers[1].latency_s > tiers[0].latency_s  # the spine is hops further
    # a taper on that spine now costs what it should: DP traffic crosses it
    leafy = _with(base, "scale_out", gpus_per_leaf=16)
    tapered = _with(leafy, "scale_out", oversubscription=[4.0])
    assert engine.evaluate(tapered).step_time_s > engine.evaluate(leafy).step_time_s
    assert _tiers(engine, _with(base, "scale_out", tier_spans=[32]))[1].span_gpus == 32
