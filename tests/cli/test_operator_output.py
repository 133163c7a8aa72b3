"""What operators read (issue 34, item 5): human units, tables whose headers are never cut at 80
columns, fault notes that read as the fabric is built, the sweeps page's reasons and the Pareto series.
"""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from tests.conftest import EXAMPLES
from twin.commands import cmd_render
from twin.commands.cmd_failures import render as render_failures
from twin.commands.cmd_plan import _memory_text
from twin.commands.cmd_sweep import top_table
from twin.core.errors import InfeasibleError, SpecError
from twin.core.failures.failure_spec import parse_injection
from twin.core.health import assess
from twin.core.telemetry_vocab import Evidence, MetricMapping
from twin.core.units import human, plain, signal_unit
from twin.engine import Engine
from twin.failure_analyzer import FailureAnalyzer
from twin.sweep.plansearch import memory_risk
from twin.web.sweep_pages import row_error
from twin.web.views import plots


@pytest.mark.parametrize(("value", "unit", "text"), [
    (2.5e10, "B/s", "25 GB/s"), (4.0e8, "B/s", "400 MB/s"), (999.96e6, "B/s", "1 GB/s"), (400.0, "Gb/s", "400 Gb/s"),
    (0.0421, "s", "42.1 ms"), (6.88, "s", "6.88 s"), (1.41e9, "Hz", "1.41 GHz"), (3.0, "1/s", "3/s"),
    (1e7, "", "10,000,000"), (7.06e-08, "", "0.0000000706"), (0.0, "B/s", "0 B/s")])
def test_human_units_never_print_an_exponent(value, unit, text):
    assert human(value, unit) == text
    assert "e+" not in text and "e-" not in text


def test_evidence_reads_in_units_from_the_signal_name():
    assert signal_unit("rx_Bps") == "B/s" and signal_unit("sm_clock_hz") == "Hz" and signal_unit("x") == ""
    ev = Evidence("rate_Bps", 2.5e10, "< peak 50 GB/s", "degraded", "half", "m")
    assert ev.text().startswith("rate_Bps=25 GB/s ")
    m = MetricMapping(("ib_rate",), "ib_port", "rate_Bps", identity=("device",), tier="scale_out", unit="B/s",
                      capacity="ratio_to_peak")
    health = assess({"rate_Bps": 2.5e10}, {"rate_Bps": m}, {"rate_Bps": 5e10})
    (e,) = health.evidence
    assert e.rule == "< peak 50 GB/s" and "50%" in e.why and "e+" not in e.text(), e.text()


def _render(table) -> str:
    con = Console(width=80, record=True, highlight=False, color_system=None)
    con.print(table)
    return con.export_text()


def _headers_whole(text: str, headers: list[str]) -> None:
    assert "…" not in text, text
    for h in headers:
        for word in h.split():
            assert re.search(rf"(?<![\w/]){re.escape(word)}(?![\w/])", text), (word, text)
    assert max(len(line) for line in text.splitlines()) <= 80, text


def test_criticality_table_headers_are_whole_at_80_columns(monkeypatch):
    rep = FailureAnalyzer(Engine(autoload=False)).analyze(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml", rank=True)
    con = Console(width=80, record=True, highlight=False, color_system=None)
    monkeypatch.setattr("twin.commands.cmd_failures.console", lambda: con)
    render_failures(rep)
    text = con.export_text()
    _headers_whole(text, ["component", "count", "events per day", "cost per event", "cost per day", "share", "outcome",
                          "slowdown"])
    assert "e-0" not in text and "e+0" not in text, text


def test_sweep_top_table_headers_are_whole_at_80_columns():
    rows = {"point_id": [0, 1], "step_time_s": [6.881, 7.2], "tp": [8, 4], "pp": [8, 8], "dp": [16, 32], "mbs": [1, 1],
            "recompute": ["selective", "full"], "fabric": ["infiniband", "roce"],
            "tokens_per_s_per_gpu": [1234.5, 1100.0], "mfu": [0.4512, 0.41], "memory_gib": [71.2, 60.0]}
    t = top_table(rows, "step_time_s", "Best 2 by step_time_s (min)")
    text = _render(t)
    _headers_whole(text, [str(c.header) for c in t.columns])
    assert "45.1%" in text and "41.0%" in text and "e+" not in text  # MFU as a share of peak


def test_the_console_takes_an_80_column_terminal_as_it_is(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    assert cmd_render.console().width == 80


def test_one_spine_down_reads_as_one_of_its_rails_spines():
    rep = FailureAnalyzer(Engine(autoload=False)).analyze(
        EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml", inject=[parse_injection("switch_down:tier=spine", 0)])
    (inj,) = rep.injections
    detail = " ".join(o["detail"] for o in inj["options"])
    # 16 spines in all, 2 per rail (a tree per rail): one down halves its rail's leaves' uplinks.
    assert "one spine down of the 2 in its rail's tree" in detail, detail
    assert "loses 16 of its 32 uplinks (50% of its up-capacity left)" in detail, detail


def test_a_plan_near_hbm_shows_its_risk():
    def text(total: float) -> str:
        memory = {"total_gib": total, "capacity_gib": 80.0}
        return _memory_text({"estimate": {"memory": memory}, "memory_risk": memory_risk(memory)})

    assert "TIGHT" not in text(60.0) and "75% of HBM" in text(60.0)
    assert text(78.0).startswith("78.0 GiB (98% of HBM, 2.0 GiB free); TIGHT"), text(78.0)


def test_a_row_names_its_field_once():
    assert row_error(InfeasibleError("memory", "does not fit in HBM")) == "memory: does not fit in HBM"
    assert row_error(SpecError("plan.tp", "must divide num_gpus (3)")) == "plan.tp: must divide num_gpus (3)"
    assert row_error(None) == ""


def test_the_pareto_plot_tells_fabrics_apart():
    rows = [{"point_id": i, "feasible": True, "axis:cluster.fabric": f, "axis:plan.tp": tp,
             "tokens_per_s": 1000.0 * (i + 1), "power_kw": 100.0 + i, "step_time_s": 1.0 / (i + 1)}
            for i, (f, tp) in enumerate([("infiniband", 2), ("roce", 2), ("infiniband", 4), ("roce", 4)])]
    p = plots(rows)["pareto"]
    assert p["group"] == "axis:cluster.fabric"
    assert {pt[3] for pt in p["points"]} == {"infiniband", "roce"}
    numeric_only = [{k: v for k, v in r.items() if k != "axis:cluster.fabric"} for r in rows]
    assert plots(numeric_only)["pareto"]["group"] is None  # a numeric axis is the x of its own plot


def test_a_rule_reads_without_exponent():
    from twin.core.telemetry_vocab import Condition

    assert Condition("degraded", ">", 10 / 3600, "x").describe() == "> 0.00278"  # ten an hour, per second
    assert Condition("down", "not_in", (4.0, 5.0), "x").describe() == "not_in {4, 5}"
    assert Condition("degraded", ">", 1e9, "x").describe() == "> 1,000,000,000"


def test_plain_keeps_digits_without_exponent():
    assert plain(12345.6) == "12,346" and plain(0.5) == "0.5"


def test_strategy_details_read_in_their_units():
    from twin.commands.cmd_predict import _detail

    assert _detail("kv_block_bytes", 8388608.0) == "8.389 MB"
    assert _detail("param_gather_exposed_s", 9.925e-05) == "99.25 µs"
    assert _detail("chunks", 3.0) == "3" and _detail("comm_type", "p2p") == "p2p"
