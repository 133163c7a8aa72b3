"""``twin predict SCENARIO.yaml [--server HOST:PORT]``: step time, breakdown, memory, MFU, energy and cost of
one scenario.
"""

from __future__ import annotations

import argparse

from twin.commands.cmd_remote import add_client_args, client_from_args
from twin.commands.cmd_render import console, print_json, table
from twin.core.estimate import Estimate
from twin.core.units import human, signal_unit
from twin.engine import Engine


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``predict`` verb."""
    p = sub.add_parser("predict", help="predict one training step of a scenario file",
                       description="Predict step time (with its breakdown), memory per GPU, MFU, and the step's "
                                   "energy by component (and its cost, given prices).")
    p.add_argument("scenario", help="scenario file (YAML or JSON)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    add_client_args(p)
    p.set_defaults(func=run)


def render(est: Estimate) -> None:
    """Human-readable tables of an estimate."""
    out = console()
    bd = est.breakdown
    t = table(f"Step of {est.scenario or 'scenario'}: {est.step_time_s:.3f} s", "part", "seconds", "share")
    rows = [("compute (fwd+bwd)", bd.compute_s), ("recompute", bd.recompute_s)]
    rows += [(f"exposed comm: {k}", v) for k, v in sorted(bd.exposed_comm_s.items())]
    rows += [("pipeline bubble", bd.bubble_s), ("optimizer step", bd.optimizer_s), ("offload", bd.offload_s),
             ("overlap interference", bd.overlap_interference_s)]
    for name, value in rows:
        if value > 0 or name.startswith("compute"):
            t.add_row(name, f"{value:.4f}", f"{100 * value / est.step_time_s:.1f}%")
    out.print(t)
    render_interval(est)
    m = est.memory.as_gib()
    out.print(f"Memory per GPU: {m['total_gib']:.1f} of {m['capacity_gib']:.0f} GiB -> "
              f"{'fits' if est.fits else 'DOES NOT FIT'}")
    mt = table("", "category", "GiB")
    pool_gib = m["offloaded_gib"] - m["offloaded_host_gib"]
    for key, gib in (*((k, m[k]) for k in ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib",
                                            "logits_gib", "runtime_gib")),
                     ("offloaded to host DRAM", m["offloaded_host_gib"]), ("offloaded to the CXL pool", pool_gib)):
        if gib > 0:
            mt.add_row(key.removesuffix("_gib"), f"{gib:.2f}")
    out.print(mt)
    st = table("Throughput", "metric", "value")
    st.add_row("tokens/s", f"{est.tokens_per_s:,.0f}")
    st.add_row("tokens/s per GPU", f"{est.tokens_per_s_per_gpu:,.0f}")
    st.add_row("model TFLOP/s per GPU", f"{est.model_tflops_per_gpu:.1f}")
    st.add_row("MFU (16-bit peak)", f"{100 * est.mfu:.1f}%")
    st.add_row("micro-batches per step", str(est.microbatches))
    out.print(st)
    render_strategies(est)
    render_energy(est)
    render_links(est)
    for note in est.notes:
        out.print(f"note: {note}")


def render_interval(est: Estimate) -> None:
    """Where the real step is likely to land (``twin.core.intervals``), and on what evidence."""
    iv = est.interval
    if iv is None:
        return
    widened = f"; widened: {', '.join(iv.widened)} outside what those runs cover" if iv.widened else ""
    console().print(f"Likely range: 80% {iv.p80_low_s:.3f}-{iv.p80_high_s:.3f} s, "
                    f"95% {iv.p95_low_s:.3f}-{iv.p95_high_s:.3f} s "
                    f"(held-out errors of {iv.runs} runs, {iv.families} families: {iv.basis}{widened})")


def render_strategies(est: Estimate) -> None:
    """Per parallel dimension: the collective algorithm and what its strategy reports."""
    dims = sorted(set(est.algorithms) | set(est.details))
    if not dims:
        return
    t = table("Strategies", "dimension", "algorithm", "details")
    for dim in dims:
        t.add_row(dim, est.algorithms.get(dim, "-"),
                  ", ".join(f"{k}={_detail(k, v)}" for k, v in est.details.get(dim, {}).items()) or "-")
    console().print(t)


def _detail(key: str, value: object) -> str:
    """A strategy's detail in the unit its name carries (``_s`` in ms/µs, ``_bytes`` in MB), never an exponent."""
    if isinstance(value, float):
        if key.endswith("_bytes"):
            return human(value, "B", 4)
        return human(value, signal_unit(key), 4)
    return str(value)


_COMPONENT_NAMES = {"gpu": "GPUs", "nic": "NICs", "switch": "switches", "optics": "optics", "host": "hosts",
                    "cxl": "CXL devices", "facility": "facility overhead (PUE)"}


def render_energy(est: Estimate) -> None:
    """Energy of the step by component, per token, and its cost when the scenario gives prices."""
    e = est.energy
    if e is None:
        return
    out = console()
    et = table(f"Energy per step: {e.total_j / 1e6:,.3f} MJ", "component", "kJ", "share")
    for key, value in e.parts_j.items():
        name = _COMPONENT_NAMES[key]
        if key == "gpu":
            name += f" (busy {e.gpu_busy_s:.3f} s, waiting {e.gpu_wait_s:.3f} s)"
        if value > 0 or key == "gpu":
            et.add_row(name, f"{value / 1e3:,.1f}", f"{100 * value / e.total_j:.1f}%" if e.total_j else "-")
    out.print(et)
    out.print(f"{e.joules_per_token:.3f} J per token, {e.tokens_per_joule:.3f} tokens per J, "
              f"{e.average_power_w / 1e3:,.1f} kW average, PUE {e.pue:g}")
    for what in e.not_counted:
        out.print(f"not counted: {what}")
    for what in e.assumed:
        out.print(f"assumed: {what}")
    c = est.cost
    if c is not None:
        out.print(f"Cost: ${c.usd_per_step:,.2f} per step, ${c.usd_per_million_tokens:,.4f} per million tokens "
                  f"(hardware ${c.hardware_usd:,.2f}, electricity ${c.electricity_usd:,.2f})")
    else:
        out.print("Cost: not reported (no cluster.prices given)")


def render_links(est: Estimate) -> None:
    """The links the step's traffic uses: capacity, who keeps them busy, who is slowed."""
    if not est.links:
        return
    lt = table(f"Links per GPU (contention costs {est.contention_s:.4f} s of the step)",
               "links", "GB/s", "busy (alone, per strategy)", "slowed by sharing")
    for link in est.links:
        busy = ", ".join(f"{k} {100 * v:.0f}%" for k, v in sorted(link.utilisation.items()))
        slowed = ", ".join(f"{k} x{v:.3f}" for k, v in sorted(link.stretch.items()) if v > 1.0005) or "-"
        lt.add_row(link.name, f"{link.capacity_GBps:.1f}", busy, slowed)
    console().print(lt)


def run(args: argparse.Namespace) -> int:
    """Evaluate the scenario (here, or on ``--server``) and print it."""
    if args.server:
        with client_from_args(args) as client:
            est = client.predict(args.scenario)
    else:
        est = Engine(autoload=False if args.no_plugins else None).evaluate(args.scenario)
    if args.json:
        print_json(est.to_dict())
    else:
        render(est)
    return 0
