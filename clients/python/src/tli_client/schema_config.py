"""Typed config helpers for any plugin, built at run time from the JSON Schema it serves.

Every plugin's manifest carries the JSON Schema of its config, and the host serves it over
``ListPlugins``. :func:`config_type` turns that schema into a class with one keyword argument per
config key, so a plugin this package has never heard of (a new build, one written outside the
repository) gets the same help as a built-in one, with no client release::

    Behaviour = tli.config_type("behaviour")     # from the host's ListPlugins
    help(Behaviour)                              # every key: type, bounds, default, description
    cfg = Behaviour(sleep_ms_per_step=5)         # unknown keys and bad values raise here
    job = tli.start([cfg], [synthetic(2000)], steps=100)

An instance is a :class:`~tli_client.config.PluginConfig` (plugin name + JSON config), sent as
the API's generic config. Keys left out are not sent: the plugin fills in its own defaults. The
checks here are the same subset of JSON Schema the host applies before asking the plugin (type,
enum, const, properties / additionalProperties / required, items / minItems / maxItems,
minimum / maximum / exclusiveMinimum / exclusiveMaximum, minLength / maxLength); the host and
then the plugin check everything again.
"""

from __future__ import annotations

import inspect
import keyword
import math
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Tuple, Type, cast

from .config import PluginConfig
from .info import PluginInfo

__all__ = ["SchemaConfig", "config_type", "check_value"]

_PY_TYPES: Dict[str, str] = {
    "null": "None",
    "boolean": "bool",
    "integer": "int",
    "number": "float",
    "string": "str",
    "array": "list",
    "object": "dict",
}


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, (list, tuple))
    if name == "object":
        return isinstance(value, Mapping)
    return True  # a type name this client does not know: the host and the plugin decide


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def check_value(schema: Any, value: Any, path: str) -> None:
    """Raises ValueError naming ``path`` when ``value`` breaks ``schema`` (see the module doc)."""
    if schema is False:
        raise ValueError(f"{path}: no value is allowed here")
    if not isinstance(schema, Mapping):
        return
    types = schema.get("type")
    names: List[str] = [types] if isinstance(types, str) else [t for t in types or [] if isinstance(t, str)]
    if names and not any(_is_type(value, n) for n in names):
        raise ValueError(f"{path}: expected {' or '.join(names)}, got {_shown(value)}")
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        choices = ", ".join(_shown(c) for c in schema["enum"])
        raise ValueError(f"{path}: {_shown(value)} is not one of {choices}")
    if "const" in schema and value != schema["const"]:
        raise ValueError(f"{path}: must be {_shown(schema['const'])}, not {_shown(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{path}: {value} cannot be sent (JSON has no NaN or infinity)")
        _check_bounds(schema, float(value), path, _shown(value))
    if isinstance(value, str):
        if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
            raise ValueError(f"{path}: shorter than {schema['minLength']} characters")
        if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
            raise ValueError(f"{path}: longer than {schema['maxLength']} characters")
    if isinstance(value, (list, tuple)):
        if isinstance(schema.get("minItems"), int) and len(value) < schema["minItems"]:
            raise ValueError(f"{path}: {len(value)} items, fewer than {schema['minItems']}")
        if isinstance(schema.get("maxItems"), int) and len(value) > schema["maxItems"]:
            raise ValueError(f"{path}: {len(value)} items, more than {schema['maxItems']}")
        for i, item in enumerate(value):
            check_value(schema.get("items", True), item, f"{path}[{i}]")
    if isinstance(value, Mapping):
        _check_object(schema, value, path)


def _check_bounds(schema: Mapping[str, Any], x: float, path: str, shown: str) -> None:
    def bound(key: str) -> Optional[float]:
        b = schema.get(key)
        return float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) else None

    lo, hi = bound("minimum"), bound("maximum")
    xlo, xhi = bound("exclusiveMinimum"), bound("exclusiveMaximum")
    if lo is not None and x < lo:
        raise ValueError(f"{path}: {shown} is less than the minimum {schema['minimum']}")
    if hi is not None and x > hi:
        raise ValueError(f"{path}: {shown} is more than the maximum {schema['maximum']}")
    if xlo is not None and x <= xlo:
        raise ValueError(f"{path}: {shown} must be more than {schema['exclusiveMinimum']}")
    if xhi is not None and x >= xhi:
        raise ValueError(f"{path}: {shown} must be less than {schema['exclusiveMaximum']}")


def _check_object(schema: Mapping[str, Any], value: Mapping[str, Any], path: str) -> None:
    props = schema.get("properties")
    properties: Mapping[str, Any] = props if isinstance(props, Mapping) else {}
    for key in schema.get("required") or []:
        if isinstance(key, str) and key not in value:
            raise ValueError(f"{path}.{key}: is required and missing")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            check_value(properties[key], item, f"{path}.{key}")
        elif extra is False:
            raise ValueError(
                f"{path}.{key}: not a key here; the keys are {', '.join(properties) or 'none'}"
            )
        else:
            check_value(extra, item, f"{path}.{key}")


class SchemaConfig(PluginConfig):
    """A plugin config checked against the plugin's served schema (see :func:`config_type`)."""

    #: The plugin this class was built for, and its config schema as the host served it.
    plugin_name: ClassVar[str] = ""
    schema: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, **values: Any) -> None:
        properties = self.properties()
        extra = self.schema.get("additionalProperties", True)
        for key in values:
            if key not in properties and extra is False:
                raise TypeError(
                    f"{self.plugin_name} config: unknown key {key!r}; its keys are "
                    f"{', '.join(properties) or 'none'}"
                )
        for key, value in values.items():
            check_value(properties.get(key, extra), value, f"{self.plugin_name} config: {key}")
        for key in self.schema.get("required") or []:
            if key not in values:
                raise TypeError(f"{self.plugin_name} config: {key!r} is required")
        sent = {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()}
        object.__setattr__(self, "plugin", self.plugin_name)
        object.__setattr__(self, "config", sent)

    @classmethod
    def properties(cls) -> Mapping[str, Any]:
        props = cls.schema.get("properties")
        return props if isinstance(props, Mapping) else {}

    @classmethod
    def keys(cls) -> Tuple[str, ...]:
        """The config keys the plugin's schema names, in its order."""
        return tuple(cls.properties())


def _describe(key: str, prop: Any) -> str:
    if not isinstance(prop, Mapping):
        return f"{key}: any value"
    parts: List[str] = []
    types = prop.get("type")
    names = [types] if isinstance(types, str) else list(types or [])
    if names:
        parts.append(" | ".join(_PY_TYPES.get(n, str(n)) for n in names))
    if isinstance(prop.get("enum"), list):
        parts.append("one of " + ", ".join(repr(c) for c in prop["enum"]))
    for bound, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")):
        if bound in prop:
            parts.append(f"{sign} {prop[bound]}")
    if "default" in prop:
        parts.append(f"default {prop['default']!r}")
    line = f"{key}: {', '.join(parts) or 'any value'}"
    if isinstance(prop.get("description"), str):
        line += f" — {prop['description']}"
    return line


def _class_name(plugin: str) -> str:
    words = "".join(c if c.isalnum() else " " for c in plugin).split()
    name = "".join(w[:1].upper() + w[1:] for w in words) + "Config"
    return name if name[0].isalpha() else "Plugin" + name


def config_type(plugin: PluginInfo) -> Type[SchemaConfig]:
    """A typed config class for ``plugin`` from the schema it serves (``Client.config_type``).

    Its keyword arguments are the schema's keys (``help()`` lists each with its type, bounds,
    default and description); an unknown key raises TypeError, a value the schema refuses
    ValueError naming the key. A schema that is not a JSON object gives a class that takes any
    keys.
    """
    schema: Mapping[str, Any] = plugin.config_schema if isinstance(plugin.config_schema, Mapping) else {}
    props = schema.get("properties")
    properties: Mapping[str, Any] = props if isinstance(props, Mapping) else {}
    lines = [f"{plugin.name} {plugin.version} config, built from the schema the host served."]
    for text in (schema.get("title"), schema.get("description")):
        if isinstance(text, str):
            lines.append(text)
    lines.append("")
    lines.extend(_describe(k, p) for k, p in properties.items())
    params = [
        inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None)
        for k in properties
        if k.isidentifier() and not keyword.iskeyword(k)
    ]
    if schema.get("additionalProperties", True) is not False or len(params) < len(properties):
        params.append(inspect.Parameter("values", inspect.Parameter.VAR_KEYWORD))
    namespace: Dict[str, Any] = {
        "plugin_name": plugin.name,
        "schema": schema,
        "__doc__": "\n".join(lines),
        "__signature__": inspect.Signature(params),
        "__module__": __name__,
    }
    return cast(Type[SchemaConfig], type(_class_name(plugin.name), (SchemaConfig,), namespace))

