"""Every hook a Fabric Twin plugin can implement. One file, ``twin_`` prefix.

A plugin is a module (or object) with functions decorated ``@twin.hookimpl.hookimpl``,
exposed through the ``twin`` entry-point group in its package metadata::

    [project.entry-points.twin]
    myfabric = "my_package.myfabric"

Built-in plugins (``twin_plugins.*``) use the same hooks and the same entry-point group.
Hook arguments and results are plain objects of the public plugin API, ``twin.api``
(fabrics, strategies, specs, failure and telemetry types), or plain mappings (presets);
nothing here imports grpc, ray or opentelemetry. The page for plugin authors, with every
hook below, is ``docs/plugins.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

from twin.hookimpl import PROJECT

if TYPE_CHECKING:
    from twin.api import (
        CollectiveCost,
        ComponentGroup,
        Fabric,
        FailureMode,
        GroupSpan,
        Hierarchy,
        MetricMapping,
        Scenario,
        Strategy,
    )

hookspec = pluggy.HookspecMarker(PROJECT)


@hookspec
def twin_fabrics() -> list[Fabric]:
    """Return fabric models this plugin provides.

    Each is an instance of a ``twin.api`` fabric base class (``ScaleUpFabric``,
    ``ScaleOutFabric``, ``OpticsModel`` or ``MemoryFabric``) with a unique ``kind`` within
    its role; scenarios select it by that kind (``scale_out: {fabric: KIND}``). Two plugins
    registering the same role and kind is an error naming both.
    """


@hookspec
def twin_strategies() -> list[Strategy]:
    """Return parallelism strategies (``twin.api.Strategy`` instances).

    A strategy decides, for one evaluation, what its parallel dimension communicates and
    how much of it the schedule hides. Names must be unique across plugins.
    """


@hookspec
def twin_presets() -> dict[str, dict[str, dict[str, Any]]]:
    """Return named presets: ``{"gpus"|"efficiency"|"systems"|"models"|"software": {name: mapping}}``.

    Mappings use the same fields as scenario files; every number should carry its source
    in a ``source`` field. A name defined twice (any plugins) is an error naming both.
    """


@hookspec(firstresult=True)
def twin_collective_cost(op: str, size_bytes: float, span: GroupSpan, hierarchy: Hierarchy,
                         algorithm: str | None, scenario: Scenario) -> CollectiveCost | None:
    """Cost one collective, overriding the built-in NCCL-style model.

    Return ``None`` to defer to the next implementation (the built-in model runs last).
    Use it for fabrics whose collectives the generic tier model cannot express, e.g. an
    in-network reduction engine with its own bandwidth curve.
    """


@hookspec
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None,
                    optical_links: int | None) -> list[ComponentGroup] | None:
    """Describe the components this plugin's part of ``scenario``'s cluster is made of.

    Return ``twin.api.ComponentGroup`` objects (identical parts
    grouped by symmetry: all leaf switches, all leaf-to-spine cables ...), or ``None``
    when the cluster does not use this plugin's fabric. ``hierarchy`` is the tier
    hierarchy the performance model evaluates (tier indices, spans); ``switch_radix`` the
    radix forced by the optics model (``None``: the fabric's own); ``optical_links`` the
    scale-out fabric's own count of links over optics when it is not a fat tree
    (``ScaleOutFabric.optical_links``; ``None``: a fat tree). Group names must be
    unique across plugins; GPUs, hosts and the job's software are the core's.
    Used by failure scenarios (``twin failures``): inventory, rates, criticality.
    """


@hookspec
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None, optical_links: int | None) -> list[FailureMode] | None:
    """Describe how a member of ``component`` fails and what the job sees when it does.

    Return ``twin.api.FailureMode`` objects for groups this plugin
    knows (any plugin may add modes to any group, e.g. the optics plugin adds transceiver
    failures to the fabric's links with ``same_as="down"``), or ``None``. Each mode has a
    rate per unit per year with its source (``None`` when none is published), whether it
    crashes the job, the nodes it takes out and the degraded ``Impact`` the job runs with
    until the repair. A mode with the same (component, name) and a higher ``priority``
    replaces a lower one.
    """


@hookspec
def twin_metric_mappings() -> list[MetricMapping]:
    """Return the exporter metrics this plugin's components report (telemetry ingest).

    Each ``twin.api.MetricMapping`` names a metric in all its spellings (matched
    case-insensitively, ``_total`` optional), the component kind and signal it feeds, the
    attributes that identify the component, and the health rules (with their sources)
    that mark it degraded or down. A fabric brought by a third party brings its own
    exporter names this way. Two plugins mapping the same name is an error naming both.
    """
