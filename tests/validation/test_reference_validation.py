"""The twin against published measurements (validation/reference, copied from the
reference set). These thresholds are the acceptance bar of the core; a model change that
breaks them must be justified, not the threshold moved."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import REFERENCE
from twin.core.errors import SpecError
from twin.reference import validate_file


@pytest.fixture(scope="module")
def training(engine):
    return validate_file(engine, REFERENCE / "training_runs.yaml")


def _held_out() -> tuple[str, ...]:
    from tests.conftest import validation_script

    return validation_script("calibrate").HELD_OUT


def _quantiles(errs: list[float]) -> tuple[float, float]:
    """Median and p90, interpolated as twin validate's summary does."""
    import numpy as np

    median, p90 = np.percentile(errs, [50, 90])
    return float(median), float(p90)


def test_training_runs_step_time_error(training):
    """The bar over the runs the constants are fitted on (every family but the held-out ones)."""
    held = _held_out()
    median, p90 = _quantiles([abs(c.error_pct) for c in training.cases if c.family not in held])
    # 2026-12-04: median 4.9%, p90 15.0% over 149 runs (DualPipe's end rank averaging its two
    # stages); 2026-12-01: 4.9% / 15.8% (before issue 10's mechanisms and the
    # runs' stated recomputation: 5.3% / 21.2% over 146; docs/fidelity.md).
    assert median <= 6.0
    assert p90 <= 18.0


def test_the_shipped_interval_table_is_of_the_model_of_the_day(training):
    """The prediction intervals are the model's own held-out errors: a model change that moves
    its errors must have the table made again (``python validation/intervals.py --write``)."""
    from twin.presets import interval_table

    shipped = interval_table()["in_sample"]
    now = training.summary()
    assert (now["n"], now["median_abs_error_pct"], now["p90_abs_error_pct"]) == pytest.approx(
        (shipped["n"], shipped["median_abs_error_pct"], shipped["p90_abs_error_pct"]), abs=1e-4), \
        "the model moved: run python validation/intervals.py --write"


def test_held_out_runs_do_not_regress(training):
    """The Model Zoo's runs, in no fit (validation/calibrate.py HELD_OUT): what the twin does on
    runs it has not seen. 2026-12-04: 11 runs, median 19.0%, p90 47.5% (docs/fidelity.md,
    "Known weaknesses"); 2026-12-06: 12 runs (the pp 32 x vp 3 run, its embedding and loss counted
    as pipeline layers, now read), median 10.0%, p90 43.4%. A guard against getting worse, not a
    bar of quality."""
    held = _held_out()
    errs = [abs(c.error_pct) for c in training.cases if c.family in held]
    assert len(errs) == 12
    median, p90 = _quantiles(errs)
    assert median <= 21.0
    assert p90 <= 50.0


def test_pretraining_cases_error(training, engine):
    import yaml

    kinds = {c["id"]: c["kind"] for c in yaml.safe_load((REFERENCE / "training_runs.yaml").read_text())["cases"]}
    errs = sorted(abs(c.error_pct) for c in training.cases if kinds[c.id] == "pretrain")
    median = errs[len(errs) // 2]
    assert median <= 6.0


def test_no_case_with_a_step_time_and_complete_plan_is_skipped(training):
    # Only the runs the file itself lists (plans the twin cannot be told) are skipped.
    assert len(training.skipped) == 1
    assert all(s["reason"].startswith("skipped by the reference file") for s in training.skipped)
    assert len(training.cases) == 172


def test_json_shape(training):
    d = training.to_dict()
    row = d["cases"][0]
    assert {"id", "predicted_step_time_s", "measured_step_time_s", "error_pct"} <= set(row)
    assert {"n", "median_abs_error_pct", "p90_abs_error_pct", "skipped"} <= set(d["summary"])


@pytest.fixture(scope="module")
def collectives(engine):
    return validate_file(engine, REFERENCE / "collectives.yaml")


# The cases the collective constants were sourced from (docs/fidelity.md): NVIDIA's NCCL
# threads, the DGX Cloud recipe and DeepEP's tables. The rest of the set (operators' and
# papers' multi-node runs, added for issue 11) is prediction.
_SOURCED_FROM = ("NVIDIA/nccl", "NVIDIA/dgxc-benchmarking", "deepseek-ai/DeepEP")


def test_collectives_bus_bandwidth_error(collectives):
    import yaml

    sources = {c["id"]: c["source"] for c in yaml.safe_load((REFERENCE / "collectives.yaml").read_text())["cases"]}
    sourced = sorted(abs(c.error_pct) for c in collectives.cases if any(k in sources[c.id] for k in _SOURCED_FROM))
    assert len(sourced) == 36
    assert sourced[len(sourced) // 2] <= 15.0
    d = collectives.to_dict()
    assert {"predicted_busbw_GBps", "measured_busbw_GBps", "nodes"} <= set(d["cases"][0])


# Issue 11's second batch of published multi-node runs (s23: docs/fidelity.md, "Sources
# considered for issue 11's data"); the bars below keep the earlier 72 cases' own figures.
_S23_SOURCES = ("stas00/ml-engineering", "ZiyanIshani/vpbenchmarking", "oracle-quickstart/")


def _assert_bar(s: dict, *, n: int, median: float, p90: float, multi_n: int, multi_median: float) -> None:
    """A summary's case counts are exactly these and its errors no worse than these bars."""
    assert (s["n"], s["multi_node"]["n"]) == (n, multi_n)
    assert s["median_abs_error_pct"] <= median
    assert s["p90_abs_error_pct"] <= p90
    assert s["multi_node"]["median_abs_error_pct"] <= multi_median


def test_collectives_whole_set_does_not_regress(collectives):
    """The first 72 cases (the sources before s23; achieved busbw with latency) read median
    8.9%, p90 52.4%; multi-node (44 cases) median 19.7% (docs/fidelity.md, "Collectives":
    s23 added NVLS pipelining, NVLS-tree's double-binary-tree traffic, CollNet Direct's model,
    the hosts' CPU and NCCL's p2p schedule for the all-to-all; 11.1% / 25.2% before). Issue 11
    targets median <= 10% and multi-node <= 15%; these bars only stop a regression."""
    import yaml

    sources = {c["id"]: c["source"] for c in yaml.safe_load((REFERENCE / "collectives.yaml").read_text())["cases"]}
    first = dataclasses.replace(collectives, cases=[c for c in collectives.cases
                                                    if not sources[c.id].startswith(_S23_SOURCES)])
    _assert_bar(first.summary(), n=72, median=9.5, p90=55.0, multi_n=44, multi_median=21.0)


def test_collectives_with_the_s23_runs_do_not_regress(collectives):
    """With the 26 cases of s23 (4 nodes of p6-b200 on EFA, 4 nodes of H100 on InfiniBand,
    GB300 and GB200 NVL72 on RoCE across up to 3 racks) the whole set reads median 9.7%,
    p90 56.1%, multi-node (64 cases) median 13.2% (14.9% / 69.7% / 25.5% before s23's
    mechanisms; 9.9% / 56.2% / 15.8% before NCCL's p2p schedule for the all-to-all): both of
    issue 11's targets (10% / 15%) met, and held here as the bars."""
    _assert_bar(collectives.summary(), n=98, median=10.0, p90=60.0, multi_n=64, multi_median=15.0)


def test_published_nccl_tests_rows_are_self_consistent():
    """Every row that carries nccl-tests' three figures (time, algbw, busbw) obeys them as
    nccl-tests prints them (doc/PERFORMANCE.md: algbw = bytes / time, busbw = algbw x the
    op's bus factor for the case's rank count), to 2% (the printed rounding): a transcription
    slip or a rank count the printed figures contradict is caught here, not in a median."""
    import yaml

    from twin.core.collectives import bus_factor
    from twin.reference import collective_op

    bad = []
    for c in yaml.safe_load((REFERENCE / "collectives.yaml").read_text())["cases"]:
        op, n = collective_op(c["op"]), c["cluster"].get("num_gpus")
        if op.startswith("ep_") or not n:
            continue
        for p in c.get("points") or []:
            size, t, alg, bus = (p.get(k) for k in ("bytes", "time_us", "algbw_GBps", "busbw_GBps"))
            if None in (size, t, alg, bus) or alg < 1.0 or bus < 1.0:  # below 1 GB/s: rounding to 0.01
                continue
            if abs(size / (t * 1e-6) / 1e9 - alg) > 0.02 * alg or abs(alg * bus_factor(op, n) - bus) > 0.02 * bus:
                bad.append((c["id"], size))
    assert bad == []


def test_every_collectives_case_is_read(collectives):
    """Only the cases the file itself lists as skipped are skipped: every other one is read."""
    unread = [s for s in collectives.skipped if not s["reason"].startswith("skipped by the reference file")]
    assert unread == []


def test_malformed_reference_file_is_an_error(engine, tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_text("schema: something-else\ncases: []\n")
    with pytest.raises(SpecError):
        validate_file(engine, bad)
    bad.write_text("just a string")
    with pytest.raises(SpecError):
        validate_file(engine, bad)


def test_unmodellable_case_is_listed_as_skipped(engine, tmp_path):
    f = tmp_path / "cases.yaml"
    f.write_text("""
schema: twin-reference-cases/v1
cases:
  - id: no-step
    family: f
    kind: pretrain
    cluster: {gpu: H100-SXM-80GB, num_gpus: 8, gpus_per_node: 8}
    model: {layers: 2, hidden: 256, heads: 4, vocab: 1000, seq_len: 512}
    plan: {tp: 1, pp: 1, dp: 8, gbs: 8}
    measured: {step_time_s: null}
  - id: unknown-gpu
    family: f
    kind: pretrain
    cluster: {gpu: TPU-v9, num_gpus: 8, gpus_per_node: 8}
    model: {layers: 2, hidden: 256, heads: 4, vocab: 1000, seq_len: 512}
    plan: {tp: 1, pp: 1, dp: 8, gbs: 8}
    measured: {step_time_s: 1.0}
""")
    report = validate_file(engine, f)
    reasons = {s["id"]: s["reason"] for s in report.skipped}
    assert set(reasons) == {"no-step", "unknown-gpu"}
    assert "TPU-v9" in reasons["unknown-gpu"]


def test_a_published_throughput_stands_for_the_step_time(engine, tmp_path):
    """A run published as tokens/s (per GPU or in all) and no step time is scored on the step
    time it implies, gbs x seq_len / tokens per second; the same run with that step time gets the
    same prediction and error. A model-FLOPs figure alone is not turned into a step time."""
    case = """
  - id: {cid}
    family: f
    kind: pretrain
    cluster: {{gpu: H100-SXM-80GB, num_gpus: 16, gpus_per_node: 8}}
    model: {{layers: 4, hidden: 1024, heads: 8, vocab: 32000, seq_len: 2048}}
    plan: {{tp: 1, pp: 1, dp: 16, mbs: 1, gbs: 64}}
    measured: {measured}
"""
    runs = {"per-gpu": "{tokens_per_s_per_gpu: 4096.0}", "total": "{tokens_per_s_total: 65536.0}",
            "step": "{step_time_s: 2.0}", "tflops-only": "{model_tflops_per_gpu: 400.0}",
            "not-a-mapping": "[2.0]", "nan": "{tokens_per_s_per_gpu: .nan}"}
    f = tmp_path / "cases.yaml"
    f.write_text("schema: twin-reference-cases/v1\ncases:" + "".join(
        case.format(cid=cid, measured=m) for cid, m in runs.items()))
    report = validate_file(engine, f)
    got = {c.id: c for c in report.cases}
    assert set(got) == {"per-gpu", "total", "step"}
    # 64 x 2048 tokens / (4096 tokens/s/GPU x 16 GPUs) = 2.0 s
    for cid in ("per-gpu", "total"):
        assert got[cid].measured == pytest.approx(2.0, rel=1e-12)
        assert got[cid].predicted == got["step"].predicted
        assert any("tokens_per_s" in n for n in got[cid].notes)
    reasons = {s["id"]: s["reason"] for s in report.skipped}
    assert list(reasons) == ["tflops-only", "not-a-mapping", "nan"]
    assert "tokens/s" in reasons["tflops-only"] and "tokens/s" in reasons["not-a-mapping"]
    assert "measured.tokens_per_s_per_gpu" in reasons["nan"]  # stated, but not a number: named


def test_a_malformed_training_case_is_that_cases_error(engine):
    """Every malformed case is skipped naming its field (or saying what is malformed), the good
    one is still scored: a case that is not a mapping, a plan or model that is not one, a
    software stack of the wrong type, a degree that is not a whole number (1.5 is not made 1,
    "8" is not made 8), a missing batch, integers too large to use or even print."""
    from twin.reference import validate_training

    good = {"id": "ok", "family": "f", "kind": "pretrain",
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
            "model": {"layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 512},
            "plan": {"tp": 1, "pp": 1, "dp": 8, "gbs": 8}, "measured": {"step_time_s": 1.0}}
    bad = {"plan-text": {"plan": "tp8"}, "model-int": {"model": 5}, "software-int": {"software": 3},
           "tp-half": {"plan": {"tp": 1.5, "gbs": 8}}, "tp-text": {"plan": {"tp": "8", "gbs": 8}},
           "no-gbs": {"plan": {"tp": 1}}, "gbs-400-digits": {"plan": {"gbs": 10**400}},
           "gpus-5001-digits": {"cluster": {**good["cluster"], "num_gpus": 10**5000}},
           "step-400-digits": {"measured": {"step_time_s": 10**400}}}
    cases = [["not", "a", "mapping"], *({**good, "id": cid, **fields} for cid, fields in bad.items()), good]
    report = validate_training(engine, {"cases": cases, "skipped": [1, "run"]})  # listed skips that are not mappings
    assert [c.id for c in report.cases] == ["ok"]
    reasons = {s["id"]: s["reason"] for s in report.skipped}
    assert "must be a mapping" in reasons.pop("cases[0]")
    expected = {"plan-text": "plan:", "model-int": "model:", "software-int": "software:", "tp-half": "plan.tp",
                "tp-text": "plan.tp", "no-gbs": "plan.gbs", "gbs-400-digits": "plan.gbs",
                "gpus-5001-digits": "cluster.num_gpus", "step-400-digits": "measured.step_time_s"}
    assert set(reasons) == set(expected)
    for cid, field in expected.items():
        assert field in reasons[cid], (cid, reasons[cid])
        assert len(reasons[cid]) < 300  # a huge number is described, not echoed
    assert "whole number" in reasons["tp-half"] and "digits" in reasons["gpus-5001-digits"]


def test_reader_tolerates_spellings_and_bookkeeping_keys(engine, tmp_path):
    """Published runs arrive with framework spellings (bf16-mixed, fsdp2, uniform) and
    bookkeeping keys; the reader normalises or ignores them instead of skipping."""
    f = tmp_path / "cases.yaml"
    f.write_text("""
schema: twin-reference-cases/v1
cases:
  - id: spellings
    family: f
    kind: pretrain
    cluster: {gpu: H100-SXM-80GB, num_gpus: 16, gpus_per_node: 8,
              scale_up: {fabric: nvlink4, domain_gpus: 8},
              scale_out: {fabric: infiniband, gbps_per_gpu: 400, nics_per_node: 8}, notes: x}
    model: {name: m, layers: 16, hidden: 2048, ffn: 8192, heads: 16, kv_heads: 16, vocab: 32000, seq_len: 2048,
            arch_ref: x, params: 1.2e9, mla: null, moe: null}
    plan: {tp: 2, pp: 1, cp: 1, ep: 1, dp: 8, mbs: 1, gbs: 64, precision: bf16-mixed, recompute: uniform,
           optimizer_sharding: fsdp2, ga: 8, lbs: 1}
    measured: {step_time_s: 1.0}
""")
    report = validate_file(engine, f)
    assert report.skipped == []
    assert report.cases[0].plan["precision"] == "bf16"
    assert report.cases[0].plan["recompute"] == "full"


def test_memory_model_misses_are_listed_not_hidden(training, engine):
    """A published plan that ran but does not fit by the twin's count as read gets the fastest
    memory policy the case leaves open that makes it fit, named in its notes; one that fits
    under none is listed as a miss, predicted with the setting that needs the least memory."""
    summary = training.summary()
    misses, policies = summary["memory_misses"], summary["fit_policies_assumed"]
    assert all(any("memory-model miss" in n for n in c.notes) for c in training.cases if c.id in misses)
    # Only MaxText's TPU runs (their host offload and XLA's memory are not modelled) miss.
    assert misses and all(m.startswith("maxtext-tpu") for m in misses)
    # NeMo 24.07 Llama 3 8B: recompute unstated; as read (fp32 gradients, no recompute) it needs
    # 88 of 80 GiB; with a bf16 gradient buffer (NeMo's grad_sync_dtype: bf16) it fits.
    case = next(c for c in training.cases if c.id == "nemo2407-pretrain-LLAMA3-8B-8gpu")
    assert "bf16 gradient buffer" in policies[case.id] and case.plan["grad_reduce_dtype"] == "bf16"
    assert case.plan["recompute"] == "none"  # the cheapest: no recomputation added
    assert len(policies) >= 8


def test_a_stated_pipeline_schedule_is_read_and_fixes_vp(engine, tmp_path):
    """plan.schedule in a case (published spellings: DualPipe, ZB-V) is used as given, the
    interleaving depth it fixes is no longer the twin's to choose, and an unknown one makes
    the case skipped with the field named."""
    from twin.reference import training_scenario

    def case(cid: str, schedule: str) -> str:
        return f"""
  - id: {cid}
    family: f
    kind: pretrain
    cluster: {{gpu: H100-SXM-80GB, num_gpus: 32, gpus_per_node: 8}}
    model: {{name: m, layers: 16, hidden: 2048, ffn: 8192, heads: 16, kv_heads: 16, vocab: 32000, seq_len: 2048}}
    plan: {{tp: 2, pp: 4, dp: 4, gbs: 64, vp: null, schedule: {schedule}}}
    measured: {{step_time_s: 1.0}}"""
    f = tmp_path / "cases.yaml"
    f.write_text("schema: twin-reference-cases/v1\ncases:" + case("dual", "DualPipe") + case("zbv", "ZB-V")
                 + case("bad", "zigzag"))
    import yaml

    cases = yaml.safe_load(f.read_text())["cases"]
    scn, knobs, _ = training_scenario(engine, cases[0])
    assert scn.plan.schedule == "dualpipe" and knobs.vp == (1,)
    scn, knobs, _ = training_scenario(engine, cases[1])
    assert scn.plan.schedule == "zero_bubble_v" and knobs.vp == (2,)
    report = validate_file(engine, f)
    assert {c.id for c in report.cases} == {"dual", "zbv"}
    (skip,) = report.skipped
    assert skip["id"] == "bad" and "plan.schedule" in skip["reason"] and "zigzag" in skip["reason"]


def test_deepseek_v3_dualpipe_run_is_scored_with_its_schedule(training):
    """DeepSeek-V3's published run states its schedule (DualPipe) and its recomputation; with
    them it fits by the twin's count (no memory-model miss) and is scored against the step
    derived from 180K GPU hours per trillion tokens."""
    case = next(c for c in training.cases if c.id == "deepseek-v3-pretrain-h800-2048gpu")
    assert case.id not in training.summary()["memory_misses"]
    assert case.measured == pytest.approx(15360 * 4096 * 180_000 / 1e12 * 3600 / 2048, rel=1e-4)
    assert case.plan["pp"] == 16 and case.plan["ep"] == 64 and case.plan["vp"] == 1


def test_a_stated_recompute_layer_count_is_used_as_given(engine):
    """torchtitan's selective layer AC (every 2nd layer): plan.recompute_layers 16 of 32 is
    read, kept by the plan search, and recomputes half of what full recomputation does."""
    from twin.reference import best_plan, training_scenario

    case = {"id": "t", "family": "f", "kind": "pretrain",
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
            "model": {"name": "m", "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
                      "vocab": 128256, "seq_len": 8192, "gated_mlp": True},
            "plan": {"tp": 1, "pp": 1, "dp": 8, "mbs": 1, "gbs": 8, "recompute": "full", "recompute_layers": 16,
                     "precision": "bf16", "optimizer_sharding": "fsdp"},
            "measured": {"step_time_s": 1.0}}
    scn, knobs, _ = training_scenario(engine, case)
    chosen, _, _ = best_plan(engine, scn, knobs)
    assert chosen.plan.recompute_layers == 16
    half = engine.evaluate(chosen).breakdown.recompute_s
    every = engine.evaluate(dataclasses.replace(chosen, plan=dataclasses.replace(chosen.plan,
                                                                                        recompute_layers=None)))
    assert half == pytest.approx(every.breakdown.recompute_s / 2, rel=1e-6)


def test_a_stated_uneven_pipeline_layout_is_used_as_given(engine):
    """Megatron-Core's --decoder-first/last-pipeline-num-layers in a case (plan.pp_first_layers,
    plan.pp_last_layers) reach the plan; a layout that does not split evenly is an error
    naming the field, and the case is listed as skipped."""
    from twin.reference import training_scenario

    case = {"id": "u", "family": "f", "kind": "pretrain",
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 32, "gpus_per_node": 8},
            "model": {"name": "m", "layers": 30, "hidden": 2048, "ffn": 8192, "heads": 16, "kv_heads": 16,
                      "vocab": 32000, "seq_len": 2048},
            "plan": {"tp": 2, "pp": 4, "dp": 4, "gbs": 64, "pp_first_layers": 6, "pp_last_layers": 6},
            "measured": {"step_time_s": 1.0}}
    scn, _, _ = training_scenario(engine, case)
    assert (scn.plan.pp_first_layers, scn.plan.pp_last_layers) == (6, 6)
    report = validate_training_doc(engine, {**case, "plan": {**case["plan"], "pp_last_layers": 5}})
    (skip,) = report.skipped
    assert "pp_first_layers" in skip["reason"]


def validate_training_doc(engine, case):
    from twin.reference import validate_training

    return validate_training(engine, {"schema": "twin-reference-cases/v1", "cases": [case]})


def test_automodel_unstated_recompute_is_the_least_that_fits(engine):
    """NeMo AutoModel turns activation checkpointing on per model where memory needs it: an
    AutoModel run with no recompute stated gets the least that fits with 10% of HBM left free.
    Blanking the stated setting of the project's AutoModel runs, the rule gives back what their
    configs say on all 14 (GPT-OSS off; the Qwen2.5-32B LoRA runs, which would fit in 90-96% of
    HBM without, on); without the headroom only 12; another stack keeps its plain default even
    where that does not fit."""
    import copy

    import yaml

    from twin.reference import best_plan, training_scenario

    cases = yaml.safe_load((REFERENCE / "training_runs.yaml").read_text())["cases"]
    stated = [c for c in cases if c["id"].startswith("automodel-") and c["plan"].get("recompute") is not None]
    agree, chosen_by_id = 0, {}
    for case in stated:
        blank = copy.deepcopy(case)
        blank["plan"]["recompute"] = None
        scn, knobs, notes = training_scenario(engine, blank)
        assert any("least that fits" in n for n in notes)
        chosen, _, more = best_plan(engine, scn, knobs)
        assert not more                        # never a memory miss: it picks one that fits
        chosen_by_id[case["id"]] = chosen.plan.recompute
        agree += chosen.plan.recompute == case["plan"]["recompute"]
    assert len(stated) == 14 and agree == 14
    assert chosen_by_id["automodel-pretrain-GPT-OSS_20B-8gpu"] == "none"
    assert chosen_by_id["automodel-lora-Qwen2.5_32B-8gpu"] == "full"

    # The headroom is what tells the 32B LoRA run apart: with none it fits, in over 90% of HBM.
    import dataclasses

    blank = copy.deepcopy(next(c for c in stated if c["id"] == "automodel-lora-Qwen2.5_32B-8gpu"))
    blank["plan"]["recompute"] = None
    scn, knobs, _ = training_scenario(engine, blank)
    assert knobs.headroom == pytest.approx(0.10)
    chosen, _, _ = best_plan(engine, scn, dataclasses.replace(knobs, headroom=0.0))
    assert chosen.plan.recompute == "none"

    other = copy.deepcopy(next(c for c in stated if c["id"] == "automodel-pretrain-Llama3_70B-64gpu"))
    other["plan"]["recompute"] = None
    other["software"] = "megatron-core-te"
    scn, knobs, _ = training_scenario(engine, other)
    assert knobs.recompute == ("none",)


def _reference_case(case_id):
    """One case of this project's training runs, by id (a fresh parse: the caller may change it)."""
    import yaml

    cases = yaml.safe_load((REFERENCE / "training_runs.yaml").read_text())["cases"]
    return next(c for c in cases if c["id"] == case_id)


def _read_case(engine, case):
    """(the scenario the reader builds of ``case``, its step time with the twin's choices, the notes)."""
    from twin.reference import best_plan, training_scenario

    scn, knobs, notes = training_scenario(engine, case)
    return scn, best_plan(engine, scn, knobs)[1], notes


def test_automodel_moe_run_with_no_routing_stated_is_read_with_its_fake_gate(engine):
    """AutoModel's performance tables run MoE with the fake balanced gate: a case of that stack
    with no routing stated is read as contiguous, and costs what the stated one does; a stated
    routing, or another stack, is left as it is."""
    import copy

    stated = _reference_case("automodel-pretrain-Qwen3_MoE_30B-8gpu")
    assert stated["model"]["moe"]["routing"] == "contiguous"
    unstated = copy.deepcopy(stated)
    del unstated["model"]["moe"]["routing"]

    def step(case):
        scn, t, notes = _read_case(engine, case)
        return scn.model.moe.routing, t, notes

    routing, t_unstated, notes = step(unstated)
    assert routing == "contiguous" and any("model.moe.routing not published" in n for n in notes)
    assert t_unstated == step(stated)[1]
    random_stated = copy.deepcopy(stated)
    random_stated["model"]["moe"]["routing"] = "random"
    routing, t_random, _ = step(random_stated)
    assert routing == "random" and t_random != t_unstated
    other = copy.deepcopy(unstated)
    other["software"] = "megatron-core-te"
    assert step(other)[0] == "random"


def test_a_packed_dataset_the_case_names_is_read_as_sequence_packing(engine):
    """NeMo's fine-tuning tables say "SQuAD packed 4096": a case whose source says so and
    states no model.packed_doc_tokens is read with SQuAD's mean example (~210 tokens), which
    makes its attention cheaper; a stated value, or a text that does not say packed, is left."""
    import copy

    stated = _reference_case("nemo2407-lora-LLAMA2-13B-8gpu")
    assert stated["model"]["packed_doc_tokens"] == 210 and "SQuAD packed 4096" in stated["source"]
    unstated = copy.deepcopy(stated)
    del unstated["model"]["packed_doc_tokens"]

    def read(case):
        scn, t, notes = _read_case(engine, case)
        return scn.model.packed_doc_tokens, t, notes

    tokens, t, notes = read(unstated)
    assert tokens == 210 and any("SQuAD packed" in n for n in notes)
    assert t == read(stated)[1]
    plain = copy.deepcopy(unstated)
    plain["source"] = plain["source"].replace("SQuAD packed 4096", "SQuAD, not packed, 4096")
    plain["notes"] = ""  # this set's notes explain the stated packing
    tokens, t_plain, _ = read(plain)
    assert tokens is None and t_plain > t


def test_an_moe_run_naming_deepep_with_ep_1_is_read_expert_parallel(engine):
    """AutoModel's table prints EP as "-" for GPT-OSS, whose configs run DeepEP with ep_size the
    whole data-parallel group: a case with ep 1 whose text names DeepEP is read with the
    largest EP that divides dp and the experts, and costs what the stated EP does; without
    DeepEP in its text, ep 1 stays (all experts on every rank, gathered by FSDP: slower)."""
    import copy

    stated = _reference_case("automodel-pretrain-GPT-OSS_120B-64gpu")
    assert stated["plan"]["ep"] == 64 and "DeepEP" in stated["notes"]
    as_published = copy.deepcopy(stated)
    as_published["plan"]["ep"] = 1

    def read(case):
        scn, t, notes = _read_case(engine, case)
        return scn.plan.ep, t, notes

    ep, t, notes = read(as_published)
    assert ep == 64 and any("names DeepEP" in n for n in notes)
    assert t == read(stated)[1]
    odd = copy.deepcopy(as_published)
    odd["cluster"]["num_gpus"] = 48  # dp 48: the largest divisor of 48 that divides 128 experts
    odd["plan"]["dp"] = 48
    odd["plan"]["gbs"] = 480
    assert read(odd)[0] == 16
    plain = copy.deepcopy(as_published)
    plain["notes"] = plain["notes"].replace("DeepEP", "an all-to-all")
    ep, t_plain, notes = read(plain)
    assert ep == 1 and not any("DeepEP" in n for n in notes) and t_plain > t
