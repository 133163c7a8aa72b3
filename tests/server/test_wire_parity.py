"""The wire carries every field a scenario file takes: a core spec field with no wire field
would be a knob gRPC clients cannot turn (found this way: plan.recompute_layers, gpu.sfu_exp_per_clk,
software.flash_attention and tp_comm_overlap, plan.moe_dispatcher)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.core import specs
from twin.rpc.v1 import scenario_pb2
from twin.wire.convert import RENAMES, scenario_from_mapping, scenario_to_mapping

# core spec class -> wire message (same name unless the acronym is spelled differently)
PAIRS = {"GPU": "Gpu", "MLA": "Mla", "MoE": "Moe", **{n: n for n in (
    "Calibration", "Cluster", "ComputeEfficiency", "Hybrid", "MemoryPool", "Model", "Offload", "Optics",
    "Overlap", "Plan", "Power", "Prices", "ScaleOut", "ScaleUp", "Scenario", "SlidingWindow", "Software")}}
# wire-only fields: preset names, the scale-out switch-off, Scenario.description (documentation)
WIRE_ONLY = {"preset", "system", "scale_out_disabled", "description"}


@pytest.mark.parametrize(("core", "wire"), sorted(PAIRS.items()))
def test_every_core_field_has_a_wire_field(core, wire):
    msg = getattr(scenario_pb2, wire).DESCRIPTOR
    renames = RENAMES.get(msg.full_name, {})
    on_wire = {renames.get(f.name, f.name) for f in msg.fields}
    fields = {f.name for f in dataclasses.fields(getattr(specs, core))}
    assert fields - on_wire == set(), f"{core} fields missing from the wire message {wire}"
    assert on_wire - fields <= WIRE_ONLY, f"{wire} fields the core {core} does not have"


def test_the_new_fields_round_trip():
    data = {"cluster": {"gpu": {"preset": "B300-SXM-288GB", "sfu_exp_per_clk": 32.0}, "num_gpus": 64},
            "model": "llama3.1-8b", "plan": {"recompute": "full", "recompute_layers": 2, "gbs": 64}}
    back = scenario_to_mapping(scenario_from_mapping(data))
    assert back["cluster"]["gpu"]["sfu_exp_per_clk"] == 32.0 and back["plan"]["recompute_layers"] == 2
    # the stack's attention kernel and a profile's measured cuDNN figures
    eff = {"gemm": {"bf16": 0.8}, "attention_fwd": 0.42, "attention_bwd": 0.31, "hbm": 0.85,
           "cudnn_attention_fwd": 0.62, "cudnn_attention_bwd": 0.54}
    data = {"cluster": {"gpu": {"preset": "H100-SXM-80GB", "efficiency": eff}, "num_gpus": 8},
            "model": "llama3.1-8b", "plan": {"gbs": 64},
            "software": {"preset": "megatron-core-te", "attention_kernel": "cudnn"}}
    back = scenario_to_mapping(scenario_from_mapping(data))
    assert back["software"]["attention_kernel"] == "cudnn"
    got = back["cluster"]["gpu"]["efficiency"]
    assert (got["cudnn_attention_fwd"], got["cudnn_attention_bwd"]) == (0.62, 0.54)


def test_every_spec_with_a_wire_message_is_checked():
    spelled = {v: k for k, v in PAIRS.items()}
    classes = {n for n in dir(specs)
               if isinstance(getattr(specs, n), type) and dataclasses.is_dataclass(getattr(specs, n))}
    messages = {n for n in dir(scenario_pb2) if hasattr(getattr(scenario_pb2, n), "DESCRIPTOR")
                and hasattr(getattr(scenario_pb2, n).DESCRIPTOR, "fields")}
    both = {n for n in classes if n in messages or n in PAIRS} | {spelled[m] for m in messages if m in spelled}
    assert both <= set(PAIRS), sorted(both - set(PAIRS))


@pytest.mark.parametrize(("core", "wire"), sorted(PAIRS.items()))
def test_every_value_a_spec_field_takes_has_a_wire_enum_value(core, wire):
    """A Literal-typed spec field carried as a wire enum: every value the spec takes is an enum
    value (found this way: recompute_modules' mlp and moe, added to the spec first)."""
    import typing

    from twin.wire.convert import enum_choices

    msg = getattr(scenario_pb2, wire).DESCRIPTOR
    renames = {v: k for k, v in RENAMES.get(msg.full_name, {}).items()}
    hints = typing.get_type_hints(getattr(specs, core))
    checked = 0
    for f in dataclasses.fields(getattr(specs, core)):
        wire_field = msg.fields_by_name.get(renames.get(f.name, f.name))
        if wire_field is None or wire_field.enum_type is None:
            continue
        hint = hints[f.name]
        args = typing.get_args(hint)
        if typing.get_origin(hint) is tuple:  # tuple[Literal[...], ...]
            hint, args = args[0], typing.get_args(args[0])
        values = {a for a in args if isinstance(a, str)}
        if typing.get_origin(hint) is not typing.Literal and not values:
            continue
        assert values <= set(enum_choices(wire_field.enum_type)), f"{core}.{f.name}: {values}"
        checked += 1
    if core == "Plan":
        assert checked >= 5  # precision, recipe, recompute, recompute_modules, sharding, ...
