"""Where an MoE layer's tokens go: distinct destination ranks and NVLink domains per token.

DeepEP-style dispatch (deepseek-ai/DeepEP ``get_dispatch_layout``: ``num_tokens_per_rank``,
``is_token_in_rank``) sends a token once to each rank that holds one of its experts (and,
across domains, once over RDMA to each destination domain, forwarded over NVLink inside
it); the receiving rank fans it out to its local experts. So what a dispatch moves is set
by the distinct destination ranks and domains per token, not by top-k:

- ``random`` routing (the twin's balanced default): a token's k experts are k distinct ones
  drawn uniformly from the E experts (top-k never picks an expert twice), E/n on each of n
  ranks, so a rank holding L = E/n of them is missed with the hypergeometric probability
  C(E-L, k) / C(E, k) (Feller, "An Introduction to Probability Theory and Its Applications"
  I, §II.6): n(1 - C(E-L, k)/C(E, k)) ranks and, likewise with E/m experts per domain, the
  domains per token. Where E is not known (a collectives case that does not state it) each
  of the k experts is taken independently, with replacement: n(1-(1-1/n)^k) ranks and
  m(1-(1-1/m)^k) domains, which undercounts (e.g. 1.875 of 2 ranks for top-2 over 8 experts
  on 8 ranks).
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


def domains_per_token(m: Any, top_k: int, groups: Any = None, experts: int = 0) -> Any:
    """Distinct NVLink domains (own included) one token's ``top_k`` experts lie in, with experts
    chosen uniformly over ``m`` domains, or over ``groups`` of them under node-limited routing
    (DeepSeek-V3 report §2.1.2: each token goes to at most M nodes), g = min(m, groups) domains:
    with ``experts`` E known, k distinct experts of the E g/m within reach, E/m per domain
    (g (1 - C(E g/m - E/m, k) / C(E g/m, k)), see the module docstring); without,
    g (1 - (1 - 1/g)^top_k). By symmetry a share 1/m of them is the token's own domain.
    """
    g = ops.maximum(m if groups is None else ops.minimum(m, groups), 1)
    if experts:
        per_domain = experts / ops.maximum(m, 1)
        return g * (1.0 - _miss(per_domain * g, per_domain, top_k))
    return g * (1.0 - ops.power(1.0 - 1.0 / g, top_k))


def _miss(pool: Any, held: Any, top_k: int) -> Any:
    """The probability that none of ``top_k`` distinct experts drawn uniformly from ``pool``
    is among ``held`` of them: C(pool - held, k) / C(pool, k) = prod_i (pool - held - i) /
    (pool - i), i < k (hypergeometric, no success in k draws). A pool of fewer than k
    experts beyond the held ones always hits them (0).
    """
    p: Any = 1.0
    for i in range(top_k):
        p = p * ops.maximum(pool - held - i, 0.0) / ops.maximum(pool - i, 1.0)
    return p


def _random(top_k: int, ranks: Any, domains: Any, per_domain: Any, groups: Any,
            experts: int = 0) -> tuple[Any, Any]:
    # Node-limited routing keeps a token's experts inside g domains, so on g x k ranks.
    reach = ranks if groups is None else ops.minimum(ranks, ops.minimum(domains, groups) * per_domain)
    if experts:
        local = experts / ranks  # experts per rank
        hit = reach * (1.0 - _miss(local * reach, local, top_k))
    else:
        hit = reach * (1.0 - ops.power(1.0 - 1.0 / reach, top_k))
    return hit, domains_per_token(domains, top_k, groups, experts)


def dispatch_fanout(experts: int, top_k: int, ranks: Any, ranks_per_domain: Any,
                    routing: str = "random", groups: Any = None) -> tuple[Any, Any]:
    """(distinct destination ranks, distinct destination domains) of one token's dispatch.

    ``ranks``: the expert-parallel group size n; ``ranks_per_domain``: its ranks in one
    NVLink domain (k of ``GroupSpan``); domains m = ceil(n / k); ``groups``: node-limited
    routing's limit on a token's domains (random routing only; None for none). Contiguous
    routing needs the experts to split evenly over the ranks; otherwise the random figures
    are used.
    """
    ranks_a = ops.maximum(ranks, 1)
    per_dom = ops.maximum(ops.minimum(ranks_per_domain, ranks_a), 1)
    domains = -(-ranks_a // per_dom)
    rand = _random(top_k, ranks_a, domains, per_dom, groups, experts)
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
