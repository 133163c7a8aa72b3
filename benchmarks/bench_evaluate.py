"""Evaluations per second of the performance model (issue: >= 2,000/s on one core).

    python benchmarks/bench_evaluate.py [--seconds 3]

Prints the rate for one fixed scenario (Llama 3.1 405B on 16,384 H100s over RoCE) and for
a batch of varied scenarios (models x systems x plans), each a full evaluation: hierarchy,
compute, every strategy's communication, schedule, memory. Single process, single thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time

from twin.core.errors import TwinError
from twin.engine import Engine


def varied(engine: Engine) -> list:
    out = []
    base = {
        "llama3.1-405b": ("Meta-RoCE-H100", 16384, dict(tp=8, pp=16, vp=7, gbs=2048, optimizer_sharding="fsdp",
                                                           fsdp_reshard_after_forward=False)),
        "llama3.1-70b": ("DGX-H100", 1024, dict(tp=4, pp=4, vp=5, gbs=1024)),
        "gpt3-175b": ("DGX-A100", 1024, dict(tp=8, pp=8, gbs=1536, recompute="selective")),
        "mixtral-8x7b": ("DGX-H100", 256, dict(tp=2, pp=1, ep=8, gbs=512)),
        "deepseek-v3": ("GB200-NVL72", 576, dict(tp=1, pp=9, ep=64, gbs=4608, precision="fp8")),
        "nemotron4-340b": ("GB200-NVL72", 512, dict(tp=8, pp=4, vp=12, gbs=256)),
    }
    for model, (system, n, plan) in base.items():
        for mbs, rc in itertools.product((1, 2), ("none", "selective", "full")):
            data = {"cluster": {"system": system, "num_gpus": n}, "model": model,
                    "plan": {**plan, "mbs": mbs, "recompute": rc}}
            try:
                out.append(engine.scenario(data))
            except TwinError:
                continue
    return out


def rate(engine: Engine, scenarios: list, seconds: float) -> float:
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for s in scenarios:
            engine.model.evaluate(s, validate=False, report=False)
            n += 1
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    engine = Engine(autoload=False)
    one = engine.scenario("examples/llama3-405b-16k-roce.yaml")
    batch = varied(engine)
    # Cold: distinct GEMM shapes are cached after first use, so measure both.
    print(f"one scenario (405B on 16,384 GPUs): {rate(engine, [one], args.seconds):,.0f} evaluations/s")
    print(f"varied batch ({len(batch)} scenarios):   {rate(engine, batch, args.seconds):,.0f} evaluations/s")
    cold = [dataclasses.replace(s, plan=dataclasses.replace(s.plan, gbs=s.plan.gbs * 2)) for s in batch]
    from twin.core.compute import gemm_time
    gemm_time.cache_clear()
    t0 = time.perf_counter()
    for s in cold:
        engine.model.evaluate(s, validate=False, report=False)
    rate_cold = len(cold) / (time.perf_counter() - t0)
    print(f"cold (empty GEMM cache, {len(cold)} scenarios): {rate_cold:,.0f} evaluations/s")


if __name__ == "__main__":
    main()
