"""Before/after equivalence of the step model: save every answer once, compare later.

    python validation/equivalence.py save BASELINE.json.gz [--points 10000]
    python validation/equivalence.py compare BASELINE.json.gz

What is recorded:
- every training case of ``validation/reference/training_runs.yaml``: the scored
  prediction, the plan the twin chose for the unstated knobs, and the full estimate
  (``Estimate.to_dict``) of that plan; every collectives case: its prediction;
- ``--points`` random scenarios (seeded, drawn over every preset model and system, cluster
  sizes, fabrics, optics, CXL pools, and every plan field, schedules and recompute modules included):
  the full estimate through the public ``Engine.evaluate(mapping)``, or the error it raised;
- the same points as one zip-mode sweep (the sweep engine's rows: every column, or the
  infeasibility reason).

``compare`` recomputes all of it with the current code, on the baseline's own points, and
prints, per part, how many values are bit-identical, how many differ and the largest
relative difference, and exits 1 if anything differs by more than ``--rtol`` (default 0:
identical).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from twin.core.errors import TwinError
from twin.engine import Engine
from twin.reference import validate_file

ROOT = Path(__file__).resolve().parent
MODELS: list[Any] = ["deepseek-v3", "gpt3-175b", "llama3.1-405b", "llama3.1-70b", "llama3.1-8b", "mixtral-8x7b",
                     "nemotron4-340b", "qwen3-235b-a22b", {"preset": "llama3.1-8b", "seq_len": 4096},
                     {"preset": "llama3.1-70b", "seq_len": 16384}]
SYSTEMS = ["DGX-2", "DGX-A100", "DGX-B200", "DGX-H100", "GB200-NVL72", "GB300-NVL72", "HGX-B300", "HGX-H200",
           "Meta-RoCE-H100"]
SIZES = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 16384]


def random_point(rng: random.Random, energy: random.Random | None = None) -> dict[str, Any]:
    """One scenario mapping; degrees drawn so that a fair share of points is valid.

    ``energy``: a second stream that draws the cluster's power figures and prices (a
    separate stream, so the other fields are those drawn before these inputs existed).
    """
    system = rng.choice(SYSTEMS)
    n = rng.choice(SIZES)
    cluster: dict[str, Any] = {"system": system, "num_gpus": n}
    so: dict[str, Any] = {}
    if rng.random() < 0.3:
        so["fabric"] = rng.choice(["infiniband", "roce"])
    if rng.random() < 0.2:
        so["sharp"] = rng.random() < 0.5
    if rng.random() < 0.2:
        so["nic_gbps"] = rng.choice([200, 400, 800])
    if rng.random() < 0.15:
        so["oversubscription"] = [rng.choice([1, 2, 4])]
    if so:
        cluster["scale_out"] = so
    if rng.random() < 0.1:
        cluster["optics"] = {"kind": rng.choice(["pluggable", "cpo"])}
    pool = rng.random() < 0.1
    if pool:
        cluster["memory_pool"] = {"capacity_gib_per_node": rng.choice([512, 2048]),
                                  "bandwidth_GBps_per_node": rng.choice([128, 256])}
    plan: dict[str, Any] = {
        "tp": rng.choice([1, 2, 4, 8]), "pp": rng.choice([1, 1, 2, 4, 8, 16]), "cp": rng.choice([1, 1, 2, 4]),
        "mbs": rng.choice([1, 1, 2, 4]), "gbs": rng.choice([64, 256, 512, 1024, 2048, 4096]),
        "recompute": rng.choice(["none", "selective", "full"]),
        "precision": rng.choice(["bf16", "bf16", "fp8"]),
        "optimizer_sharding": rng.choice(["none", "distributed_optimizer", "zero1", "zero2", "zero3", "fsdp"]),
    }
    if plan["pp"] > 1 and rng.random() < 0.5:
        plan["vp"] = rng.choice([2, 3, 4, 5])
    model = rng.choice(MODELS)
    name = model if isinstance(model, str) else model["preset"]
    if name in ("deepseek-v3", "mixtral-8x7b", "qwen3-235b-a22b"):
        plan["ep"] = rng.choice([1, 2, 8, 16, 32, 64])
        if rng.random() < 0.3:
            plan["etp"] = 1
        plan["moe_dispatcher"] = rng.choice(["alltoall", "deepep"])
    if plan["recompute"] == "full" and rng.random() < 0.3:
        plan["recompute_layers"] = rng.choice([1, 2, 4])
    if rng.random() < 0.15:
        plan["rank_order"] = "tp-cp-pp-dp"
    if plan["optimizer_sharding"] == "fsdp":
        plan["fsdp_reshard_after_forward"] = rng.random() < 0.5
    if rng.random() < 0.2:
        plan["grad_reduce_dtype"] = "bf16"
    if rng.random() < 0.2:
        plan["overlap"] = {"grad_reduce": rng.random() < 0.7, "param_gather": rng.random() < 0.7,
                           "tp_comm": rng.choice([None, True, False]), "p2p": rng.random() < 0.7,
                           "ep_comm": rng.random() < 0.3}
    if rng.random() < 0.1:
        plan["sequence_parallel"] = False
    if rng.random() < 0.05:
        plan["trainable"] = "lora"
    if pool and rng.random() < 0.7:
        plan["offload"] = {rng.choice(["optimizer", "params", "activations"]): "cxl"}
    elif rng.random() < 0.03:
        plan["offload"] = {"optimizer": "host"}
    if energy is not None:
        _energy_inputs(energy, cluster, pool)
    point: dict[str, Any] = {"cluster": cluster, "model": model, "plan": plan}
    if rng.random() < 0.1:
        point["calibration"] = {"compute_efficiency": rng.choice([0.8, 1.1]),
                                "scale_out_bandwidth": rng.choice([0.5, 1.0])}
    if plan["optimizer_sharding"] != "none" and rng.random() < 0.2:  # hybrid sharding (some not dividing dp*cp)
        plan["dp_shard"] = rng.choice([2, 4, 8, 16, 3])
    return point


def _energy_inputs(rng: random.Random, cluster: dict[str, Any], pool: bool) -> None:
    """Random ``cluster.power`` / ``cluster.prices`` (each input set on some points)."""
    power: dict[str, Any] = {}
    if rng.random() < 0.3:
        power["gpu_idle_w"] = rng.choice([60.0, 150.0])      # below every preset GPU's TDP
    if rng.random() < 0.2:
        power["gpu_busy_fraction"] = 0.85
    if rng.random() < 0.3:
        power["nic_w"] = 25.0
    if rng.random() < 0.3:
        power["switch_w"] = [700.0]
    if rng.random() < 0.3:
        power["host_w"] = 2000.0
    if pool and rng.random() < 0.5:
        power["cxl_device_w"] = 15.0
    if rng.random() < 0.3:
        power["pue"] = 1.3
    if power:
        cluster["power"] = power
    prices: dict[str, Any] = {}
    draw = rng.random()
    if draw < 0.2:
        prices["usd_per_gpu_hour"] = 2.5
    elif draw < 0.35:
        prices.update(capex_usd_per_gpu=40000.0, amortisation_years=4.0)
    if rng.random() < 0.3:
        prices["usd_per_kwh"] = 0.08
    if prices:
        cluster["prices"] = prices


# Pipeline schedules a random pipelined point may state (``plan.schedule``), and the vp each needs.
SCHEDULE_VP = {"1f1b": 1, "interleaved": None, "zero_bubble_h1": 1, "zero_bubble_h2": 1, "zero_bubble_v": 2,
               "dualpipe": 1, "dualpipev": 2}


# Selective recomputation's module sets a random point may state (plan.recompute_modules).
RECOMPUTE_MODULES = [["layernorm"], ["core_attn", "layernorm"], ["mla_up_proj"], ["moe_act"],
                     ["moe_act", "layernorm", "mla_up_proj"]]


def draw_newer_fields(rng: random.Random, point: dict[str, Any]) -> None:
    """Fields added after the generator was first used (their own stream: the others stay
    as drawn before): recompute modules on some selective points, and a pipeline schedule
    on some pipelined points, mostly with the vp it needs (sometimes not: the rule must
    name the field the same way on every path).
    """
    plan = point["plan"]
    if rng.random() < 0.3 and (plan["recompute"] == "selective" or rng.random() < 0.1):
        plan["recompute_modules"] = rng.choice(RECOMPUTE_MODULES)
    if rng.random() < 0.5:
        return
    if plan["pp"] == 1 and rng.random() > 0.05:
        return  # a few unpipelined points keep one: the pp > 1 rule
    name = rng.choice(sorted(SCHEDULE_VP))
    plan["schedule"] = name
    vp = SCHEDULE_VP[name]
    if rng.random() < 0.85:
        if vp is None:
            plan["vp"] = plan.get("vp", 1) if plan.get("vp", 1) > 1 else rng.choice([2, 3, 4])
        elif vp == 1:
            plan.pop("vp", None)
        else:
            plan["vp"] = vp


def points(n: int, seed: int = 20261201) -> list[dict[str, Any]]:
    """``n`` random scenario mappings (a pure function of ``seed``).

    Fields added later (schedules, recompute modules) are drawn from their own stream, so
    every other field is what the generator drew before they existed.
    """
    rng = random.Random(seed)
    energy = random.Random(f"energy-{seed}")
    return [random_point(rng, energy) for _ in range(n)]


    srng = random.Random(seed + 1)
    out = []
    for _ in range(n):
        point = random_point(rng)
        draw_newer_fields(srng, point)
        out.append(point)
    return out


def _error(err: Exception) -> str:
    return f"{type(err).__name__}: {err}"


def scalar_answers(engine: Engine, pts: list[dict[str, Any]]) -> list[Any]:
    """``Engine.evaluate(mapping).to_dict()`` per point, or the error it raised."""
    out: list[Any] = []
    for p in pts:
        try:
            out.append(engine.evaluate(p).to_dict())
        except (TwinError, ArithmeticError) as err:
            out.append({"error": _error(err)})
    return out


def sweep_answers(engine: Engine, pts: list[dict[str, Any]]) -> list[Any]:
    """The same points as one zip-mode sweep: each row's columns or its reason."""
    from twin.sweep.job import EngineSettings
    from twin.sweep.runner import run_job, sweep_job
    from twin.sweep.sweep_spec import parse_spec

    def full(p: dict[str, Any], key: str) -> Any:
        return p.get(key, {})

    spec = {"name": "equivalence", "mode": "zip", "keep_rows": True,
            "base": {"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": "llama3.1-8b", "plan": {"gbs": 8}},
            "axes": [{"path": "cluster", "values": [p["cluster"] for p in pts]},
                     {"path": "model", "values": [p["model"] for p in pts]},
                     {"path": "plan", "values": [p["plan"] for p in pts]},
                     {"path": "calibration", "values": [full(p, "calibration") for p in pts]}],
            "objective": {"metric": "step_time_s", "top": 10}}
    job = sweep_job(parse_spec(spec), engine, EngineSettings(autoload=False))
    result = run_job(job, executor="inline")
    rows = result.rows
    assert rows is not None
    names = list(rows)
    out: list[Any] = [None] * len(pts)
    ids = rows["point_id"]
    for j, pid in enumerate(ids):
        row = {k: _plain(rows[k][j]) for k in names if not k.startswith(("cluster", "model", "plan", "calibration"))}
        out[int(pid)] = row
    return out


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def reference_answers(engine: Engine) -> dict[str, Any]:
    """Every reference case: the score, the chosen plan and the full estimate of that plan."""
    out: dict[str, Any] = {}
    for name in ("training_runs.yaml", "collectives.yaml"):
        report = validate_file(engine, ROOT / "reference" / name)
        for r in report.cases:
            entry: dict[str, Any] = {"predicted": r.predicted, "plan": r.plan, "notes": r.notes}
            out[f"{report.kind}:{r.id}"] = entry
        for s in report.skipped:
            out[f"{report.kind}:{s['id']}"] = {"skipped": s["reason"]}
    return out


PARTS = ("reference", "scalar", "sweep")


def collect(n: int, parts: tuple[str, ...] = PARTS, pts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything ``save`` writes (or the named ``parts`` of it); ``pts``: the points (else ``points(n)``)."""
    engine = Engine(autoload=False)
    if pts is None:
        pts = points(n)
    out: dict[str, Any] = {"points": pts}
    if "reference" in parts:
        out["reference"] = reference_answers(engine)
    if "scalar" in parts:
        out["scalar"] = scalar_answers(engine, pts)
    if "sweep" in parts:
        out["sweep"] = sweep_answers(engine, pts)
    return out


class Diff:
    """Counts of identical and differing leaves, and the worst relative difference."""

    def __init__(self) -> None:
        self.same = 0
        self.differ = 0
        self.added = 0  # leaves the baseline does not have (a field or column added since): not a difference
        self.worst = 0.0
        self.examples: list[str] = []

    def leaf(self, path: str, a: Any, b: Any) -> None:
        if isinstance(a, str) and a == "<missing>":
            self.added += 1
            return
        if isinstance(a, float) and isinstance(b, float | int) and not isinstance(b, bool):
            if a == b or (math.isnan(a) and math.isnan(b)):
                self.same += 1
                return
            rel = abs(a - b) / max(abs(a), abs(b), 1e-300)
            self.worst = max(self.worst, rel)
            self.differ += 1
            if len(self.examples) < 12:
                self.examples.append(f"{path}: {a!r} -> {b!r} (rel {rel:.2e})")
            return
        if a == b:
            self.same += 1
        else:
            self.differ += 1
            self.worst = math.inf
            if len(self.examples) < 12:
                self.examples.append(f"{path}: {a!r} -> {b!r}")

    def walk(self, path: str, a: Any, b: Any) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                self.walk(f"{path}.{k}", a.get(k, "<missing>"), b.get(k, "<missing>"))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                self.walk(f"{path}[{i}]", x, y)
        else:
            self.leaf(path, a, b)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("save", "compare"))
    ap.add_argument("file")
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--rtol", type=float, default=0.0)
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts to compare")
    args = ap.parse_args(argv)
    path = Path(args.file)
    if args.action == "save":
        data = collect(args.points)
        with gzip.open(path, "wt") as f:
            json.dump(data, f, sort_keys=True)
        ok = sum(1 for a in data["scalar"] if "error" not in a)
        print(f"saved {len(data['points'])} points ({ok} evaluated), {len(data['reference'])} reference cases "
              f"-> {path}")
        return 0
    with gzip.open(path, "rt") as f:
        old = json.load(f)
    parts = tuple(p for p in args.parts.split(",") if p)
    # The baseline's own points: a baseline saved by an older generator stays comparable.
    new = collect(len(old["points"]), parts, old["points"])
    if points(len(old["points"])) != old["points"]:
        print("note: the generator now draws other points than the baseline's; the baseline's are compared")
    bad = False
    for part in parts:
        d = Diff()
        d.walk(part, old[part], json.loads(json.dumps(new[part], sort_keys=True)))
        added = f" ({d.added:,} values the baseline did not have)" if d.added else ""
        print(f"{part:9s}: {d.same:,} identical values, {d.differ:,} different, worst relative difference "
              f"{d.worst:.3g}{added}")
        for e in d.examples:
            print(f"    {e}")
        bad |= d.worst > args.rtol
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
