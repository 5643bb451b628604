"""What the runner is asked to run: one command, where, as whom and under which limits.

A request crosses a process boundary as one line of JSON (`RunRequest.to_json`, `RunRequest.from_json`): from a
run worker to its local runner process, from the harness into a container's or a pod's runner, from a tool
server's session to the runner it imports. Reading one refuses a field it does not know, a required field
missing and a value of the wrong type, naming the field, so a harness and a runner of different versions fail
on the first request rather than run a command with a limit dropped.
"""

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, Union

__all__ = ["DEFAULT_READ_CAP_BYTES", "Quota", "RequestError", "RunRequest", "View"]

DEFAULT_READ_CAP_BYTES = 2**20


class RequestError(ValueError):
    """A request that is not one: not JSON, a field unknown or missing, a value of the wrong type."""


@dataclass(frozen=True)
class View:
    """The command's own namespaces (`namespaces.Namespaces`): with a `source`, the trial's workspace mounted at
    the environment's path `target`; no network but its own loopback unless `network`; the `hide` paths under
    empty mounts; with `writable`, every file system read-only but those paths; `private` ({shared directory:
    the trial's own}) shows the trial's own directory at each shared one, where the `visible` paths are still
    found; `own_pids`, a pid namespace of its own; `hide_sockets`, every unix socket of the host covered."""

    source: str | None = None
    target: str | None = None
    network: bool = False
    hide: tuple[str, ...] = ()
    writable: tuple[str, ...] | None = None
    private: Mapping[str, str] | None = None
    own_pids: bool = False
    hide_sockets: bool = False
    visible: tuple[str, ...] = ()

    def walls(self) -> list[str]:
        """The names of the fields set, for a message saying which view could not be given."""
        return sorted(item.name for item in dataclasses.fields(self) if getattr(self, item.name))


@dataclass(frozen=True)
class Quota:
    """The trial's disk quota (`quota.StorageWatch`): the files under `paths` may take `limit_bytes`; `state`, a
    file the trial cannot write, carries what the quota still allows from one command to the next."""

    paths: tuple[str, ...]
    limit_bytes: int
    state: str | None = None


@dataclass(frozen=True)
class RunRequest:
    """`sh -c command` in `cwd` with exactly `env`, killed at `timeout_s`, its stdout and stderr each kept to
    `output_bytes`; `memory_ceiling_mb` and `cpu_ceiling` for hosts without cgroups; as `uid` (a pod's trial);
    `watch_cgroup_oom` in a container, whose cgroup enforces memory; in its own `view`; processes it leaves
    running kept where `keep_background`; under the disk `storage` quota; the files `read_after` names read
    back once it ends, each up to `read_cap` bytes (`run.run_limited` says what each does)."""

    command: str
    cwd: str
    env: Mapping[str, str]
    timeout_s: float
    output_bytes: int
    memory_ceiling_mb: float | None = None
    cpu_ceiling: float | None = None
    uid: int | None = None
    watch_cgroup_oom: bool = False
    view: View | None = None
    keep_background: bool = False
    storage: Quota | None = None
    read_after: tuple[str, ...] = ()
    read_cap: int = DEFAULT_READ_CAP_BYTES

    def to_fields(self) -> dict[str, Any]:
        """Every field, as JSON's types (the fields `from_fields` reads back)."""
        fields: dict[str, Any] = json.loads(self.to_json())
        return fields

    def to_json(self) -> str:
        """One line of JSON holding every field (JSON has no raw newline)."""
        return json.dumps(dataclasses.asdict(self), default=dict)

    @classmethod
    def from_json(cls, text: str | bytes) -> "RunRequest":
        """The request a line of JSON holds; RequestError where it holds none."""
        try:
            fields = json.loads(text)
        except ValueError as error:
            raise RequestError(f"the run request is not JSON: {error}") from None
        return cls.from_fields(fields)

    @classmethod
    def from_fields(cls, fields: object) -> "RunRequest":
        """The request whose fields `fields` ({name: value}, JSON's types) gives, the fields not given taking their
        defaults; RequestError naming the field that is unknown, missing or of the wrong type."""
        return _build(cls, fields, "the run request")


Built = TypeVar("Built", RunRequest, View, Quota)


def _build(kind: type[Built], fields: object, where: str) -> Built:
    if not isinstance(fields, Mapping):
        raise RequestError(f"{where} is not an object: {type(fields).__name__}")
    known = {item.name: item for item in dataclasses.fields(kind)}
    if unknown := sorted(set(fields) - set(known)):
        raise RequestError(f"{where} has unknown fields: {', '.join(map(str, unknown))}")
    required = [name for name, item in known.items() if _has_no_default(item)]
    if missing := [name for name in required if name not in fields]:
        raise RequestError(f"{where} lacks the fields: {', '.join(missing)}")
    hints = typing.get_type_hints(kind)
    values = {name: _value(hints[name], value, f"{where}'s {name}") for name, value in fields.items()}
    return kind(**values)


def _has_no_default(item: "dataclasses.Field[Any]") -> bool:
    return item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING


def _value(hint: Any, value: object, where: str) -> Any:
    """`value` as a field typed `hint` holds it (a JSON list as a tuple, an object as a nested request type);
    RequestError where it is of another type."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in arguments:
            return None
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return _value(inner, value, where)
    if hint in (View, Quota):
        return _build(hint, value, where)
    if origin is tuple and isinstance(value, list | tuple):
        return tuple(_value(arguments[0], item, where) for item in value)
    if origin is Mapping and isinstance(value, Mapping):
        return {
            _value(str, key, f"{where}'s key"): _value(str, item, f"{where}[{key!r}]") for key, item in value.items()
        }
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, bool) and type(value) is hint:
        return value
    raise RequestError(f"{where} is not {_described(hint)}: {value!r}"[:500])


def _described(hint: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", View: "a view", Quota: "a quota"}
    if hint in names:
        return names[hint]
    return "a list of strings" if typing.get_origin(hint) is tuple else "an object of strings"
