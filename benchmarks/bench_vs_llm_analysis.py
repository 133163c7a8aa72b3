"""Fabric Twin vs llm-analysis: evaluations per second on the same training configurations.

    pip install -e '.[bench]'          # llm-analysis 0.2.2 (PyPI), a pure-Python LLM training analyser
    python benchmarks/bench_vs_llm_analysis.py [--repeats 5]

Both tools answer "how long is a training step of this dense model with this parallel
plan on these GPUs" for the same 24 configurations (Llama 3.1 8B/70B/405B and GPT-3 175B,
A100 and H100, tp/pp/dp, micro and global batch, sequence length, recomputation, bf16 or
8-bit, ZeRO stage). The model dimensions come from the twin's presets and are handed to
llm-analysis as its ``ModelConfig``, so both see the same model; the GPUs are
llm-analysis's own ``a100-sxm-80gb`` / ``h100-sxm-80gb`` configs and the twin's DGX-A100 /
DGX-H100 systems.

Timed, one process on one core (pinned where the OS allows), each the fastest of
``--repeats`` passes over all configurations, one call per configuration:

- llm-analysis: its fastest per-configuration entry point, ``LLMAnalysis(model, gpu,
  dtype, parallelism).training(...)`` with the config objects built once (what ``train()``
  does after its name look-ups), its logger silenced. ``training()`` still formats its
  log lines (``pprint.pformat`` of every config) whether or not they are shown; a second
  figure has that ``print_config`` stubbed out, to show the analysis alone;
- the twin: each function of :data:`TWIN_TIMINGS`, given the list of scenario mappings:
  the public ``Engine.evaluate(mapping)`` one by one (parse, validate, evaluate, the full
  ``Estimate``); the batch API ``Engine.evaluate_many`` and the sweep engine on
  ``BATCH_COPIES`` copies of the list (a batch pays a fixed cost per call, so it is timed
  at a realistic batch size and reported per evaluation). All three must give the same
  step times.

Repeating 24 configurations lets the twin's value caches (presets, parsed scenarios,
hierarchies, collective costs) answer most of every pass after the first, while
llm-analysis recomputes each call. So the same figures are then taken on
``DISTINCT_COPIES`` x 24 *distinct* configurations (:func:`distinct_configs`: each
configuration's global batch grown by one micro-batch per data-parallel rank at a time,
a batch-size sweep), both tools on the same list: the twin's first pass over them is on
scenarios it has never seen; its best pass is warm.

Prints evaluations/s for each and the ratio twin/llm-analysis, then the step time each
tool predicts per configuration. Those are shown, not compared: llm-analysis runs at 100%
of the datasheet peak unless told otherwise (``FLOPS_EFFICIENCY = 1`` in its
``constant.py``) and has no fabric topology, overlap or pipeline-bubble model.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twin.engine import Engine

# llm-analysis's GPU configs and the twin systems built from the same GPU.
GPUS = {"A100": ("a100-sxm-80gb", "DGX-A100"), "H100": ("h100-sxm-80gb", "DGX-H100")}
# Recomputation: llm-analysis 0.2.2's ActivationRecomputation values (NONE 0, SELECTIVE 1 =
# Megatron's selective: QK^T, softmax, attention over V; FULL 2) for the twin's names.
RECOMPUTE = {"none": 0, "selective": 1, "full": 2}
# Optimizer sharding: llm-analysis's DeepSpeed ZeRO stage for the twin's names.
ZERO = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}
# Precision: llm-analysis dtype configs (weights, activations, embeddings bits). The twin's
# fp8 runs on the 8-bit peak, which llm-analysis's H100 config gives as 1,979 TFLOP/s
# (its peak_i8_TFLOPS), the same as the H100 SXM dense FP8 peak (NVIDIA H100 datasheet).
DTYPES = {"bf16": "w16a16e16", "fp8": "w8a8e16"}


@dataclass(frozen=True)
class Config:
    """One training configuration both tools can express."""

    model: str  # a twin model preset (dense)
    gpu: str  # a key of GPUS
    tp: int
    pp: int
    dp: int
    mbs: int
    gbs: int
    seq_len: int
    recompute: str = "selective"
    precision: str = "bf16"
    zero: str = "zero1"

    @property
    def gpus(self) -> int:
        """GPUs in the job."""
        return self.tp * self.pp * self.dp


CONFIGS: list[Config] = [
    # H100 (DGX H100 nodes)
    Config("llama3.1-8b", "H100", 1, 1, 8, 1, 128, 8192),
    Config("llama3.1-8b", "H100", 2, 1, 32, 2, 512, 4096, "none"),
    Config("llama3.1-8b", "H100", 1, 1, 64, 1, 512, 8192, "full", zero="zero2"),
    Config("llama3.1-8b", "H100", 4, 1, 16, 1, 256, 8192, precision="fp8"),
    Config("llama3.1-8b", "H100", 4, 1, 2, 4, 32, 2048, "none", zero="none"),
    Config("llama3.1-70b", "H100", 8, 4, 4, 1, 128, 8192),
    Config("llama3.1-70b", "H100", 4, 8, 8, 1, 512, 8192, "full"),
    Config("llama3.1-70b", "H100", 8, 2, 32, 1, 1024, 8192, precision="fp8"),
    Config("llama3.1-70b", "H100", 8, 8, 16, 2, 1024, 4096, "none"),
    Config("llama3.1-70b", "H100", 8, 2, 4, 1, 64, 2048, "full", zero="zero3"),
    Config("llama3.1-405b", "H100", 8, 16, 8, 1, 512, 8192, "full"),
    Config("llama3.1-405b", "H100", 8, 16, 64, 1, 2048, 8192, precision="fp8"),
    Config("llama3.1-405b", "H100", 8, 8, 32, 1, 1024, 4096, "full", zero="zero3"),
    Config("gpt3-175b", "H100", 8, 8, 16, 1, 1536, 2048),
    Config("gpt3-175b", "H100", 8, 16, 8, 2, 1024, 2048, "full", zero="none"),
    Config("gpt3-175b", "H100", 4, 8, 32, 1, 1024, 2048, precision="fp8"),
    Config("gpt3-175b", "H100", 8, 12, 16, 1, 1536, 2048),
    # A100 (DGX A100 nodes)
    Config("llama3.1-8b", "A100", 1, 1, 8, 1, 64, 4096),
    Config("llama3.1-8b", "A100", 2, 2, 16, 1, 256, 8192, "full"),
    Config("llama3.1-70b", "A100", 8, 4, 8, 1, 256, 4096, "full"),
    Config("llama3.1-70b", "A100", 8, 8, 8, 1, 512, 4096),
    Config("llama3.1-405b", "A100", 8, 16, 16, 1, 512, 4096, "full"),
    Config("gpt3-175b", "A100", 8, 16, 8, 1, 1536, 2048, "full"),
    Config("gpt3-175b", "A100", 8, 8, 16, 1, 1024, 2048),
]


# Distinct variants per configuration in the distinct-configuration figures (2,400 in all,
# the batch size of the repeated figures).
DISTINCT_COPIES = 100


def distinct_configs(configs: list[Config], copies: int = DISTINCT_COPIES) -> list[Config]:
    """``copies`` distinct variants of each configuration: the global batch grown by one
    micro-batch per data-parallel rank at a time (``gbs + k * mbs * dp``, k = 0 .. copies-1),
    so every variant is a valid plan both tools accept and no two are the same.
    """
    return [dataclasses.replace(c, gbs=c.gbs + k * c.mbs * c.dp) for c in configs for k in range(copies)]


def twin_mapping(c: Config) -> dict[str, Any]:
    """The twin's scenario mapping of ``c`` (what a client sends to ``Engine.evaluate``)."""
    return {"cluster": {"system": GPUS[c.gpu][1], "num_gpus": c.gpus},
            "model": {"preset": c.model, "seq_len": c.seq_len},
            "plan": {"tp": c.tp, "pp": c.pp, "mbs": c.mbs, "gbs": c.gbs, "recompute": c.recompute,
                     "precision": c.precision, "optimizer_sharding": c.zero}}


def model_dims(engine: Engine, name: str) -> dict[str, Any]:
    """The twin preset's transformer dimensions, as llm-analysis ``ModelConfig`` fields."""
    m = engine.scenario({"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": name,
                         "plan": {"gbs": 8}}).model
    ffn = m.ffn_size
    return {"name": name, "num_layers": m.layers, "n_head": m.heads, "hidden_dim": m.hidden,
            "vocab_size": m.vocab, "max_seq_len": m.seq_len, "num_key_value_heads": m.kv_head_count,
            # both given: llm-analysis asserts an integer ratio only when it derives one (3.5 here)
            "ffn_embed_dim": ffn, "expansion_ratio": ffn / m.hidden,
            "model_type": "llama" if m.gated_mlp else "gpt"}


# ------------------------------------------------------------------ the two tools
def llm_analysis_calls(engine: Engine, configs: list[Config]) -> list[Callable[[], dict[str, Any]]]:
    """One zero-argument call per configuration running llm-analysis's training analysis."""
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
    from llm_analysis.config import (
        ModelConfig,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
    )

    models = {name: ModelConfig(**model_dims(engine, name)) for name in {c.model for c in configs}}
    calls = []
    for c in configs:
        model, gpu = models[c.model], get_gpu_config_by_name(GPUS[c.gpu][0])
        dtype = get_dtype_config_by_name(DTYPES[c.precision])
        gated = engine.catalog.get("models", c.model, "model").get("gated_mlp", False)

        def call(c: Config = c, model: Any = model, gpu: Any = gpu, dtype: Any = dtype, gated: bool = gated,
                 ) -> dict[str, Any]:
            par = ParallelismConfig(tp_size=c.tp, pp_size=c.pp, dp_size=c.dp, sp_size=c.tp)
            return LLMAnalysis(model, gpu, dtype, par).training(  # type: ignore[no-any-return]
                batch_size_per_gpu=c.mbs, global_batch_size=c.gbs, seq_len=c.seq_len,
                activation_recomputation=ActivationRecomputation(RECOMPUTE[c.recompute]),
                ds_zero=DSZeRO(ZERO[c.zero]), mlp_gated_linear_units=gated, flash_attn=True)

        calls.append(call)
    return calls


def twin_one_by_one(engine: Engine, mappings: list[dict[str, Any]]) -> list[float]:
    """The public API, one call per configuration: ``Engine.evaluate(mapping)``."""
    return [engine.evaluate(m).step_time_s for m in mappings]


# How many copies of the configuration list one batch call gets: a batch API pays a fixed
# cost per call (numpy's per-operation overhead), so it is timed on a batch of a realistic
# size (2,400 evaluations) and reported per evaluation, like the one-by-one calls.
BATCH_COPIES = 100


def twin_batch(engine: Engine, mappings: list[dict[str, Any]]) -> list[float]:
    """The batch API: ``Engine.evaluate_many(mappings)`` on ``BATCH_COPIES`` copies of the list."""
    res = engine.evaluate_many(mappings * BATCH_COPIES)
    return [float(t) for t in res.columns["step_time_s"][:len(mappings)]]


_SCENARIOS: dict[int, list[Any]] = {}


def twin_batch_scenarios(engine: Engine, mappings: list[dict[str, Any]]) -> list[float]:
    """The batch API on scenarios built once (as llm-analysis's config objects are):
    ``Engine.evaluate_many(scenarios)`` on ``BATCH_COPIES`` copies of the list.
    """
    scns = _SCENARIOS.get(id(mappings))
    if scns is None:
        scns = _SCENARIOS[id(mappings)] = [engine.scenario(m) for m in mappings] * BATCH_COPIES
    res = engine.evaluate_many(scns)
    return [float(t) for t in res.columns["step_time_s"][:len(mappings)]]


def twin_sweep(engine: Engine, mappings: list[dict[str, Any]]) -> list[float]:
    """The sweep engine's columnar path: a zip-mode sweep whose points are the configurations
    (a sweep counts a plan that does not fit in memory as infeasible: NaN here).
    """
    from twin.sweep.runner import run_sweep

    pts = mappings * BATCH_COPIES
    spec = {"name": "llm-analysis-configs", "mode": "zip", "keep_rows": True,
            "base": {"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": "llama3.1-8b", "plan": {"gbs": 8}},
            "axes": [{"path": section, "values": [p[section] for p in pts]}
                     for section in ("cluster", "model", "plan")]}
    result = run_sweep(spec, engine=engine, executor="inline")
    rows = result.rows
    assert rows is not None
    order = rows["point_id"].argsort()
    return [float(t) for t in rows["step_time_s"][order][:len(mappings)]]


# Twin timings, each a function of (engine, list of mappings) -> step times in order, and
# how many evaluations one call makes (per configuration).
TWIN_TIMINGS: dict[str, tuple[Callable[[Engine, list[dict[str, Any]]], list[float]], int]] = {
    "Engine.evaluate(mapping), one by one": (twin_one_by_one, 1),
    f"Engine.evaluate_many(mappings), {BATCH_COPIES}x": (twin_batch, BATCH_COPIES),
    f"Engine.evaluate_many(scenarios), {BATCH_COPIES}x": (twin_batch_scenarios, BATCH_COPIES),
    f"sweep engine (zip spec), {BATCH_COPIES}x": (twin_sweep, BATCH_COPIES),
}


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The fastest of ``repeats`` runs of ``run()``, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def distinct_figures(engine: Engine, repeats: int) -> None:
    """Both tools on the same :func:`distinct_configs` list: llm-analysis, the twin one by one
    and ``evaluate_many`` on the whole list, each with the same step times asserted.
    """
    configs = distinct_configs(CONFIGS)
    n = len(configs)
    mappings = [twin_mapping(c) for c in configs]
    calls = llm_analysis_calls(engine, configs)
    print(f"\n{n:,} distinct configurations ({DISTINCT_COPIES} batch sizes of each), evaluations/s")
    la_rate = n / best_seconds(lambda: [call() for call in calls], repeats)
    print(f"  llm-analysis 0.2.2, LLMAnalysis(...).training(...) : {la_rate:>9,.0f}")
    twin_answers: list[float] = []
    timings: dict[str, Callable[[], list[float]]] = {
        "Engine.evaluate(mapping), one by one": lambda: twin_one_by_one(engine, mappings),
        "Engine.evaluate_many(mappings)": lambda: [float(t) for t in engine.evaluate_many(mappings)
                                                   .columns["step_time_s"]],
    }
    for label, timing in timings.items():
        t0 = time.perf_counter()
        answers = timing()  # the first pass: every scenario new to this engine
        first = n / (time.perf_counter() - t0)
        if twin_answers:
            assert answers == twin_answers, f"{label} disagrees with the one-by-one answers"
        else:
            twin_answers = answers
        rate = n / best_seconds(timing, repeats)
        print(f"  twin, {label:<45}: {rate:>9,.0f}   (first pass {first:,.0f}/s, "
              f"{first / la_rate:.2f}x)   twin/llm-analysis {rate / la_rate:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    try:
        import llm_analysis.analysis
        from llm_analysis.logger import logger as llm_logger
    except ImportError:
        print("llm-analysis is not installed: pip install -e '.[bench]' (or pip install 'llm-analysis>=0.2.2')",
              file=sys.stderr)
        return 2
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    llm_logger.setLevel(logging.CRITICAL + 1)  # its own logger (named "__name__"), silenced
    engine = Engine(autoload=False)
    mappings = [twin_mapping(c) for c in CONFIGS]
    calls = llm_analysis_calls(engine, CONFIGS)
    n = len(CONFIGS)
    print(f"{n} training configurations, evaluations/s (fastest of {args.repeats} passes, one core)")

    la_answers = [call() for call in calls]
    la_rate = n / best_seconds(lambda: [call() for call in calls], args.repeats)
    print(f"  llm-analysis 0.2.2, LLMAnalysis(...).training(...) : {la_rate:>9,.0f}")
    shipped = llm_analysis.analysis.LLMAnalysis.print_config
    try:
        llm_analysis.analysis.LLMAnalysis.print_config = lambda self, name="": None  # type: ignore[method-assign]
        bare = n / best_seconds(lambda: [call() for call in calls], args.repeats)
    finally:
        llm_analysis.analysis.LLMAnalysis.print_config = shipped  # type: ignore[method-assign]
    print(f"  llm-analysis, without its eager config pformat      : {bare:>9,.0f}")
    twin_answers: list[float] = []
    for label, (timing, copies) in TWIN_TIMINGS.items():
        t0 = time.perf_counter()
        answers = timing(engine, mappings)
        cold = n * copies / (time.perf_counter() - t0)
        if twin_answers:
            assert all(a == b for a, b in zip(answers, twin_answers, strict=True) if a == a), \
                f"{label} disagrees with the one-by-one answers"
        else:
            twin_answers = answers
        rate = n * copies / best_seconds(lambda timing=timing: timing(engine, mappings), args.repeats)
        print(f"  twin, {label:<45}: {rate:>9,.0f}   (first pass {cold:,.0f}/s)   "
              f"twin/llm-analysis {rate / la_rate:.2f} ({rate / bare:.2f} vs the stubbed figure)")

    distinct_figures(engine, args.repeats)

    print("\nstep time per configuration, s (twin | llm-analysis latency_per_iter)")
    for c, t, la in zip(CONFIGS, twin_answers, la_answers, strict=True):
        print(f"  {c.model:14s} {c.gpu} {c.gpus:5d} GPUs tp{c.tp} pp{c.pp} dp{c.dp} mbs{c.mbs} gbs{c.gbs:5d} "
              f"seq{c.seq_len:5d} {c.recompute:9s} {c.precision} {c.zero:5s}: {t:8.3f} | "
              f"{la['latency_per_iter']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
