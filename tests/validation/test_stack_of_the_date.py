"""The software stack of a run's own date (issue 35, item 3; ``twin.reference.stack_defaults``): a
case's stack is read from what it states of its software, release and date, not from one name
field; an eager stack's kernels cost the host what the eager path costs.
"""

from __future__ import annotations

import pytest

from twin.core.scenario_io import resolve_software
from twin.engine import Engine
from twin.reference import case_software
from twin.reference.stack_defaults import run_year
from twin.reference.training_validation import validate_training


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(autoload=False)


@pytest.mark.parametrize(("case", "stack"), [
    # named in the notes, whatever the family says
    ({"family": "GPT scaling study", "notes": "trained with Megatron-DeepSpeed, fp16, eager"}, "megatron-deepspeed"),
    ({"family": "Some MoE table", "source": "NVIDIA-NeMo/Automodel docs"}, "nemo-automodel"),
    ({"family": "Llama runs", "notes": "torchtitan config llama3_8b.toml"}, "pytorch-fsdp2"),
    # FSDP2 alone in the notes is not a stack (Megatron-LM runs torch FSDP2 under its own kernels)
    ({"family": "Primus Megatron-LM runs", "notes": "--use-torch-fsdp2"}, "megatron-core-te"),
    # by date: the Megatron-LM code base before TE, Megatron-Core 2023-2024, TE 2.x / cuDNN 9 from 2025
    ({"family": "Megatron-LM README (2021)"}, "megatron-deepspeed"),
    ({"family": "NeMo 24.07 performance summary"}, "megatron-core-te"),
    ({"family": "NVIDIA DGX Cloud Benchmarking recipes v25.05"}, "megatron-core-te2"),
    ({"family": "Perf table", "source": "docs @abc, LLAMA3-8B - H100 (NeMo25.04.rc2)"}, "megatron-core-te2"),
    ({"family": "Perf table", "source": "Last Updated 2025-10-02"}, "megatron-core-te2"),
    ({"family": "Perf table", "notes": "container with Transformer Engine 2.4 and cuDNN 9.8"}, "megatron-core-te2"),
    ({"family": "Llama 3 405B pre-training (Meta)"}, "megatron-core-te"),
    # a stated software field wins
    ({"family": "Megatron-LM 2020", "software": "megatron-core-te"}, "megatron-core-te"),
])
def test_the_stack_is_read_from_the_case_s_software_release_and_date(case, stack):
    assert case_software(case) == stack


def test_the_run_year_is_the_latest_the_family_or_source_states():
    assert run_year({"family": "Korthikanti et al. 2022", "source": "arXiv 2205.05198"}) == 2022
    assert run_year({"family": "NeMo 24.07 summary", "source": "NeMo25.04 docs"}) == 2025
    assert run_year({"family": "GPT-3 175B", "source": "README"}) is None


def _case(**extra):
    base = {"id": "eager-fp16", "family": "Small GPT scaling", "kind": "pretrain",
            "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8,
                        "scale_up": {"fabric": "nvlink3", "domain_gpus": 8},
                        "scale_out": {"fabric": "infiniband", "gbps_per_gpu": 200, "nics_per_node": 8}},
            "model": {"name": "GPT 350M", "layers": 24, "hidden": 1024, "ffn": 4096, "heads": 16, "kv_heads": 16,
                      "vocab": 50257, "seq_len": 2048, "gated_mlp": False, "attention": "mha"},
            "plan": {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "vp": 1, "mbs": 4, "gbs": 256,
                     "recompute": "none", "precision": "fp16", "optimizer_sharding": "none"},
            "measured": {"step_time_s": 1.0}}
    return {**base, **extra}


def test_an_eager_fp16_megatron_deepspeed_run_stated_in_its_notes_is_priced_as_eager(engine):
    fused = validate_training(engine, {"cases": [_case()]}).cases[0].predicted
    eager = validate_training(engine, {"cases": [_case(notes="Megatron-DeepSpeed, fp16")]}).cases[0].predicted
    # unfused attention, TP collectives between the GEMMs, the gradient all-reduce after the
    # backward and eager host costs: slower than the fused stack the family alone gave
    assert eager > 1.1 * fused


def test_eager_kernels_cost_the_dispatch_chain_and_the_traced_launch(engine):
    # 20 us per kernel on the pre-TE eager stacks (software.yaml header: the dispatch chain before
    # the launch, 5-12 us, plus the CUDA launch as PyTorch traces record it, 5-20 us), 10 us on TE.
    for name in ("megatron-deepspeed", "nemo-megatron"):
        assert resolve_software(name, engine.catalog).dispatch_us == 20.0
    assert resolve_software("megatron-core-te", engine.catalog).dispatch_us == 10.0
