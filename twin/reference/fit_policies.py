"""The memory policies a published run may have used without its table saying so.

A published plan ran, so it fitted in memory. When the twin's count says the plan as read does
not fit, the likeliest explanation is a memory-saving setting the source does not state
(activation checkpointing, activation offload, a bf16 gradient buffer). The reader tries the
ones the case leaves open and the run's stack has, and the twin takes the fastest that fits
(``knob_choice.best_plan``), saying which in the case's notes. A setting the case states is
never changed.

The policies (each with the switch that turns it on in its stack):
- selective recomputation of the core attention (Megatron-Core ``--recompute-granularity
  selective``, Korthikanti et al. 2022 §4.2; torchtitan's default ``selective`` mode);
- selective recomputation of more modules, the output-discarding kind: layer norms, the MoE
  activation, MLA's up-projections, the dense MLP (Megatron-Core ``--recompute-modules
  layernorm moe_act mla_up_proj mlp``; NVIDIA's Megatron-Core MoE Model Zoo recipes use them to fit);
- activation offload to host memory (Megatron-Core / Transformer Engine ``--cpu-offloading``
  with ``--cpu-offloading-num-layers``; ``plan.offload.activations: host``), only where the run
  could have used it: Megatron-Core refuses it with pipeline parallelism and with activation
  recomputation (``TransformerConfig.__post_init__``, megatron/core/transformer/transformer_config.py:
  "Currently there is no support for Pipeline parallelism with CPU offloading", "CPU offloading
  does not work when activation recomputation is enabled"), so it is tried at pp 1 without it;
- a bf16 gradient buffer (Megatron-Core ``--grad-reduce-in-bf16``; NeMo's
  ``optim.grad_sync_dtype: bf16``, set by NVIDIA's own H100 GPT-3 20B performance example,
  NeMo-Framework-Launcher ``examples/training/gpt/h100/20b_fp8_1node.sh``);
- full recomputation of part of a stage's layers, then of all (Megatron-Core
  ``--recompute-granularity full --recompute-method block --recompute-num-layers``).
The PyTorch stacks (torchtitan, NeMo AutoModel) checkpoint whole layers (``full``) or, in
torchtitan, selectively; they have no bf16 gradient buffer or activation offload in their
published recipes, so those are not tried there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twin.core.specs import Model
from twin.core.training_specs import DEFAULT_RECOMPUTE_MODULES, Offload
from twin.reference.plan_spellings import _norm_recompute

# The stacks whose runs are Megatron-Core or NeMo (the whole list of policies); others: PyTorch.
_MEGATRON_STACKS = ("megatron-core-te", "megatron-core-te2", "megatron-core-te-cudagraphs", "nemo-megatron",
                    "megatron-deepspeed")


@dataclass(frozen=True)
class FitPolicy:
    """A memory-saving setting: its name in the case's notes and the plan fields it sets
    (``partial``: full recomputation of only as many of a stage's layers as needed).
    """

    name: str
    changes: Mapping[str, Any]
    partial: bool = False


def _modules(model: Model) -> tuple[str, ...]:
    """The output-discarding modules a model has, besides the core attention."""
    mods = ["core_attn", "layernorm"]
    if model.moe is not None:
        mods.append("moe_act")
    if model.attention == "mla":
        mods.append("mla_up_proj")
    if model.moe is None or (model.moe.dense_layers or 0) > 0:
        mods.append("mlp")
    return tuple(mods)


def fit_policies(stack: str, model: Model, p: Mapping[str, Any], recompute_open: bool,
                 plan_kwargs: Mapping[str, Any]) -> tuple[FitPolicy, ...]:
    """The policies to try for a case whose plan as read does not fit (module docstring): those
    the case leaves open (``recompute_open``: its recomputation is unstated or only assumed;
    ``p``: its plan as published) on its stack (``stack``: a software preset name).
    """
    megatron = stack in _MEGATRON_STACKS
    out: list[FitPolicy] = []
    if recompute_open:
        out.append(FitPolicy("selective recomputation (core attention)",
                             {"recompute": "selective", "recompute_modules": ("core_attn",)}))
        if megatron:
            mods = _modules(model)
            out.append(FitPolicy(f"selective recomputation ({', '.join(mods)})",
                                 {"recompute": "selective", "recompute_modules": mods}))
    no_offload = p.get("offload") is None and plan_kwargs.get("offload") is None
    # Megatron-Core's --cpu-offloading: pp 1 and no recomputation only (module docstring).
    offload_ok = plan_kwargs.get("pp", 1) == 1 and (recompute_open or _norm_recompute(p.get("recompute")) == "none")
    if megatron and no_offload and offload_ok:
        no_recompute = {"recompute": "none"} if recompute_open else {}  # a stated one is "none" already
        out.append(FitPolicy("activation offload to host memory", {"offload": Offload(activations="host"),
                                                                   **no_recompute}))
    grads_open = p.get("grad_reduce_dtype") is None and plan_kwargs.get("optimizer_sharding") != "fsdp"
    if megatron and grads_open and plan_kwargs.get("precision") != "fp32":
        out.append(FitPolicy("bf16 gradient buffer", {"grad_reduce_dtype": "bf16"}))
    if recompute_open:
        full = {"recompute": "full", "recompute_modules": DEFAULT_RECOMPUTE_MODULES}  # modules: selective's only
        out.append(FitPolicy("full recomputation of part of each stage's layers", full, partial=True))
        out.append(FitPolicy("full recomputation", full))
    # A bf16 gradient buffer together with each of the others (it costs no time of its own).
    bf16 = [f for f in out if f.name == "bf16 gradient buffer"]
    if bf16:
        out += [FitPolicy(f"{f.name} and a bf16 gradient buffer", {**f.changes, "grad_reduce_dtype": "bf16"},
                          f.partial) for f in out if f is not bf16[0]]
    return tuple(out)
