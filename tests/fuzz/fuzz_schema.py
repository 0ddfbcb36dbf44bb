"""Grammar-based inputs for the fuzz harness: generated from the project's own schemas, so a field,
block or input kind added to a spec is fuzzed the day it lands, with no list to update.

- ``schema_paths(cls)`` walks a pydantic spec class (nested specs, optional blocks, lists of
  specs) and yields every field path with its annotation and bounds.
- ``typed_value(rng, field)`` draws a value for one field from its type: the edges of its stated
  range and just past them, booleans where numbers belong, wrong types, huge lists, long or
  hostile strings, unknown keys in nested blocks.
- ``mutate_spec(rng, cls, data)`` applies one to three such changes to a valid mapping at random
  paths, whether or not the base file sets them (so ``disaggregation.decode.max_batch`` and
  ``speculative.heads.width`` are reached from a workload that has neither).
- ``mutate_json_tree(rng, data)`` does the same to a file without a schema of ours (benchmark
  results): any key path, type-aware values.
- ``odd_path(rng, files)``: output paths of every awkward kind (too long, too deep, a device node,
  a FIFO, a socket, a symlink loop, an existing folder or file, a missing parent).
- ``guard_env(rng)``: the size-guard environment variables at good and bad values.
"""

from __future__ import annotations

import json
import os
import random
import types
import typing
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
GUARDS = ["ROOFLINE_MAX_SCENARIOS", "ROOFLINE_MAX_REQUESTS", "ROOFLINE_MAX_SIMULATED", "ROOFLINE_MAX_CSV_ROWS",
          "ROOFLINE_MAX_FILE_MB", "ROOFLINE_MAX_YAML_KB"]
STRINGS = ["", " ", "nope", "x" * 300, "<script>alert(1)</script>", "two\nlines", "../../etc/passwd", "/dev/zero",
           "llama-3.1-8b", "h100-sxm", "vllm", "bf16", "fp7", "\u00e9\u4e2d", "-1", "1e9", "true"]


def _unwrap(annotation) -> tuple[object, list]:
    """(the type inside Annotated / Optional, the metadata constraints found on the way)."""
    meta = []
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        annotation, meta = args[0], meta + list(args[1:])
    return annotation, meta


def _options(annotation) -> list:
    """The alternatives of a union (X | None, Union[A, B]), else [annotation]."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _model_in(annotation) -> type[BaseModel] | None:
    for a in _options(_unwrap(annotation)[0]):
        a = _unwrap(a)[0]
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        for inner in typing.get_args(a):  # list[Model], dict[str, Model]
            inner = _unwrap(inner)[0]
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return None


def schema_paths(cls: type[BaseModel], prefix: tuple = (), depth: int = 0) -> list[tuple[tuple, object, list]]:
    """Every (path, annotation, constraints) of a spec class, nested specs included."""
    out = []
    for name, info in cls.model_fields.items():
        path = prefix + (name,)
        out.append((path, info.annotation, list(info.metadata)))
        sub = _model_in(info.annotation)
        if sub is not None and depth < 4:
            out += schema_paths(sub, path, depth + 1)
    return out


def _bounds(meta: list) -> tuple[float | None, float | None]:
    low = high = None
    for m in meta:
        for attr in ("ge", "gt"):
            if getattr(m, attr, None) is not None:
                low = getattr(m, attr)
        for attr in ("le", "lt"):
            if getattr(m, attr, None) is not None:
                high = getattr(m, attr)
    return low, high


def _number_values(kind: type, meta: list) -> list:
    low, high = _bounds(meta)
    vals = [0, 1, -1, 2, 7, 64, 4096, 10**9, 10**19, 10**400 if kind is int else 1e308, True, False, "42", None,
            float("nan"), float("inf"), 0.5, 1.5, -0.0]
    for edge in (low, high):
        if edge is not None:
            step = 1 if kind is int else max(abs(edge) * 1e-9, 1e-12)
            vals += [edge, edge - step, edge + step]
    return vals


def typed_value(rng: random.Random, annotation, meta: list):
    """A value for a field of this annotation: mostly near its stated range, often just outside it."""
    inner, more = _unwrap(annotation)
    meta = meta + more
    choices = _options(inner)
    t = rng.choice(choices)
    t, more = _unwrap(t)
    meta = meta + more
    origin = typing.get_origin(t)
    if t is bool:
        return rng.choice([True, False, 1, 0, "yes", None, 2])
    if t in (int, float):
        return rng.choice(_number_values(t, meta))
    if t is str:
        return rng.choice(STRINGS)
    if typing.get_origin(t) is typing.Literal:
        return rng.choice(list(typing.get_args(t)) + ["nope", 1, None])
    if origin in (list, tuple):
        args = typing.get_args(t) or (int,)
        item = args[0]
        r = rng.random()
        if r < 0.15:
            return []
        if r < 0.25:
            return [typed_value(rng, item, [])] * rng.choice([300, 20_000])
        return [typed_value(rng, item, []) for _ in range(rng.randint(1, 4))]
    if origin is dict:
        args = typing.get_args(t) or (str, float)
        r = rng.random()
        if r < 0.2:
            return {}
        if r < 0.3:
            return {f"k{i}": 1 for i in range(rng.choice([50, 5000]))}
        return {rng.choice(STRINGS[:12]): typed_value(rng, args[1], []) for _ in range(rng.randint(1, 3))}
    if isinstance(t, type) and issubclass(t, BaseModel):
        r = rng.random()
        if r < 0.3:
            return {}
        if r < 0.4:
            return {"bogus_key": 1}
        if r < 0.5:
            return rng.choice([None, 1, "x", []])
        return {name: typed_value(rng, f.annotation, list(f.metadata))
                for name, f in rng.sample(list(t.model_fields.items()), min(len(t.model_fields), rng.randint(1, 3)))}
    return rng.choice([None, 1, "x", [], {}, True])


def set_path(data: dict, path: tuple, value) -> dict:
    """A copy of ``data`` with ``value`` at ``path`` (blocks created on the way)."""
    out = json.loads(json.dumps(data, default=str)) if data else {}
    node = out
    for key in path[:-1]:
        nxt = node.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            node[key] = nxt
        node = nxt
    node[path[-1]] = value
    return out


def mutate_spec(rng: random.Random, cls: type[BaseModel], data: dict, keep: tuple = ()) -> dict:
    """One to three schema-typed changes at random field paths (``keep``: top-level keys left alone,
    e.g. a workload's request count, so a case stays bounded by design, not by luck)."""
    paths = [p for p in schema_paths(cls) if p[0][0] not in keep]
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.08:
            data = set_path(data, (rng.choice(["bogus", "num_layer", "engine_arg", "memory_gbs"]),), 1)
        elif r < 0.14 and data:
            data = dict(data)
            data.pop(rng.choice(list(data)), None)
        else:
            path, annotation, meta = rng.choice(paths)
            data = set_path(data, path, typed_value(rng, annotation, meta))
    return data


JSON_SCALARS = [0, -1, 1, 0.5, 1e308, 10**19, 10**4300 // 10**4290, True, False, None, "", "x", "42", [], {},
                float("nan"), float("-inf"), 5, 1e-30]


def mutate_json_tree(rng: random.Random, data):
    """A benchmark result (no schema of ours): one to four changes at random key paths."""
    data = json.loads(json.dumps(data))
    for _ in range(rng.randint(1, 4)):
        node, parent, key = data, None, None
        for _ in range(rng.randint(1, 4)):
            if isinstance(node, dict) and node:
                parent, key = node, rng.choice(list(node))
            elif isinstance(node, list) and node:
                parent, key = node, rng.randrange(len(node))
            else:
                break
            node = parent[key]
        if parent is None:
            break
        r = rng.random()
        if r < 0.7:
            parent[key] = rng.choice(JSON_SCALARS)
        elif r < 0.8 and isinstance(parent, dict):
            del parent[key]
        elif r < 0.9:
            parent[key] = [rng.choice(JSON_SCALARS)] * rng.choice([3, 5000])
        else:
            parent[key] = -abs(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else node
    return data


def dump_json(rng: random.Random, data) -> bytes:
    body = json.dumps(data, allow_nan=True).encode()
    r = rng.random()
    if r < 0.05:
        return b"\xef\xbb\xbf" + body  # a UTF-8 BOM
    if r < 0.1:
        return body[: rng.randrange(len(body) + 1)]
    return body


SPECIAL = {"dev": ("{name}.dev", "<chardev>", ""), "fifo": ("{name}.fifo", "<fifo>", ""),
           "loop": ("{name}.loop", "<loop>", "/x"), "dir": ("{name}.dir", "<dir>", ""),
           "file": ("{name}.file", b"old", "/sub")}  # kind -> (file made, its body, what the path adds)


def special_path(files: dict, name: str, kind: str) -> str:
    """A path at a special file Case.materialise creates: a device node, a FIFO, a symlink loop, a
    folder, or a file where a folder belongs."""
    made, body, tail = SPECIAL[kind]
    files[made.format(name=name)] = body
    return "{tmp}/" + made.format(name=name) + tail


def odd_path(rng: random.Random, files: dict, name: str = "out") -> str:
    """An output path of an awkward kind; special files are created by Case.materialise."""
    r = rng.randrange(12)
    if r == 0:
        return "{tmp}/" + "n" * rng.choice([233, 240, 255, 256, 300])
    if r == 1:
        return "{tmp}/" + "/".join(["d"] * rng.choice([50, 300, 2000])) + f"/{name}"
    if r == 2 and os.geteuid() == 0:
        return special_path(files, name, "dev")
    if 3 <= r <= 6:
        return special_path(files, name, ("fifo", "loop", "dir", "file")[r - 3])
    if r == 7:
        return "{tmp}/missing/parent/" + name
    if r == 8:
        return "{tmp}/" + "\u00e9" * 130  # 260 bytes in UTF-8
    return "{tmp}/" + name + rng.choice(["", ".yaml", ".csv", ".json", ".md"])


def guard_env(rng: random.Random) -> dict[str, str]:
    """One or two size guards set to a value drawn from good and bad ones."""
    values = ["", "1", "10", "abc", "-1", "0", "nan", "inf", "1.5", "99999999999999999999", "1000000000000", " 7 "]
    return {g: rng.choice(values) for g in rng.sample(GUARDS, rng.randint(1, 2))}
