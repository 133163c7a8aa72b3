"""Decoding under mixed concurrent load (issue 39, item 1).

``twin serve`` died with SIGSEGV under mixed concurrent traffic (Export with every other
service, 12 threads), each time in the decoder's second parse of a request through a private
DescriptorPool. That parse is gone: a request is decoded once with opentelemetry-proto's classes.
Here one shared decoder serves 8 threads of seeded OTLP requests (known metric names, random
attribute layouts, wire-level merges of repeated messages, flipped bits) while 4 more threads
parse, build and drop other protobuf messages with the cyclic collector running often; every
request must decode exactly as it does alone, and the process must live. (The crash itself did
not reproduce on this 2-core machine in 480,000 requests of the same mix over 16 minutes,
including 170,000 with the collector at threshold 10; ``benchmarks/fuzz_server.py`` is the
long run against a live server.)
"""

from __future__ import annotations

import gc
import random
import threading
import time

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tests.server import fuzzcases as fz
from twin.engine import Engine
from twin.telemetry.decode import Decoder
from twin.telemetry.mapping import MetricCatalog

DECODERS = 8
OTHERS = 4
REQUESTS_PER_THREAD = 150
ATTRIBUTE_KEYS = ("gpu", "uuid", "device", "job", "host.name", "link", "port", "instance", "Hostname", "x")


def _request(rng: random.Random, names: list[str]) -> bytes:
    """One seeded request's wire bytes (possibly not a valid request)."""
    req = ExportMetricsServiceRequest()
    for _ in range(rng.randrange(1, 3)):
        rm = req.resource_metrics.add()
        rm.resource.attributes.add(key="host.name").value.string_value = rng.choice(["n1", "n2", "n3"])
        for _ in range(rng.randrange(1, 3)):
            sm = rm.scope_metrics.add()
            for _ in range(rng.randrange(1, 5)):
                m = sm.metrics.add(name=rng.choice(names))
                kind = rng.choice(["gauge", "sum"])
                if kind == "sum":
                    m.sum.aggregation_temporality = rng.choice([1, 2])
                    m.sum.is_monotonic = rng.random() < 0.8
                dps = getattr(m, kind).data_points
                for _ in range(rng.randrange(0, 20)):
                    dp = dps.add(time_unix_nano=time.time_ns() - rng.randrange(10**9), as_double=rng.random() * 100)
                    for key in rng.sample(ATTRIBUTE_KEYS, rng.randrange(0, 5)):
                        value = dp.attributes.add(key=key).value
                        if rng.random() < 0.7:
                            value.string_value = str(rng.randrange(8))
                        else:
                            value.int_value = rng.randrange(8)
    raw = req.SerializeToString()
    if rng.random() < 0.3:  # a second message on the wire merges into the first (repeated fields append)
        extra = metrics_pb2.Metric(name=rng.choice(names))
        extra.gauge.data_points.add(time_unix_nano=1, as_double=1.0)
        raw += ExportMetricsServiceRequest(resource_metrics=[{"scope_metrics": [{"metrics": [extra]}]}]) \
            .SerializeToString()
    if rng.random() < 0.3:
        flipped = bytearray(raw)
        for _ in range(rng.randrange(1, 4)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        raw = bytes(flipped)
    return raw


def _outcome(decoder: Decoder, raw: bytes) -> object:
    """What decoding ``raw`` comes to: the points and refusals, or why it does not parse."""
    try:
        request = ExportMetricsServiceRequest.FromString(raw)
    except Exception as err:  # a DecodeError is an answer here
        return type(err).__name__
    out = decoder.decode(request)
    return ([(b.delta, [s.text for s in b.sids], b.starts, b.times, b.values) for b in out.points],
            out.count, out.total, out.rejected)


def test_one_decoder_under_mixed_concurrent_load_decodes_each_request_as_alone():
    catalog = MetricCatalog.from_plugins(Engine(autoload=False).pm)
    names = [n.replace("{link}", "3") for m in catalog.mappings for n in m.names] + ["not_a_mapped_metric"]
    work = {seed: [_request(random.Random(seed * 1000 + i), names) for i in range(REQUESTS_PER_THREAD)]
            for seed in range(DECODERS)}
    alone = {seed: [_outcome(Decoder(catalog), raw) for raw in reqs] for seed, reqs in work.items()}
    shared = Decoder(catalog, memo_limit=500)  # small: its memos are cleared while others use them
    together: dict[int, list[object]] = {}
    errors: list[BaseException] = []
    done = threading.Event()

    def decode(seed: int) -> None:
        try:
            together[seed] = [_outcome(shared, raw) for raw in work[seed]]
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    def churn(seed: int) -> None:
        rng, hostile = random.Random(seed), fz.Hostile(random.Random(seed))
        while not done.is_set():
            method = rng.choice([m for m in fz.METHODS if m.request is not None])
            try:
                method.request.FromString(hostile.payload(method)).SerializeToString()
            except Exception as err:  # what does not parse: kept in a cycle
                cycle: list[object] = [err]
                cycle.append(cycle)

    threshold = gc.get_threshold()
    gc.set_threshold(50, 5, 5)  # the cyclic collector runs often, on any thread
    try:
        threads = [threading.Thread(target=decode, args=(s,)) for s in range(DECODERS)]
        others = [threading.Thread(target=churn, args=(100 + s,)) for s in range(OTHERS)]
        for t in threads + others:
            t.start()
        for t in threads:
            t.join(120)
        done.set()
        for t in others:
            t.join(30)
    finally:
        gc.set_threshold(*threshold)
    assert not errors, errors[:3]
    assert together == alone
