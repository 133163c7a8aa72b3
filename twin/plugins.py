"""Plugin manager factory: built-ins by name, third-party plugins by entry point.

No plugin manager exists at import time; callers build one with
:func:`make_plugin_manager`. Built-in plugins are registered by name (and can be
blocked); other packages are discovered through the ``twin`` entry-point group unless
autoload is off (``TWIN_DISABLE_PLUGIN_AUTOLOAD=1`` or ``autoload=False``), which tests
use to get a deterministic set.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata

import pluggy

from twin import hookspecs
from twin.core.errors import PluginError
from twin.hookimpl import PROJECT

ENTRY_POINT_GROUP = PROJECT
AUTOLOAD_ENV = "TWIN_DISABLE_PLUGIN_AUTOLOAD"
BLOCK_ENV = "TWIN_BLOCK_PLUGINS"
BUILTIN: dict[str, str] = {
    "nvlink": "twin_plugins.nvlink",
    "infiniband": "twin_plugins.infiniband",
    "roce": "twin_plugins.roce",
    "pcie": "twin_plugins.pcie",
    "tcp": "twin_plugins.tcp",
    "torus": "twin_plugins.torus",
    "xgmi": "twin_plugins.xgmi",
    "ici": "twin_plugins.ici",
    "neuronlink": "twin_plugins.neuronlink",
    "gaudi": "twin_plugins.gaudi",
    "ualink": "twin_plugins.ualink",
    "dragonfly": "twin_plugins.dragonfly",
    "cxl": "twin_plugins.cxl",
    "host_memory": "twin_plugins.host_memory",
    "optics": "twin_plugins.optics",
    "tensor": "twin_plugins.tensor_parallel",
    "pipeline": "twin_plugins.pipeline_parallel",
    "data": "twin_plugins.data_parallel",
    "fsdp": "twin_plugins.fsdp",
    "context": "twin_plugins.context_parallel",
    "expert": "twin_plugins.expert_parallel",
    "presets": "twin.presets",
}
DIST_NAME = "fabric-twin"


@dataclass(frozen=True)
class PluginInfo:
    """One loaded plugin: its name, module, the distribution that supplied it, its version."""

    name: str
    module: str
    distribution: str
    version: str
    builtin: bool


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def make_plugin_manager(*, autoload: bool | None = None, block: Iterable[str] = (),
                        extra: Iterable[object] = ()) -> pluggy.PluginManager:
    """A fresh plugin manager with the built-ins, entry-point plugins and ``extra`` objects.

    ``autoload`` None reads ``TWIN_DISABLE_PLUGIN_AUTOLOAD``; ``block`` (plus the
    comma-separated ``TWIN_BLOCK_PLUGINS``) names plugins not to load, built-in or not.
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    blocked = set(block) | {b.strip() for b in os.environ.get(BLOCK_ENV, "").split(",") if b.strip()}
    for name in blocked:
        pm.set_blocked(name)
    for name, module in BUILTIN.items():
        if pm.is_blocked(name):
            continue
        try:
            pm.register(importlib.import_module(module), name=name)
        except ImportError as err:  # pragma: no cover - broken installation
            raise PluginError(f"built-in plugin {name!r} ({module}) failed to import: {err}") from err
    if autoload is None:
        autoload = not _env_flag(AUTOLOAD_ENV)
    if autoload:
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as err:  # a third-party plugin that fails to import must say which
            raise PluginError(f"loading plugins from entry-point group {ENTRY_POINT_GROUP!r} failed: {err}") from err
    for obj in extra:
        pm.register(obj)
    return pm


def is_builtin(pm: pluggy.PluginManager, name: str) -> bool:
    """Whether the plugin registered as ``name`` is twin's own (``BUILTIN``, from its own module)."""
    return name in BUILTIN and getattr(pm.get_plugin(name), "__name__", "") == BUILTIN[name]


def plugin_infos(pm: pluggy.PluginManager) -> list[PluginInfo]:
    """Every registered plugin with the distribution that supplied it."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    try:
        own_version = metadata.version(DIST_NAME)
    except metadata.PackageNotFoundError:  # running from a source tree
        own_version = "0+unknown"
    out = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        dist = dists.get(id(plugin))
        builtin = is_builtin(pm, name)
        if dist is not None:
            dname, version = dist.metadata["name"], dist.version
        elif builtin:
            dname, version = DIST_NAME, own_version
        else:
            dname, version = "(registered in code)", ""
        out.append(PluginInfo(name=name, module=getattr(plugin, "__name__", type(plugin).__name__),
                              distribution=dname, version=version, builtin=builtin))
    return sorted(out, key=lambda p: (not p.builtin, p.name))
