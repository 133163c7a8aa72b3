"""Which strategies one scenario runs: the built-in defaults, or what its ``strategies`` selects.

Every registered strategy claims one dimension (``Strategy.dimension``). The rules:

- The built-in strategies of a dimension are its default (``pp``: ``pipeline``; ``dp``:
  ``data`` and ``fsdp``, each active for its own sharding modes).
- A plugin strategy claiming a dimension that has a built-in is an *alternative*: it runs
  only where a scenario selects it (``strategies: {pp: NAME}``), and then instead of the
  dimension's built-ins (so a dimension's communication is never counted twice).
- A plugin strategy claiming a dimension of its own runs by default when it is the only one
  claiming it; two or more, and a scenario that does not select one of them, is an error
  naming them all.
- Naming a built-in selects the dimension's built-ins (the default, stated).
- A selection's ``config`` block goes to the selected strategy (``Strategy.configure``),
  which checks it; a block for a built-in that takes none is an error like any unknown field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from twin.core.errors import PluginError, SpecError
from twin.core.interfaces import Strategy
from twin.core.specs import Strategies, StrategyChoice

SECTION = "strategies"


@dataclass(frozen=True)
class StrategyTable:
    """The registered strategies by dimension, which are built in, and the plugin of each."""

    by_dimension: Mapping[str, tuple[Strategy, ...]]
    builtin: frozenset[str]
    origins: Mapping[str, str]

    @classmethod
    def of(cls, strategies: Iterable[Strategy], builtin: Iterable[str] | None = None,
           origins: Mapping[str, str] | None = None) -> StrategyTable:
        """The table of ``strategies``; ``builtin`` None: every one of them is built in."""
        strategies = list(strategies)
        by_dim: dict[str, list[Strategy]] = {}
        for s in strategies:
            by_dim.setdefault(s.dimension, []).append(s)
        names = {s.name for s in strategies} if builtin is None else set(builtin)
        return cls({d: tuple(v) for d, v in by_dim.items()}, frozenset(names), dict(origins or {}))

    def alternative(self, s: Strategy) -> bool:
        """Whether ``s`` runs only where selected: a plugin strategy on a dimension with a built-in,
        or one of several plugin strategies on a dimension without one.
        """
        if s.name in self.builtin:
            return False
        claim = self.by_dimension.get(s.dimension, ())
        return any(o.name in self.builtin for o in claim) or len(claim) > 1

    def _who(self, s: Strategy) -> str:
        origin = self.origins.get(s.name)
        return f"{s.name!r} (plugin {origin!r})" if origin else repr(s.name)

    def resolve(self, selection: Strategies, order: Mapping[str, int]) -> tuple[Strategy, ...]:
        """The strategies a scenario with ``selection`` runs, in phase order (``order``).

        Raises ``SpecError`` naming ``strategies.<dimension>`` for an unknown dimension or
        name, a strategy's own config error, or an ambiguous dimension nobody selected.
        """
        run: list[Strategy] = []
        chosen = {c.dimension: c for c in selection.choices}
        for dim in chosen:
            if dim not in self.by_dimension:
                raise SpecError(f"{SECTION}.{dim}", f"no registered strategy models dimension {dim!r}; "
                                                    f"dimensions: {', '.join(sorted(self.by_dimension))}")
        for dim, claim in self.by_dimension.items():
            builtins = [s for s in claim if s.name in self.builtin]
            choice = chosen.get(dim)
            if choice is not None:
                run.extend(self._selected(choice, claim, builtins))
            elif builtins:
                run.extend(builtins)
            elif len(claim) == 1:
                run.append(claim[0])
            else:
                who = " and ".join(self._who(s) for s in claim)
                raise SpecError(f"{SECTION}.{dim}", f"strategies {who} all model dimension {dim!r}, which has no "
                                                    f"built-in: select one (strategies: {{{dim}: NAME}})")
        return tuple(sorted(run, key=lambda s: order[s.phase]))

    def _selected(self, choice: StrategyChoice, claim: Sequence[Strategy],
                  builtins: Sequence[Strategy]) -> list[Strategy]:
        where = f"{SECTION}.{choice.dimension}"
        picked = next((s for s in claim if s.name == choice.name), None)
        if picked is None:
            raise SpecError(where, f"unknown strategy {choice.name!r} for dimension {choice.dimension!r}; "
                                   f"registered: {', '.join(sorted(s.name for s in claim))}")
        configured = picked.configure(choice.config, f"{where}.config")
        if not isinstance(configured, Strategy) or (configured.name, configured.dimension, configured.phase) != (
                picked.name, picked.dimension, picked.phase):
            raise PluginError(f"strategy {picked.name!r}.configure must return a Strategy with its own name, "
                              f"dimension and phase (got {configured!r})")
        if picked.name not in self.builtin:
            return [configured]
        # A built-in named: the dimension's built-ins (each active for its own plans), the named one configured.
        return [configured if s is picked else s for s in builtins]
