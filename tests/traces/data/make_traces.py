"""Regenerate the PyTorch profiler traces in this folder (real torch.profiler output, CPU).

    python tests/traces/data/make_traces.py            # needs torch (CPU is enough): pip install torch

Writes, next to this file:

- ``tinylm_cpu.json.gz``: one process training a 2-layer GPT-style language model (token
  embedding, pre-norm blocks of causal scaled-dot-product attention and a GELU MLP, final norm,
  untied LM head, cross-entropy) with AdamW for the profiler's active steps, one thread;
  Kineto's Chrome-trace JSON as ``torch.profiler`` exports it.
- ``tinylm_ddp_gloo_rank0.json.gz``: rank 0 of two processes training the same model under
  DistributedDataParallel over the gloo backend (its gradient-bucket all-reduces), same schedule.
- ``tinylm-cpu.yaml``: that run as a twin scenario: the host thread as the "GPU", its peak the
  fp32 matrix-multiply rate and its memory bandwidth the copy rate measured here (one thread).
- ``PROVENANCE.json``: torch version, host, date, the schedule, the model and the measured peaks.

The tests read these files as they are (no torch in CI); this script is how they were made.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

HERE = Path(__file__).resolve().parent
DIMS = {"batch": 4, "seq": 128, "hidden": 256, "heads": 4, "ffn": 1024, "layers": 2, "vocab": 2048}
SCHEDULE = {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}


class Block(nn.Module):
    """One pre-norm transformer layer: attention (SDPA) and an MLP."""

    def __init__(self, h: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        a = nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                       is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))


class TinyLM(nn.Module):
    """Token embedding, ``layers`` blocks, final norm, untied LM head."""

    def __init__(self) -> None:
        super().__init__()
        h = DIMS["hidden"]
        self.embed = nn.Embedding(DIMS["vocab"], h)
        self.blocks = nn.ModuleList(Block(h, DIMS["heads"], DIMS["ffn"]) for _ in range(DIMS["layers"]))
        self.norm, self.head = nn.LayerNorm(h), nn.Linear(h, DIMS["vocab"], bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def train(model: nn.Module, out: Path) -> None:
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, DIMS["vocab"], (DIMS["batch"], DIMS["seq"] + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]
    steps = sum(v for k, v in SCHEDULE.items() if k != "repeat")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(**SCHEDULE), record_shapes=True) as prof:
        for _ in range(steps):
            with record_function("forward"):
                loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            prof.step()
    prof.export_chrome_trace(str(out))


def _ddp(rank: int, world: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(TinyLM())
    out = HERE / f"tinylm_ddp_gloo_rank{rank}.json.gz"
    train(model, out)
    dist.destroy_process_group()
    if rank != 0:
        out.unlink()


def peaks() -> dict[str, float]:
    """The host thread's fp32 matrix-multiply rate (TFLOP/s, best of 5 1024^3 products) and copy
    bandwidth (TB/s, best of 5 copies of 64 MiB: read + write).
    """
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    src, dst = torch.empty(16 << 20), torch.empty(16 << 20)
    mm, cp = [], []
    for _ in range(5):
        t = time.perf_counter()
        torch.mm(a, b)
        mm.append(time.perf_counter() - t)
        t = time.perf_counter()
        dst.copy_(src)
        cp.append(time.perf_counter() - t)
    return {"fp32_tflops": 2 * 1024**3 / min(mm) / 1e12, "copy_TBps": 2 * src.numel() * 4 / min(cp) / 1e12}


SCENARIO = """\
# The run tests/traces/data/make_traces.py profiled (tinylm_ddp_gloo_rank0.json.gz), as a twin
# scenario: two processes on one host, each one CPU thread standing for a "GPU" whose peak is the
# fp32 matrix-multiply rate and whose memory bandwidth the copy rate measured on that host
# (PROVENANCE.json), the same 2-layer model, DDP (data parallel 2) over gloo on loopback
# (described as a 10 Gb/s TCP network: the twin has no loopback fabric).
name: tinylm-cpu
cluster:
  gpu: {{name: host-cpu-thread, generation: volta, peak_tflops: {{fp32: {tf:.4g}, fp16: {tf:.4g}}},
        hbm_gib: 16, hbm_TBps: {bw:.4g}, sm_count: 1, tdp_w: 50,
        source: "measured by make_traces.py on the host that made the traces (PROVENANCE.json)"}}
  num_gpus: 2
  gpus_per_node: 1
  scale_up: {{fabric: pcie, generation: 4, domain_gpus: 1}}
  scale_out: {{fabric: tcp, nics_per_node: 1, nic_gbps: 10, topology: fat_tree, switch_radix: 64}}
model: {{name: TinyLM, layers: {layers}, hidden: {hidden}, ffn: {ffn}, heads: {heads}, kv_heads: {heads},
        vocab: {vocab}, seq_len: {seq}, gated_mlp: false}}
plan: {{tp: 1, pp: 1, mbs: {batch}, gbs: {gbs}, precision: fp32, recompute: none}}
software: pytorch-fsdp2
"""


def main() -> None:
    torch.set_num_threads(1)
    peak = peaks()
    train(TinyLM(), HERE / "tinylm_cpu.json.gz")
    mp.spawn(_ddp, args=(2, 29517), nprocs=2, join=True)
    (HERE / "tinylm-cpu.yaml").write_text(SCENARIO.format(tf=peak["fp32_tflops"], bw=peak["copy_TBps"],
                                                          gbs=2 * DIMS["batch"], **DIMS))
    (HERE / "PROVENANCE.json").write_text(json.dumps({
        "made_by": "tests/traces/data/make_traces.py", "torch": torch.__version__, "python": sys.version.split()[0],
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "date": datetime.date.today().isoformat(), "device": "cpu, one thread per process",
        "profiler_schedule": SCHEDULE, "model": DIMS, "measured_peaks": peak,
        "files": {"tinylm_cpu.json.gz": "one process, torch.profiler CPU activity, AdamW",
                  "tinylm_ddp_gloo_rank0.json.gz": "rank 0 of 2, DistributedDataParallel over gloo",
                  "tinylm-cpu.yaml": "the DDP run as a twin scenario"}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
