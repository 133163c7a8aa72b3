"""Where an MoE layer's tokens go: distinct destination ranks and NVLink domains per token.

DeepEP-style dispatch (deepseek-ai/DeepEP ``get_dispatch_layout``: ``num_tokens_per_rank``,
``is_token_in_rank``) sends a token once to each rank that holds one of its experts (and,
across domains, once over RDMA to each destination domain, forwarded over NVLink inside
it); the receiving rank fans it out to its local experts. So what a dispatch moves is set
by the distinct destination ranks and domains per token, not by top-k:

- ``random`` routing (the twin's balanced default): each of the k experts uniform and
  independent over E experts on n ranks, so a rank is hit with probability 1-(1-1/n)^k:
  n(1-(1-1/n)^k) ranks and m(1-(1-1/m)^k) domains per token (with replacement; the same
  approximation as the domains of ``collectives.dedup_dispatch_cost``).
- ``contiguous`` routing: token t's experts are (t*k + j) mod E for j < k, which is how NeMo
  AutoModel's ``FakeBalancedGate`` (``fake_balanced_gate: true`` in its benchmark configs;
  nemo_automodel/components/moe/layers.py) balances expert load. Experts sit on ranks in
  contiguous blocks of E/n (expert parallelism shards dim 0), so a token reaches the few
  ranks its k consecutive experts span: counted exactly over the E/gcd(k, E) distinct starts.

Written for one scenario and for a batch: ``ranks`` and ``ranks_per_domain`` may be arrays
(one EP degree per point); the model's E, k and routing are shared.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from twin.core import ops


@lru_cache(maxsize=1024)
def _contiguous(experts: int, top_k: int, ranks: int, ranks_per_domain: int) -> tuple[float, float]:
    """Mean distinct ranks and domains over the starts (t*k) mod E of k consecutive experts."""
    local = experts // ranks
    step = math.gcd(top_k, experts)
    hit_ranks = hit_domains = 0
    starts = range(0, experts, step)
    for s in starts:
        owners = {((s + j) % experts) // local for j in range(top_k)}
        hit_ranks += len(owners)
        hit_domains += len({r // ranks_per_domain for r in owners})
    n = len(starts)
    return hit_ranks / n, hit_domains / n


def _random(top_k: int, ranks: Any, domains: Any) -> tuple[Any, Any]:
    return (ranks * (1.0 - ops.power(1.0 - 1.0 / ranks, top_k)),
            domains * (1.0 - ops.power(1.0 - 1.0 / domains, top_k)))


def dispatch_fanout(experts: int, top_k: int, ranks: Any, ranks_per_domain: Any,
                    routing: str = "random") -> tuple[Any, Any]:
    """(distinct destination ranks, distinct destination domains) of one token's dispatch.

    ``ranks``: the expert-parallel group size n; ``ranks_per_domain``: its ranks in one
    NVLink domain (k of ``GroupSpan``); domains m = ceil(n / k). Contiguous routing needs
    the experts to split evenly over the ranks; otherwise the random figures are used.
    """
    ranks_a = ops.maximum(ranks, 1)
    per_dom = ops.maximum(ops.minimum(ranks_per_domain, ranks_a), 1)
    domains = -(-ranks_a // per_dom)
    rand = _random(top_k, ranks_a, domains)
    if routing != "contiguous":
        return rand
    if not ops.is_batch(ranks_a, per_dom):
        n, k = int(ranks_a), int(per_dom)
        if experts < n or experts % n:
            return rand
        return _contiguous(experts, top_k, n, k)
    n_a = np.broadcast_to(np.asarray(ranks_a, np.int64), np.broadcast(ranks_a, per_dom).shape)
    k_a = np.broadcast_to(np.asarray(per_dom, np.int64), n_a.shape)
    r_out, d_out = np.array(rand[0], np.float64, copy=True), np.array(rand[1], np.float64, copy=True)
    r_out, d_out = np.broadcast_to(r_out, n_a.shape).copy(), np.broadcast_to(d_out, n_a.shape).copy()
    for n, k in {(int(a), int(b)) for a, b in zip(n_a.ravel().tolist(), k_a.ravel().tolist(), strict=True)}:
        if experts < n or experts % n:
            continue
        sel = (n_a == n) & (k_a == k)
        r_out[sel], d_out[sel] = _contiguous(experts, top_k, n, k)
    return r_out, d_out
