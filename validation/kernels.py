"""The compute model's kernel times against kernels measured on a real GPU.

Reads a ``twin-kernel-measurements/v1`` file (``validation/reference/kernels_h200.json``,
written by ``benchmarks/gpu_kernels.py``) and prints, per precision, the error of
``twin.core.compute``'s GEMM time for each measured shape, at kernel level: the GPU preset's
efficiency profile with ``sustained`` = 1 (the end-to-end factor is not a kernel's). The
times compared are the back-to-back ones (``ms_stream``: kernels queued as in a training
step's stream); each GEMM timed alone (``ms``, launch gap included) is printed beside them.
It also sets the profile's kernel-level constants beside what was measured: the GEMM figure
against the best-shaped GEMMs, the HBM figure against the streaming bandwidth. MoE expert
GEMMs (grouped, five recent models) are compared the same way, and against single GEMMs of
the same depth; fused attention's measured fraction of the peak is printed by length, to
128K keys.

    python validation/kernels.py [FILE] [--gpu H200-SXM-141GB]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

from twin.core import compute
from twin.core.scenario_io import resolve_gpu
from twin.core.specs import GPU
from twin.engine import Engine

DEFAULT = Path(__file__).resolve().parent / "reference" / "kernels_h200.json"
TOP = 10   # "large, well-shaped" GEMMs: the fastest shapes measured


def load(path: Path = DEFAULT) -> dict[str, Any]:
    """The measurement file, checked for its schema and the fields each row needs."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != "twin-kernel-measurements/v1":
        raise ValueError(f"{path}: schema must be twin-kernel-measurements/v1 (got {data.get('schema')!r})")
    for section, fields in (("gemm", ("m", "n", "k", "precision", "ms")),
                            ("grouped", ("m", "n", "k", "groups", "precision", "ms")),
                            ("grouped_moe", ("m", "n", "k", "groups", "precision", "ms"))):
        for i, row in enumerate(data.get(section, [])):
            if "error" in row:    # a shape the device refused: kept as measured, never compared
                continue
            for field in fields:
                if field not in row:
                    raise ValueError(f"{path}: {section}[{i}] lacks {field!r}")
            if not row["ms"] > 0:
                raise ValueError(f"{path}: {section}[{i}].ms must be > 0 (got {row['ms']!r})")
    return data


def kernel_gpu(engine: Engine, name: str) -> GPU:
    """The preset GPU with its efficiency profile at kernel level (``sustained`` = 1)."""
    gpu = resolve_gpu(name, engine.catalog)
    assert gpu.efficiency is not None
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency, sustained=1.0))


def measured_s(row: dict[str, Any], timing: str = "stream") -> float:
    """A row's seconds: back to back (``stream``, when measured) or alone (``alone``)."""
    ms = row.get("ms_stream") if timing == "stream" else None
    return (ms if ms is not None else row["ms"]) * 1e-3


def gemm_errors(gpu: GPU, rows: list[dict[str, Any]], precision: str,
                timing: str = "stream") -> list[tuple[dict[str, Any], float]]:
    """(row, predicted / measured - 1) for each measured GEMM of ``precision``."""
    assert gpu.efficiency is not None
    dev = compute.device_for(gpu, precision, gpu.efficiency)
    out = []
    for row in rows:
        if row["precision"] != precision:
            continue
        if "groups" in row:
            t = compute.grouped_gemm_time(dev, row["m"], row["n"], row["k"], row["groups"])
        else:
            t = compute.gemm_time(dev, row["m"], row["n"], row["k"])
        out.append((row, t / measured_s(row, timing) - 1.0))
    return out


def spread(errors: list[float]) -> dict[str, float]:
    """n, median and 90th percentile of |error|, and the signed median, in %."""
    a = sorted(abs(e) for e in errors)
    return {"n": len(a), "median_abs_pct": 100 * statistics.median(a),
            "p90_abs_pct": 100 * a[min(len(a) - 1, math.ceil(0.9 * len(a)) - 1)],
            "signed_median_pct": 100 * statistics.median(errors)}


def best_shape_efficiency(gpu: GPU, rows: list[dict[str, Any]], precision: str) -> float:
    """Mean fraction of the dense peak the ``TOP`` fastest GEMMs of ``precision`` reached,
    over the model's tile/wave efficiency of their shapes: what the profile's ``gemm``
    figure stands for (a large, well-shaped GEMM)."""
    def tflops(r: dict[str, Any]) -> float:
        return 2.0 * r["m"] * r["n"] * r["k"] / measured_s(r) / 1e12

    sel = sorted((r for r in rows if r["precision"] == precision and "groups" not in r), key=lambda r: -tflops(r))
    peak = gpu.peak_tflops[precision]
    return statistics.mean(tflops(r) / peak / compute.shape_efficiency(r["m"], r["n"], gpu.sm_count)
                           for r in sel[:TOP])


DEPTHS = (0, 1024, 2048, 4096, 8192, 16384, math.inf)


def _depth_label(lo: float, hi: float) -> str:
    return f"k {lo}-{hi}" if hi != math.inf else f"k >= {lo}"


def by_depth(errors: list[tuple[dict[str, Any], float]]) -> list[tuple[str, dict[str, float]]]:
    """The errors by GEMM depth k (the reduction dimension)."""
    out = []
    for lo, hi in itertools.pairwise(DEPTHS):
        sel = [e for r, e in errors if lo <= r["k"] < hi]
        if sel:
            out.append((_depth_label(lo, hi), spread(sel)))
    return out


def grouped_over_dense(dense: list[tuple[dict[str, Any], float]],
                       grouped: list[tuple[dict[str, Any], float]]) -> float:
    """How fast grouped GEMMs run against single GEMMs of the same depth, relative to what the
    model predicts for each: per depth band (:data:`DEPTHS`), the median of the grouped rows'
    predicted/measured over the single GEMMs' one, averaged over the grouped rows. Below 1: a
    grouped kernel reaches less of the model's figure than one GEMM of that depth does.
    """
    weighted: list[float] = []
    for lo, hi in itertools.pairwise(DEPTHS):
        d = [1.0 + e for r, e in dense if lo <= r["k"] < hi]
        g = [1.0 + e for r, e in grouped if lo <= r["k"] < hi]
        if d and g:
            weighted += [statistics.median(g) / statistics.median(d)] * len(g)
    return statistics.mean(weighted) if weighted else math.nan


def attention_fractions(rows: list[dict[str, Any]], peak16_tflops: float) -> list[dict[str, Any]]:
    """The measured attention rows as fractions of the 16-bit peak (rows a backend refused left out)."""
    return [{"backend": a.get("backend", "flash"), "seq": a["seq"], "queries": a.get("queries", a["seq"]),
             "causal": a.get("causal", True), "heads": a.get("heads"),
             "kv_heads": a.get("kv_heads"), "fwd_fraction": a["fwd_TFLOPs"] / peak16_tflops,
             "bwd_fraction": a["bwd_TFLOPs"] / peak16_tflops} for a in rows if "error" not in a]


# Keys from which fused attention is on its long-sequence plateau (the twin's ramp,
# compute._ATTN_HALF_KV = 256, is above 0.97 there).
PLATEAU_KEYS = 8192


def cudnn_plateau(fractions: list[dict[str, Any]]) -> tuple[float, float] | None:
    """Median (forward, backward) fraction of the 16-bit peak of the causal, whole-sequence cuDNN
    rows with at least ``PLATEAU_KEYS`` keys: the profile's ``cudnn_attention_fwd`` / ``_bwd``
    (None: no such row)."""
    rows = [a for a in fractions if a["backend"] == "cudnn" and a["seq"] >= PLATEAU_KEYS and a["causal"]
            and a["queries"] == a["seq"]]
    if not rows:
        return None
    return (statistics.median(a["fwd_fraction"] for a in rows), statistics.median(a["bwd_fraction"] for a in rows))


def spread_line(label: str, s: dict[str, float]) -> str:
    """One printed line of a :func:`spread`: count, median |error| and signed median."""
    return (f"{label}: {s['n']} GEMMs, |error| median {s['median_abs_pct']:.1f}%, "
            f"signed median {s['signed_median_pct']:+.1f}%")


def report(data: dict[str, Any], gpu_name: str = "H200-SXM-141GB") -> dict[str, Any]:
    """Every figure this module prints, as a dict."""
    engine = Engine(autoload=False)
    gpu = kernel_gpu(engine, gpu_name)
    eff = gpu.efficiency
    assert eff is not None
    out: dict[str, Any] = {"gpu": gpu.name, "measured_on": data.get("gpu"), "precisions": {}}
    dense: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for precision in ("bf16", "fp8"):
        errs = dense[precision] = gemm_errors(gpu, data["gemm"], precision)
        if not errs:
            continue
        out["precisions"][precision] = {
            "gemm": spread([e for _, e in errs]),
            "gemm_alone": spread([e for _, e in gemm_errors(gpu, data["gemm"], precision, "alone")]),
            "by_depth": by_depth(errs),
            "best_shape_efficiency": best_shape_efficiency(gpu, data["gemm"], precision),
            "profile_gemm": eff.gemm[precision],
        }
    grouped = gemm_errors(gpu, data.get("grouped", []), "bf16")
    if grouped:
        out["grouped_bf16"] = spread([e for _, e in grouped])
    moe = [r for r in data.get("grouped_moe", []) if "error" not in r]
    if moe:
        errs = gemm_errors(gpu, moe, "bf16")
        out["grouped_moe"] = {
            "all": spread([e for _, e in errs]),
            "by_model": {m: spread([e for r, e in errs if r["model"] == m])
                         for m in dict.fromkeys(r["model"] for r in moe)},
            "by_pass": {p: spread([e for r, e in errs if r["pass"] == p]) for p in ("fwd", "dgrad", "wgrad")},
            "grouped_over_dense": grouped_over_dense(dense["bf16"], errs + grouped),
        }
    hbm = data.get("hbm") or {}
    if hbm:
        out["hbm"] = {"read_fraction": hbm["read_TBps"] / gpu.hbm_TBps,
                      "copy_fraction": hbm["copy_TBps"] / gpu.hbm_TBps, "profile_hbm": eff.hbm}
    for section in ("attention", "attention_long", "attention_cp"):
        if data.get(section):
            out[section] = attention_fractions(data[section], gpu.peak_tflops["bf16"])
    if "attention" in out:
        out["profile_attention"] = (eff.attention_fwd, eff.attention_bwd)
        plateau = cudnn_plateau(out["attention"] + out.get("attention_long", []))
        if plateau is not None:
            out["cudnn_plateau"] = plateau
            out["profile_cudnn_attention"] = (eff.cudnn_attention_fwd, eff.cudnn_attention_bwd)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(DEFAULT))
    ap.add_argument("--gpu", default="H200-SXM-141GB", help="the GPU preset to compare with")
    args = ap.parse_args(argv)
    r = report(load(Path(args.file)), args.gpu)
    print(f"{r['gpu']} (preset, kernel level) against {r['measured_on']} measured")
    for precision, p in r["precisions"].items():
        g = p["gemm"]
        alone = p["gemm_alone"]
        print(f"{precision}: {g['n']} GEMMs back to back, |error| median {g['median_abs_pct']:.1f}% "
              f"p90 {g['p90_abs_pct']:.1f}%, signed median {g['signed_median_pct']:+.1f}% (negative: the twin is "
              f"faster); each alone: median {alone['median_abs_pct']:.1f}% p90 {alone['p90_abs_pct']:.1f}%")
        for label, s in p["by_depth"]:
            print(f"    {label:>14}: n={s['n']:3d} signed median {s['signed_median_pct']:+.1f}%")
        print(f"    best {TOP} shapes reach {p['best_shape_efficiency']:.3f} of peak over shape efficiency; "
              f"profile gemm.{precision} = {p['profile_gemm']}")
    if "grouped_bf16" in r:
        print(spread_line("grouped bf16", r["grouped_bf16"]))
    if "hbm" in r:
        h = r["hbm"]
        print(f"HBM: read {h['read_fraction']:.3f}, copy {h['copy_fraction']:.3f} of the datasheet; "
              f"profile hbm = {h['profile_hbm']}")
    if "grouped_moe" in r:
        g = r["grouped_moe"]
        print(spread_line("grouped bf16, MoE experts", g["all"]))
        for label, s in [*g["by_model"].items(), *g["by_pass"].items()]:
            print(f"    {label:>16}: n={s['n']:3d} signed median {s['signed_median_pct']:+.1f}%")
        print(f"    grouped against single GEMMs of the same depth: {g['grouped_over_dense']:.3f} of the model's "
              "relative figure")
    for a in r.get("attention", []) + r.get("attention_long", []) + r.get("attention_cp", []):
        heads = f", {a['heads']}/{a['kv_heads']} heads" if a["heads"] and a["kv_heads"] else ""
        shape = f"seq {a['seq']}" if a["queries"] == a["seq"] and a["causal"] else \
            f"{a['queries']} queries x {a['seq']} keys{'' if a['causal'] else ' unmasked'}"
        print(f"attention ({a['backend']}{heads}) {shape}: fwd {a['fwd_fraction']:.3f}, "
              f"bwd {a['bwd_fraction']:.3f} of the bf16 peak")
    if "profile_attention" in r:
        print(f"    profile attention_fwd / attention_bwd (end to end, fitted) = {r['profile_attention']}")
    if "cudnn_plateau" in r:
        fwd, bwd = r["cudnn_plateau"]
        print(f"    cuDNN from {PLATEAU_KEYS} keys: median fwd {fwd:.3f}, bwd {bwd:.3f}; profile cudnn_attention_fwd / "
              f"_bwd = {r['profile_cudnn_attention']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
