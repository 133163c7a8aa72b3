"""Measure on a real GPU what the compute model assumes: GEMM throughput by shape and
precision, HBM bandwidth, fused attention. Needs PyTorch with CUDA; the twin never needs it.

It writes a JSON file of measurements (the GPU, clocks, each shape's median time) that
``validation/kernels.py`` compares with the twin's ``twin.core.compute`` per shape.
Method (the workplace's device notes, METHOD.md): random inputs, never zeros; warm-up
first; CUDA-event timing: each GEMM alone (median of repeats: ``ms``, launch gap included)
and back to back (the mean over the same repeats queued between two events: ``ms_stream``,
as kernels run in a training step's stream); inputs rotated over several buffers when a
shape's operands fit in L2, so repeats do not measure the cache.

Shapes: the linear layers of Llama 3.1 8B and 70B (QKV, attention output, MLP up+gate,
MLP down) at tensor-parallel degree 1-8 and 2,048-16,384 tokens per micro-batch, in each
of their three passes (forward (m,n,k), data gradient (m,k,n), weight gradient (k,n,m)).

    python benchmarks/gpu_kernels.py --out kernels.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from typing import Any

# (name, hidden, ffn, heads, kv_heads): Llama 3 paper Table 3 / the models' config.json.
MODELS = (("llama3.1-8b", 4096, 14336, 32, 8), ("llama3.1-70b", 8192, 28672, 64, 8))
TOKENS = (2048, 4096, 8192, 16384)
TP = (1, 2, 4, 8)
HEAD_DIM = 128
L2_BYTES = 60e6      # H200: 60 MB of L2 (torch.cuda.get_device_properties reports it)


def linear_shapes() -> list[dict[str, Any]]:
    """Every (model, layer, tp, tokens, pass) GEMM as (m, n, k)."""
    out = []
    for model, h, ffn, heads, kv in MODELS:
        for tp in TP:
            layers = {"qkv": ((heads + 2 * kv) * HEAD_DIM // tp, h), "proj": (h, heads * HEAD_DIM // tp),
                      "fc1": (2 * ffn // tp, h), "fc2": (h, ffn // tp)}
            for tokens in TOKENS:
                for layer, (n, k) in layers.items():
                    passes = {"fwd": (tokens, n, k), "dgrad": (tokens, k, n), "wgrad": (k, n, tokens)}
                    for name, (m_, n_, k_) in passes.items():
                        out.append({"model": model, "layer": layer, "tp": tp, "tokens": tokens, "pass": name,
                                    "m": m_, "n": n_, "k": k_})
    return out


def median_ms(torch: Any, fn: Any, reps: int) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` event-timed runs (after a warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def stream_ms(torch: Any, fn: Any, reps: int) -> float:
    """Mean milliseconds of ``fn()`` run ``reps`` times back to back between two events: the
    GPU's queue stays fed, so no launch gap is counted (as in a training step's stream)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def gemm_runner(torch: Any, m: int, n: int, k: int, precision: str) -> tuple[Any, Any]:
    """(a function running one GEMM over rotating inputs, a check of its result)."""
    dev = "cuda"
    op_bytes = (m * k + k * n) * (1 if precision == "fp8" else 2) + m * n * 2
    sets = max(1, min(8, int(3 * L2_BYTES // op_bytes) + 1))
    a_list = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(sets)]
    b_list = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(sets)]
    state = {"i": 0}
    if precision == "bf16":
        bt = [b.t() for b in b_list]

        def run() -> Any:
            i = state["i"] = (state["i"] + 1) % sets
            return a_list[i] @ bt[i]
    else:
        # Tensorwise-scaled E4M3 (Transformer Engine's delayed/current scaling GEMM): the
        # second operand column-major, as cuBLASLt's FP8 GEMM requires.
        f8 = torch.float8_e4m3fn
        a8 = [x.to(f8) for x in a_list]
        b8 = [x.to(f8).t() for x in b_list]
        one = torch.ones((), device=dev, dtype=torch.float32)

        def run() -> Any:
            i = state["i"] = (state["i"] + 1) % sets
            return torch._scaled_mm(a8[i], b8[i], scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def check() -> float:
        state["i"] = sets - 1   # the next run uses set 0
        got = run().float()
        ref = a_list[0].float() @ b_list[0].float().t()
        return float((got - ref).norm() / ref.norm())

    return run, check


def hbm(torch: Any) -> dict[str, float]:
    """Device-to-device copy (bytes read + written) and a read-only reduction, TB/s."""
    n = 2 * 1024**3 // 2   # 2 GiB of bf16
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy_ms = median_ms(torch, lambda: dst.copy_(src), 20)
    read_ms = median_ms(torch, lambda: src.sum(dtype=torch.float32), 20)
    return {"copy_TBps": 2 * n * 2 / (copy_ms * 1e-3) / 1e12, "read_TBps": n * 2 / (read_ms * 1e-3) / 1e12}


def attention_row(torch: Any, backend: str, batch: int, heads: int, kv: int, seq: int,
                  reps: int, queries: int | None = None, causal: bool = True) -> dict[str, Any]:
    """One fused-attention measurement, bf16, head dim 128, through PyTorch's SDPA with
    ``backend`` ("flash": FlashAttention-2; "cudnn": cuDNN's fused attention, what Transformer
    Engine runs on Hopper by default): forward and backward back to back, ``reps`` each; a
    backend that does not serve the shape gives a row with its ``error``. ``seq`` keys,
    ``queries`` queries (default ``seq``); ``causal`` False: every query sees every key (a
    context-parallel ring's off-diagonal blocks)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = SDPBackend.FLASH_ATTENTION if backend == "flash" else SDPBackend.CUDNN_ATTENTION
    nq = seq if queries is None else queries
    torch.cuda.empty_cache()  # the previous row's tensors, freed when it returned
    try:
        q = torch.randn(batch, heads, nq, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        # cuDNN's SDPA takes K/V with all heads (no GQA flag): repeat them for both backends.
        k_ = torch.randn(batch, kv, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, kv, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k_ = k_.repeat_interleave(heads // kv, dim=1).requires_grad_()
        v = v.repeat_interleave(heads // kv, dim=1).requires_grad_()
        with sdpa_kernel(chosen):
            def fwd(q: Any = q, k_: Any = k_, v: Any = v) -> Any:
                return torch.nn.functional.scaled_dot_product_attention(q, k_, v, is_causal=causal)
            fwd_ms = stream_ms(torch, fwd, reps)
            o = fwd()
            g = torch.randn_like(o)

            def bwd(o: Any = o, g: Any = g, inputs: Any = (q, k_, v)) -> Any:
                return torch.autograd.grad(o, inputs, g, retain_graph=True)
            bwd_ms = stream_ms(torch, bwd, reps)
    except Exception as err:  # a backend this build, shape or length does not serve
        return {"backend": backend, "seq": seq, "queries": nq, "causal": causal,
                "error": f"{type(err).__name__}: {err}"[:300]}
    # The FLOPs FlashAttention's papers count: 4 * b * h * queries * keys * d forward, halved by
    # the causal mask (queries = keys there).
    flops_fwd = 4.0 * batch * heads * nq * seq * HEAD_DIM / (2 if causal else 1)
    return {"backend": backend, "seq": seq, "queries": nq, "causal": causal, "batch": batch, "heads": heads,
            "kv_heads": kv, "head_dim": HEAD_DIM, "fwd_ms": fwd_ms, "bwd_ms": bwd_ms,
            "fwd_TFLOPs": flops_fwd / (fwd_ms * 1e-3) / 1e12, "bwd_TFLOPs": 2.5 * flops_fwd / (bwd_ms * 1e-3) / 1e12}


def attention(torch: Any) -> list[dict[str, Any]]:
    """:func:`attention_row` with Llama 3.1 8B's heads (32 query, 8 key/value), 2K to 16K keys,
    16K tokens a step (batch 16K / seq), 10 runs each."""
    return [attention_row(torch, backend, max(1, 16384 // seq), 32, 8, seq, 10)
            for backend in ("flash", "cudnn") for seq in (2048, 4096, 8192, 16384)]


def grouped(torch: Any, reps: int) -> list[dict[str, Any]]:
    """Mixtral 8x7B's expert MLP as one grouped bf16 GEMM (``torch._grouped_mm``): experts
    per rank 8/ep, each with tokens x top-2 / 8 rows, up+gate (n = 2 x ffn) and down."""
    out = []
    h, ffn, experts, top_k = 4096, 14336, 8, 2
    for ep in (1, 2, 4, 8):
        groups = experts // ep
        for tokens in (4096, 8192, 16384):
            rows = tokens * top_k // experts
            for layer, (n, k) in {"fc1": (2 * ffn, h), "fc2": (h, ffn)}.items():
                a = torch.randn(groups * rows, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
                offs = torch.arange(rows, groups * rows + 1, rows, device="cuda", dtype=torch.int32)
                def run(a: Any = a, b: Any = b, offs: Any = offs) -> Any:
                    return torch._grouped_mm(a, b, offs=offs)
                ms, ms_stream = median_ms(torch, run, reps), stream_ms(torch, run, reps)
                flops = 2.0 * groups * rows * n * k
                out.append({"model": "mixtral-8x7b", "layer": layer, "ep": ep, "tokens": tokens, "groups": groups,
                            "m": rows, "n": n, "k": k, "precision": "bf16", "ms": ms,
                            "TFLOPs": flops / (ms * 1e-3) / 1e12, "ms_stream": ms_stream,
                            "TFLOPs_stream": flops / (ms_stream * 1e-3) / 1e12})
    return out


# MoE expert MLPs of recent models: (name, hidden, expert ffn, experts, top-k), from each
# model's config.json (DeepSeek-V3: hidden_size 7168, moe_intermediate_size 2048, 256 routed
# experts, 8 per token; Kimi K2: 7168, 2048, 384, 8; Qwen3-235B-A22B: 4096, 1536, 128, 8;
# Qwen3-30B-A3B: 2048, 768, 128, 8; gpt-oss-120b: 2880, 2880, 128, 4). fc1 is up+gate.
MOE_MODELS = (("deepseek-v3", 7168, 2048, 256, 8), ("kimi-k2", 7168, 2048, 384, 8),
              ("qwen3-235b-a22b", 4096, 1536, 128, 8), ("qwen3-30b-a3b", 2048, 768, 128, 8),
              ("gpt-oss-120b", 2880, 2880, 128, 4))


def grouped_moe(torch: Any, reps: int) -> list[dict[str, Any]]:
    """The expert GEMMs of :data:`MOE_MODELS` as one bf16 grouped GEMM per layer and pass
    (``torch._grouped_mm``), as an expert-parallel rank runs them: ``experts / ep`` local
    experts, each with ``tokens x top_k x ep / experts`` rows, rounded down to 16 (balanced
    routing of ``tokens`` per rank from the ``ep`` ranks). Forward (rows x k) @ (k x n), data gradient (rows x n) @
    (n x k), weight gradient (k x rows) @ (rows x n) per expert (the rows are its depth)."""
    out = []
    for model, h, ffn, experts, top_k in MOE_MODELS:
        for ep in (8, 32, 64):
            if experts % ep:
                continue
            groups = experts // ep
            for tokens in (4096, 8192):
                # Rows per expert rounded down to 16: the grouped GEMM's ragged dimension must be
                # a multiple of 16 bytes (torch's GroupMMCommon asserts it; Megatron pads to 16 too).
                rows = tokens * top_k * ep // experts // 16 * 16
                for layer, (n, k) in {"fc1": (2 * ffn, h), "fc2": (h, ffn)}.items():
                    for kind in ("fwd", "dgrad", "wgrad"):
                        row = {"model": model, "layer": layer, "pass": kind, "ep": ep, "tokens": tokens,
                               "groups": groups, "precision": "bf16"}
                        try:
                            offs = torch.arange(rows, groups * rows + 1, rows, device="cuda", dtype=torch.int32)
                            if kind == "wgrad":   # per expert (k x rows) @ (rows x n): ragged depth
                                a = torch.randn(k, groups * rows, device="cuda", dtype=torch.bfloat16)
                                b = torch.randn(n, groups * rows, device="cuda", dtype=torch.bfloat16).t()
                                gm, gn, gk = k, n, rows
                            else:
                                kk, nn = (k, n) if kind == "fwd" else (n, k)
                                a = torch.randn(groups * rows, kk, device="cuda", dtype=torch.bfloat16)
                                b = torch.randn(groups, nn, kk, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
                                gm, gn, gk = rows, nn, kk

                            def run(a: Any = a, b: Any = b, offs: Any = offs) -> Any:
                                return torch._grouped_mm(a, b, offs=offs)
                            ms, ms_stream = median_ms(torch, run, reps), stream_ms(torch, run, reps)
                        except Exception as err:  # a layout this torch's grouped GEMM refuses
                            out.append({**row, "error": f"{type(err).__name__}: {err}"[:300]})
                            continue
                        flops = 2.0 * groups * gm * gn * gk
                        out.append({**row, "m": gm, "n": gn, "k": gk, "ms": ms, "TFLOPs": flops / (ms * 1e-3) / 1e12,
                                    "ms_stream": ms_stream, "TFLOPs_stream": flops / (ms_stream * 1e-3) / 1e12})
                        del a, b
    return out


def attention_long(torch: Any) -> list[dict[str, Any]]:
    """:func:`attention_row` at long context with Qwen3-235B-A22B's heads (64 query, 4
    key/value), one sequence of 4K to 128K keys (10 runs up to 16K, 3 beyond)."""
    return [attention_row(torch, backend, 1, 64, 4, seq, 10 if seq <= 16384 else 3)
            for backend in ("cudnn", "flash") for seq in (4096, 16384, 32768, 65536, 131072)]


def attention_cp(torch: Any) -> list[dict[str, Any]]:
    """:func:`attention_row` at one GPU's share of Qwen3-235B-A22B's long-context runs (NVIDIA's
    Megatron MoE Model Zoo: TP4, so 16 query and 1 key/value head per GPU; CP = seq / 16K, so 16K
    queries per GPU): the causal block (CP 1, and the ring's first step) and the two
    off-diagonal blocks of Transformer Engine's load-balanced ring (16K queries x 8K keys and 8K
    x 16K, no mask); with 64/4 heads beside them (one GPU without TP). 10 runs each."""
    shapes = [(16384, None, True), (8192, 16384, False), (16384, 8192, False)]
    return [attention_row(torch, backend, 1, heads, kv, keys, 10, queries, causal)
            for backend in ("cudnn", "flash") for heads, kv in ((16, 1), (64, 4))
            for keys, queries, causal in shapes]


def smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu,"
                               "clocks.max.sm,power.limit", "--format=csv,noheader"],
                              check=False, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return f"nvidia-smi: {err}"


def save(result: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="kernels.json")
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--sections", default="gemm,attention,grouped,grouped_moe,attention_long,attention_cp",
                    help="comma-separated: gemm (with hbm), attention, grouped, grouped_moe, attention_long, "
                         "attention_cp")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    props = torch.cuda.get_device_properties(0)
    result: dict[str, Any] = {"gpu": props.name, "sm_count": props.multi_processor_count,
                              "torch": torch.__version__, "cuda": torch.version.cuda, "host": platform.node(),
                              "date": time.strftime("%Y-%m-%d"), "smi_before": smi()}
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    if "gemm" in sections:
        result["hbm"] = hbm(torch)
        print("hbm", result["hbm"], flush=True)
    for precision in ("bf16", "fp8") if "gemm" in sections else ():
        checked = False
        for s in linear_shapes():
            run, check = gemm_runner(torch, s["m"], s["n"], s["k"], precision)
            ms = median_ms(torch, run, args.reps)
            ms_stream = stream_ms(torch, run, args.reps)
            flops = 2.0 * s["m"] * s["n"] * s["k"]
            row = {**s, "precision": precision, "ms": ms, "TFLOPs": flops / (ms * 1e-3) / 1e12,
                   "ms_stream": ms_stream, "TFLOPs_stream": flops / (ms_stream * 1e-3) / 1e12}
            if not checked:   # one correctness check per precision: bf16 ~1e-3, fp8 E4M3 ~5e-2
                row["rel_error"] = check()
                checked = True
            rows.append(row)
            del run, check
        torch.cuda.empty_cache()
        print(precision, "done", f"{time.monotonic() - t0:.0f} s", flush=True)
    if rows:
        result["gemm"] = rows
        result["smi_after_gemm"] = smi()
        save(result, args.out)
    # The sections after the GEMMs each guarded: a failure of one is recorded, not fatal.
    for name, fn in (("attention", lambda: attention(torch)), ("grouped", lambda: grouped(torch, args.reps)),
                     ("grouped_moe", lambda: grouped_moe(torch, min(args.reps, 10))),
                     ("attention_long", lambda: attention_long(torch)),
                     ("attention_cp", lambda: attention_cp(torch))):
        if name not in sections:
            continue
        print(name, "...", f"{time.monotonic() - t0:.0f} s", flush=True)
        try:
            result[name] = fn()
        except Exception as err:  # an API this torch lacks, a backend refused: note it
            result[name] = []
            result[f"{name}_error"] = f"{type(err).__name__}: {err}"
            print(name, "failed:", result[f"{name}_error"], flush=True)
        save(result, args.out)
    result["smi_after"] = smi()
    save(result, args.out)
    for precision in ("bf16", "fp8") if rows else ():
        sel = sorted(r["TFLOPs"] for r in rows if r["precision"] == precision)
        print(f"{precision}: {len(sel)} shapes, TFLOP/s min {sel[0]:.0f} median {sel[len(sel) // 2]:.0f} "
              f"max {sel[-1]:.0f}")
    for precision in ("bf16", "fp8") if rows else ():
        sel = sorted(r["TFLOPs_stream"] for r in rows if r["precision"] == precision)
        print(f"{precision} back to back: TFLOP/s min {sel[0]:.0f} median {sel[len(sel) // 2]:.0f} max {sel[-1]:.0f}")
    summaries = [(f"attention {a['backend']} {a.get('heads', '?')}/{a.get('kv_heads', '?')} heads, "
                  f"{a.get('queries', a['seq'])} queries x {a['seq']} keys"
                  f"{'' if a.get('causal', True) else ' unmasked'}",
                  a, "fwd {fwd_TFLOPs:.0f} TFLOP/s, bwd {bwd_TFLOPs:.0f}")
                 for a in result.get("attention", []) + result.get("attention_long", [])
                 + result.get("attention_cp", [])]
    summaries += [(f"grouped {g.get('model')} {g['layer']} {g.get('pass', 'fwd')} ep {g['ep']} tokens {g['tokens']}", g,
                   "{TFLOPs_stream:.0f} TFLOP/s back to back")
                  for g in result.get("grouped", []) + result.get("grouped_moe", [])]
    for label, row, figures in summaries:
        print(f"{label}: {row['error'] if 'error' in row else figures.format(**row)}")
    print(result["smi_before"], "|", result["smi_after"])


if __name__ == "__main__":
    main()
