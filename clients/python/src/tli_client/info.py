"""What a host offers: its plugins (ListPlugins) and its devices' memory (GetResources)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Tuple

from ._proto.tli.v1 import plugins_pb2 as ppb
from .jobs import MeasuredMemory

__all__ = ["PluginInfo", "RefusedPlugin", "Plugins", "RescanReport", "Reservation", "Device"]

def _json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None

@dataclass(frozen=True)
class PluginInfo:
    """A plugin the host loaded: versions, family, defaults and the config's JSON schema."""

    name: str
    version: str
    api_version: str
    family: str
    description: str
    default_config: Any
    config_schema: Any
    path: str
    capabilities: Tuple[str, ...]
    #: Where the library was loaded from (``path``, or the host's copy of a rescanned file).
    loaded_from: str = ""
    #: SHA-256 of the library.
    checksum: str = ""
    loaded_unix_ms: int = 0
    #: Tasks on this version not yet ended, and all tasks recorded on it.
    active_tasks: int = 0
    tasks: int = 0
    #: The metrics its tasks are compared by, most telling first (plugin API 1.5).
    headline_metrics: Tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, p: ppb.Plugin) -> "PluginInfo":
        return cls(
            p.name,
            p.version,
            p.api_version,
            p.family,
            p.description,
            _json(p.default_config_json),
            _json(p.config_schema_json),
            p.path,
            tuple(p.capabilities),
            p.loaded_from,
            p.checksum,
            p.loaded_unix_ms,
            p.active_tasks,
            p.tasks,
            tuple(p.headline_metrics),
        )

@dataclass(frozen=True)
class RefusedPlugin:
    """A library in the plugin directory the host would not load, and why."""

    path: str
    reason: str

@dataclass(frozen=True)
class Plugins:
    """ListPlugins: the loaded plugins (iterate, or index by name) and the refused ones."""

    loaded: Tuple[PluginInfo, ...]
    refused: Tuple[RefusedPlugin, ...]
    plugin_dir: str
    host_plugin_api: str

    @classmethod
    def from_proto(cls, r: ppb.ListPluginsResponse) -> "Plugins":
        return cls(
            tuple(PluginInfo.from_proto(p) for p in r.plugins),
            tuple(RefusedPlugin(x.path, x.reason) for x in r.refused),
            r.plugin_dir,
            r.host_plugin_api,
        )

    @property
    def names(self) -> Tuple[str, ...]:
        """Each loaded plugin name once (several versions of one may be loaded)."""
        return tuple(dict.fromkeys(p.name for p in self.loaded))

    def __iter__(self) -> Iterator[PluginInfo]:
        return iter(self.loaded)

    def __len__(self) -> int:
        return len(self.loaded)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> PluginInfo:
        """The plugin ``name`` (its newest loaded version) or ``name@version``."""
        wanted, _, version = name.partition("@")
        found = [p for p in self.loaded if p.name == wanted and version in ("", p.version)]
        if found:
            return max(found, key=lambda p: _version_key(p.version))
        raise KeyError(f"no plugin {name!r} loaded (loaded: {', '.join(self.names) or 'none'})")

def _version_key(version: str) -> Tuple[int, ...]:
    """Orders semver cores (pre-release tags are ignored)."""
    core = version.split("-", 1)[0].split("+", 1)[0]
    return tuple(int(x) if x.isdigit() else 0 for x in core.split("."))


@dataclass(frozen=True)
class RescanReport:
    """RescanPlugins: what a rescan of the host's plugin directory loaded and refused."""

    loaded: Tuple[PluginInfo, ...]
    refused: Tuple[RefusedPlugin, ...]
    unchanged: int
    warnings: Tuple[str, ...]

    @classmethod
    def from_proto(cls, r: ppb.RescanPluginsResponse) -> "RescanReport":
        return cls(
            tuple(PluginInfo.from_proto(p) for p in r.loaded),
            tuple(RefusedPlugin(x.path, x.reason) for x in r.refused),
            r.unchanged,
            tuple(r.warnings),
        )


@dataclass(frozen=True)
class Reservation:
    """Memory the arbiter holds for a task (bytes; measured once the task has run a slice) or
    for a resident model (``task_id`` 0, ``model`` set)."""

    task_id: int
    reserved_bytes: int
    measured_bytes: Optional[int]
    measured_memory: Optional[MeasuredMemory]
    #: A resident model's id, or ``"<id> (stream N)"`` for a PredictStream's own predictor;
    #: None for a task's reservation.
    model: Optional[str] = None

@dataclass(frozen=True)
class Device:
    """A device (``cpu``, ``cuda:N``): budget, what is reserved, and by which tasks."""

    name: str
    budget_bytes: int
    reserved_bytes: int
    strategy: str
    reservations: Tuple[Reservation, ...]
    total_bytes: Optional[int]
    free_bytes: Optional[int]

    @classmethod
    def from_proto(cls, d: ppb.Device) -> "Device":
        return cls(
            d.name,
            d.budget_bytes,
            d.reserved_bytes,
            d.strategy,
            tuple(
                Reservation(
                    r.task_id,
                    r.reserved_bytes,
                    r.measured_bytes if r.HasField("measured_bytes") else None,
                    MeasuredMemory.from_proto(r.measured_memory)
                    if r.HasField("measured_memory")
                    else None,
                    r.model or None,
                )
                for r in d.reservations
            ),
            d.total_bytes if d.HasField("total_bytes") else None,
            d.free_bytes if d.HasField("free_bytes") else None,
        )

    @property
    def free_budget_bytes(self) -> int:
        """Budget not reserved."""
        return max(self.budget_bytes - self.reserved_bytes, 0)

def devices_from_proto(r: ppb.GetResourcesResponse) -> Tuple[Device, ...]:
    return tuple(Device.from_proto(d) for d in r.devices)
