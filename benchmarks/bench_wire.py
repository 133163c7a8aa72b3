"""Server CPU of one distinct Predict, in process: request bytes -> scenario -> estimate ->
PredictResponse -> bytes, through ``TwinServicer.Predict`` (no gRPC, no sockets).

    python benchmarks/bench_wire.py                 # 4,000 distinct requests, 3 rounds
    python benchmarks/bench_wire.py --requests 8000 --rounds 5

Every request differs by name (Llama 3.1 70B on 1,024 H100s, the scenario of
benchmarks/bench_server.py), so the answer cache misses and every call does the full work.
Prints process CPU time per call (``time.process_time``, not inflated by other work sharing
the cores the way wall time is), the median over rounds, and the same split by stage
(decode + scenario, evaluate, wire message, serialize; approximate: a garbage collection
is charged to whichever stage sets it off, so the stages can add up to more than the whole
call). gRPC's own cost per call comes on
top (benchmarks/bench_server.py measures both together).
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
from twin.server.config import ServerConfig  # noqa: E402
from twin.server.context import ServerContext  # noqa: E402
from twin.server.services import TwinServicer  # noqa: E402
from twin.wire import convert  # noqa: E402

SCENARIO = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
            "plan": {"tp": 4, "pp": 4, "vp": 5, "gbs": 1024}}


def requests(n: int, tag: str) -> list[bytes]:
    """``n`` serialized PredictRequests, each a different name (a cache miss, the same work)."""
    return [twin_service_pb2.PredictRequest(scenario=convert.scenario_from_mapping(
        {**SCENARIO, "name": f"{tag}-{i}"})).SerializeToString() for i in range(n)]


def per_call_us(servicer: TwinServicer, bodies: list[bytes]) -> float:
    """Process CPU per call, microseconds, as gRPC would run it (parse, handle, serialize)."""
    parse = twin_service_pb2.PredictRequest.FromString
    start = time.process_time()
    for body in bodies:
        servicer.Predict(parse(body), None).SerializeToString()  # type: ignore[arg-type]
    return (time.process_time() - start) / len(bodies) * 1e6


def _response(est: Any) -> twin_service_pb2.PredictResponse:
    """The PredictResponse as the servicer builds it (in place where this checkout can: A/B with older ones)."""
    if "out" not in inspect.signature(convert.estimate_to_message).parameters:
        return twin_service_pb2.PredictResponse(estimate=convert.estimate_to_message(est))
    response = twin_service_pb2.PredictResponse()
    convert.estimate_to_message(est, out=response.estimate)
    return response


def stages_us(engine: Engine, bodies: list[bytes]) -> dict[str, float]:
    """The same work split by stage, microseconds per call."""
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
    return {k: v / len(bodies) * 1e6 for k, v in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engine = Engine(autoload=False)
    with tempfile.TemporaryDirectory() as state:
        ctx = ServerContext(engine=engine, config=ServerConfig(port=0, state_dir=state, plugins_autoload=False))
        servicer = TwinServicer(ctx)
        per_call_us(servicer, requests(500, "warm"))
        rounds = [per_call_us(servicer, requests(args.requests, f"r{r}")) for r in range(args.rounds)]
    print(f"Predict, distinct requests, in process: {statistics.median(rounds):.1f} us CPU per call "
          f"(median of {args.rounds} rounds of {args.requests}: {', '.join(f'{r:.1f}' for r in rounds)})")
    split = stages_us(engine, requests(args.requests, "stages"))
    print("  by stage (us per call): " + ", ".join(f"{k} {v:.1f}" for k, v in split.items()))


if __name__ == "__main__":
    main()
