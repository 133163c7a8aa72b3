"""Server CPU of one distinct Predict, in process: request bytes -> scenario -> estimate ->
PredictResponse -> bytes, through ``TwinServicer.Predict`` (no gRPC, no sockets).

    python benchmarks/bench_wire.py                 # 4,000 distinct requests, 3 rounds
    python benchmarks/bench_wire.py --requests 8000 --rounds 5
    python benchmarks/bench_wire.py --gap-ms 2 --requests 1000   # each call after 2 ms idle, as at 500/s

Every request differs by name (Llama 3.1 70B on 1,024 H100s, the scenario of
benchmarks/bench_server.py), so the answer cache misses and every call does the full work.
Prints process CPU time per call (``time.process_time``, not inflated by other work sharing
the cores the way wall time is), the median over rounds, and the same split by stage
(decode + scenario, evaluate, wire message, serialize; approximate: a garbage collection
is charged to whichever stage sets it off, so the stages can add up to more than the whole
call). gRPC's own cost per call comes on
top (benchmarks/bench_server.py measures both together).

``--gap-ms G`` sleeps G ms between calls (the sleep is not CPU time, so not counted): a server
at 500 requests/s is idle ~2 ms between calls while other threads and processes run, and each
call then starts with cold CPU caches; the same work then costs 2-3x what it costs back to
back. That, not the back-to-back figure, is what the server pays per call at moderate load.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twin.engine import Engine  # noqa: E402
from twin.rpc.v1 import scenario_pb2, twin_service_pb2  # noqa: E402
from twin.server import guard  # noqa: E402
from twin.server.context import ServerContext  # noqa: E402
from twin.server.server_config import ServerConfig  # noqa: E402
from twin.server.services import TwinServicer  # noqa: E402
from twin.wire import convert  # noqa: E402

SCENARIO = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
            "plan": {"tp": 4, "pp": 4, "vp": 5, "gbs": 1024}}


def requests(n: int, tag: str) -> list[bytes]:
    """``n`` serialized PredictRequests, each a different name (a cache miss, the same work)."""
    return [twin_service_pb2.PredictRequest(scenario=convert.scenario_from_mapping(
        {**SCENARIO, "name": f"{tag}-{i}"})).SerializeToString() for i in range(n)]


def per_call_us(servicer: TwinServicer, bodies: list[bytes], gap_s: float = 0.0) -> float:
    """Process CPU per call, microseconds, as gRPC would run it (parse, handle, serialize);
    ``gap_s``: idle time between calls (not counted).
    """
    parse = twin_service_pb2.PredictRequest.FromString
    spent = 0.0
    clock = time.process_time
    for body in bodies:
        start = clock()
        servicer.Predict(parse(body), None).SerializeToString()  # type: ignore[arg-type]
        spent += clock() - start
        if gap_s:
            time.sleep(gap_s)
    return spent / len(bodies) * 1e6


def _response(est: Any) -> twin_service_pb2.PredictResponse:
    """The PredictResponse as the servicer builds it (in place where this checkout can: A/B with older ones)."""
    if "out" not in inspect.signature(convert.estimate_to_message).parameters:
        return twin_service_pb2.PredictResponse(estimate=convert.estimate_to_message(est))
    response = twin_service_pb2.PredictResponse()
    convert.estimate_to_message(est, out=response.estimate)
    return response


def stages_us(engine: Engine, bodies: list[bytes], gap_s: float = 0.0) -> dict[str, float]:
    """The same work split by stage, microseconds per call (``gap_s``: idle between calls)."""
    spent = dict.fromkeys(("scenario", "evaluate", "message", "serialize"), 0.0)
    clock = time.process_time
    for body in bodies:
        t0 = clock()
        request = twin_service_pb2.PredictRequest.FromString(body)
        wire = request.scenario.SerializeToString(deterministic=True)
        scenario = engine.scenario(convert.scenario_to_mapping(scenario_pb2.Scenario.FromString(wire)))
        t1 = clock()
        est = guard.evaluate(engine, scenario, report=True)
        t2 = clock()
        response = _response(est)
        t3 = clock()
        response.SerializeToString()
        t4 = clock()
        for key, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[key] += dt
        if gap_s:
            time.sleep(gap_s)
    return {k: v / len(bodies) * 1e6 for k, v in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=0.0, help="idle milliseconds between calls (default 0)")
    args = parser.parse_args()
    gap_s = args.gap_ms / 1e3
    engine = Engine(autoload=False)
    with tempfile.TemporaryDirectory() as state:
        ctx = ServerContext(engine=engine, config=ServerConfig(port=0, state_dir=state, plugins_autoload=False))
        servicer = TwinServicer(ctx)
        per_call_us(servicer, requests(500, "warm"))
        rounds = [per_call_us(servicer, requests(args.requests, f"r{r}"), gap_s) for r in range(args.rounds)]
    after = f", {args.gap_ms:g} ms idle before each" if gap_s else ""
    print(f"Predict, distinct requests{after}, in process: {statistics.median(rounds):.1f} us CPU per call "
          f"(median of {args.rounds} rounds of {args.requests}: {', '.join(f'{r:.1f}' for r in rounds)})")
    split = stages_us(engine, requests(args.requests, "stages"), gap_s)
    print("  by stage (us per call): " + ", ".join(f"{k} {v:.1f}" for k, v in split.items()))


if __name__ == "__main__":
    main()
