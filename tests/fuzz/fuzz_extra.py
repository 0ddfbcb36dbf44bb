"""More fuzz families, for the paths the first ones reach only through errors:

- ``gentle``: inputs one small step from a valid one (one schema change to a workload with a
  disaggregation, speculative or prefix block; one number changed in a benchmark result; a
  valid scenario with one flag set), so the exit-0 paths are judged for silent nonsense, not
  only the error paths for their one line;
- ``web``: the page's JSON API (estimate, ops, sweep, explore, show, compare, plan's workload
  check) called in-process with generated query parameters and bodies, judged as the CLI is
  (a 400 whose line is ``roofline: error: WHERE: problem``);
- ``catalog``: models / hardware / engines / show over catalog folders of mutated, special and
  too many files (``ROOFLINE_MODEL_PATH``, ``ROOFLINE_HARDWARE_PATH``), and names near and far
  from the catalog's;
- ``args``: argument checking of the commands whose real work is long (accuracy, calibrate,
  validate, profile, validate-comm, serve): awkward output paths and bad values, never a valid run.
"""

from __future__ import annotations

import json
import os
import random

import yaml
from fuzz_schema import STRINGS, mutate_json_tree, mutate_spec, special_path

WEB_ROUTES = ("estimate", "ops", "sweep", "explore", "show", "compare", "workload")
GENTLE_BLOCKS = [
    {"disaggregation": {"prefill": {"tp": [1], "max_batch": [8]}, "decode": {"tp": [1], "max_batch": [16, 32]}}},
    {"speculative": {"draft": "llama-3.2-1b", "k": 4, "acceptance": 0.7}},
    {"prefix_cache": {"shared_tokens": 256, "hit_rate": 0.5}},
    {"chunk_tokens": [512, 2048]},
    {"max_batch": [8, 64]},
]


def _root():
    from fuzz_inputs import ROOT

    return ROOT


def _yaml(data) -> bytes:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()


def awkward_path(rng: random.Random, files: dict, name: str) -> str:
    """An output path every writer must refuse before any long work starts: a name or a path the
    system cannot look up, a device node, a FIFO, a symlink loop, a file where a folder belongs.
    (odd_path's legal ones, names of 233-255 bytes or a new file, would start a real run.)"""
    r = rng.randrange(8)
    if r == 0:
        return "{tmp}/" + "n" * rng.choice([256, 300])
    if r == 1:
        return "{tmp}/" + "/".join(["d"] * rng.choice([300, 2000])) + f"/{name}"
    if r == 2 and os.geteuid() == 0:
        return special_path(files, name, "dev")
    if 3 <= r <= 5:
        return special_path(files, name, ("fifo", "loop", "file")[r - 3])
    if r == 6:
        return "{tmp}/" + "\u00e9" * 130  # 260 bytes in UTF-8
    return "/proc/version"  # a file the system owns


# --------------------------------------------------------------------------- gentle


def gentle_case(rng: random.Random, files: dict) -> list[str]:
    from fuzz_inputs import SMALL_MODELS, WORKLOADS, _pick

    from calc.spec.workload import Workload

    r = rng.random()
    if r < 0.4:  # a workload with one block added, then at most one schema change
        base = yaml.safe_load(_pick(rng, WORKLOADS).read_text())
        base["requests"] = rng.choice([10, 30])
        for key in ("max_batch", "chunk_tokens", "tp"):  # a small search: bounded by design
            if isinstance(base.get(key), list):
                base[key] = base[key][:2]
        base.update(rng.choice(GENTLE_BLOCKS))
        if rng.random() < 0.7:
            base = mutate_spec(rng, Workload, base, keep=("requests", "max_batch", "chunk_tokens", "tp"))
        files["w.yaml"] = _yaml(base)
        return ["plan", "{tmp}/w.yaml", "--format", "json", "-q"]
    if r < 0.75:  # one benchmark result, one value changed
        from fuzz_families import bench_names

        name = rng.choice(bench_names())
        text = (_root() / "tests/fixtures/bench" / name).read_text()
        if name.endswith(".json"):
            data = json.loads(text)
            files[name] = json.dumps(_one_change(rng, data), allow_nan=True).encode()
        else:
            files[name] = text.encode()
        args = ["compare", "{tmp}/" + name, "--format", rng.choice(["json", "csv"])]
        if rng.random() < 0.3:
            args += ["--hardware", rng.choice(["h100-sxm", "a100-80gb-sxm"])]
        return args
    # a valid scenario with one flag: speculative, MoE, quantised, engine
    model = _pick(rng, SMALL_MODELS)
    args = ["estimate", "-m", model, "--hardware", rng.choice(["h100-sxm", "a100-80gb-sxm", "l4"]),
            "--batch", rng.choice(["1", "8", "1,16"]), "--format", "json"]
    extra = rng.choice([["--spec-draft", "llama-3.2-1b", "--spec-k", rng.choice(["1", "4", "16"]),
                         "--spec-accept", rng.choice(["0", "0.5", "0.99"])],
                        ["--spec-heads", rng.choice(["1:1", "2:4096", "4:128"]), "--spec-accept", "0.6"],
                        ["--weight-dtype", rng.choice(["int4", "int8", "fp4", "fp8"]), "--group-size",
                         rng.choice(["32", "64", "128"])],
                        ["--kv-dtype", "fp8"], ["--engine", rng.choice(["vllm", "sglang", "trtllm", "llama.cpp", "hf"])],
                        ["--tp", rng.choice(["2", "4", "8"])], ["--pp", "2"],
                        ["--prompt-len", rng.choice(["1", "100000", "131072"]), "--output-len", rng.choice(["1", "2"])]])
    return args + extra


def _one_change(rng: random.Random, data):
    """``data`` with one number somewhere scaled by a factor drawn from the edges (negative, zero, huge)."""
    data = json.loads(json.dumps(data))
    numbers = []

    def walk(node):
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            if isinstance(v, int | float) and not isinstance(v, bool):
                numbers.append((node, k))
            else:
                walk(v)

    walk(data)
    if numbers:
        node, k = rng.choice(numbers)
        node[k] = rng.choice([-1, -node[k], 0, node[k] * 1e6, node[k] * 1e-9, 1e300, True, node[k] + 0.5])
    return data


# --------------------------------------------------------------------------- web


def _query(rng: random.Random, command: str) -> dict:
    from fuzz_inputs import DTYPES, HARDWARE, SMALL_MODELS, _number

    q = {"model": rng.choice(SMALL_MODELS + ["nope", "../model_configs/x.yaml", "/etc/passwd", "llama"]),
         "hardware": rng.choice(HARDWARE[:6] + ["nope", "h100", "/dev/zero"])}
    pool = {"batch": ["1", "8", "1,8"], "prompt-len": ["512", "128:1024:128"], "output-len": ["128"],
            "tp": ["1", "2"], "weight-dtype": DTYPES, "engine": ["vllm", "ideal"], "context": ["1024"],
            "phase": ["prefill", "decode", "both"], "seq-len": ["1024"], "spec-accept": ["0.5"],
            "spec-k": ["4"], "ideal": ["true", "no", "maybe"], "bands": ["1", "0"],
            "out": ["{tmp}/x.csv"], "bogus": ["1"], "prompt_len": ["64"]}
    for key in rng.sample(list(pool), rng.randint(0, 4)):
        q[key] = _number(rng, pool[key]) if rng.random() < 0.4 else rng.choice(pool[key])
    if command == "ops":
        q.setdefault("phase", "decode")
    if rng.random() < 0.1:
        q = {rng.choice(STRINGS): rng.choice(STRINGS)}
    return q


def web_case(rng: random.Random, files: dict) -> list[str]:
    """``["@web", route, JSON]``: fuzz_run calls the route's answer function in-process."""
    from fuzz_families import bench_names

    route = rng.choice(WEB_ROUTES)
    if route in ("estimate", "ops", "sweep", "explore"):
        payload = _query(rng, route)
    elif route == "show":
        payload = rng.choice([{"ref": rng.choice(["llama-3.1-8b", "h100-sxm", "nope", "/etc/passwd", ""])},
                              {}, {"ref": "gpt2", "x": "1"}])
    elif route == "compare":
        entries = []
        for _ in range(rng.randint(0, 2)):
            name = rng.choice(bench_names())
            text = (_root() / "tests/fixtures/bench" / name).read_text()
            if name.endswith(".json") and rng.random() < 0.6:
                text = json.dumps(mutate_json_tree(rng, json.loads(text)) if rng.random() < 0.5
                                  else _one_change(rng, json.loads(text)), allow_nan=True)
            entries.append({"name": rng.choice([name, "../" + name, "x" * 300 + ".json", "", None, 5]),
                            "text": text if rng.random() < 0.95 else rng.choice([None, 5, ""])})
        payload = {"files": entries if rng.random() < 0.95 else rng.choice([None, "x", [1]]),
                   "options": rng.choice([{}, {"hardware": "h100-sxm"}, {"tp": "3"}, {"model": "/etc/passwd"},
                                          {"engine": "../x.yaml"}, "x", {"fit": "1"}])}
    else:
        from fuzz_inputs import WORKLOADS, _pick

        from calc.spec.workload import Workload

        base = yaml.safe_load(_pick(rng, WORKLOADS).read_text())
        if rng.random() < 0.5:
            base = mutate_spec(rng, Workload, base)
        if rng.random() < 0.2:
            base["trace"] = rng.choice(["t.csv", "../t.csv", "/etc/passwd"])
        payload = {"yaml": yaml.safe_dump(base) if rng.random() < 0.95 else rng.choice(["", None, 5, "[1"]),
                   "files": rng.choice([[], [{"name": "t.csv", "text": "prompt_len,output_len\n10,5\n"}]])}
    return ["@web", route, json.dumps(payload, allow_nan=True)]


# --------------------------------------------------------------------------- catalog


def catalog_case(rng: random.Random, files: dict) -> tuple[list[str], dict]:
    from fuzz_inputs import HARDWARE, MODELS, _pick

    from calc.spec.hardware import HardwareSpec
    from calc.spec.model import ModelSpec

    env = {}
    if rng.random() < 0.6:
        n = rng.choice([1, 3, 30])
        for i in range(n):
            if rng.random() < 0.5:
                base = yaml.safe_load((_root() / "model_configs" / f"{_pick(rng, MODELS)}.yaml").read_text())
                body = mutate_spec(rng, ModelSpec, base) if rng.random() < 0.5 else base
            else:
                base = yaml.safe_load((_root() / "hardware_profiles" / f"{_pick(rng, HARDWARE)}.yaml").read_text())
                body = mutate_spec(rng, HardwareSpec, base) if rng.random() < 0.5 else base
            files[f"cat/f{i}.yaml"] = _yaml(body)
        if rng.random() < 0.1:
            files["cat/fifo.yaml"] = "<fifo>"
        if rng.random() < 0.1:
            files["cat/loop.yaml"] = "<loop>"
        if rng.random() < 0.1:
            files["cat/" + "l" * 250 + ".yaml"] = b"name: x\n"
        key = rng.choice(["ROOFLINE_MODEL_PATH", "ROOFLINE_HARDWARE_PATH"])
        env[key] = rng.choice(["{tmp}/cat", "{tmp}/cat:{tmp}/missing", "{tmp}/" + "p" * 300, "/dev/zero", ""])
    cmd = rng.choice(["models", "hardware", "engines", "show", "show"])
    if cmd == "show":
        args = ["show", rng.choice(MODELS[:5] + HARDWARE[:5] + ["f0", "llama-3.1-8", "zzzzqqq", "x" * 300, "", "-"])]
    else:
        args = [cmd]
    if rng.random() < 0.7:
        args += ["--format", rng.choice(["json", "csv", "table", "md"])]
    return args, env


# --------------------------------------------------------------------------- argument checking


def args_case(rng: random.Random, files: dict) -> list[str]:
    cmd = rng.choice(["accuracy", "calibrate", "validate", "profile", "validate-comm", "serve", "compare-fit"])
    if cmd == "accuracy":
        args = ["accuracy", "--no-fit", "-q"]
        which = rng.choice(["--out", "--bands-out", "both"])
        if which in ("--out", "both"):
            args += ["--out", awkward_path(rng, files, "acc")]
        if which in ("--bands-out", "both"):
            args += ["--bands-out", awkward_path(rng, files, "bands.yaml")]
        if which == "--bands-out":
            args += ["--out", "{tmp}/missing/acc"]
        return args
    if cmd == "calibrate":
        from fuzz_inputs import KERNELS

        for t in sorted(KERNELS.glob("*.yaml"))[:2] if KERNELS.is_dir() else []:
            files[f"run/{t.name}"] = t.read_bytes()
        opts = {"--kernels": "{tmp}/run", "--hardware": "cpu-generic-2core", "--out": "{tmp}/c.yaml"}
        bad = {"--kernels": rng.choice(["{tmp}/none", "/dev/zero", "", "{tmp}/" + "k" * 300]),
               "--hardware": rng.choice(["nope", "", "/dev/zero", "{tmp}/run"]),
               "--out": awkward_path(rng, files, "c.yaml")}
        k = rng.choice(list(bad) + ["missing"])
        if k == "missing":
            opts.pop(rng.choice(list(opts)))
        else:
            opts[k] = bad[k]
        return ["calibrate"] + [t for kv in opts.items() for t in kv]
    if cmd == "validate":
        return ["validate", "-m", "tiny-decoder", "--quick", "--out", awkward_path(rng, files, "v")]
    if cmd == "profile":
        opts = {"--out": "{tmp}/p", "--quick": None}
        bad = {"--out": awkward_path(rng, files, "p"), "--device": rng.choice(["tpu", "", "cuda:99", "cpu,cuda"]),
               "--threads": rng.choice(["0", "-1", "abc", "1e9"]), "--dtype": rng.choice(["fp7", "", ",", "int3"])}
        k = rng.choice(list(bad))
        opts[k] = bad[k]
        return ["profile"] + [t for kv in opts.items() for t in ((kv[0],) if kv[1] is None else kv)]
    if cmd == "validate-comm":
        return ["validate-comm", "--world-size", rng.choice(["2", "0", "-3", "1e9", "abc"]), "--out",
                awkward_path(rng, files, "c"), "--backend", rng.choice(["gloo", "mpi", "nccl", ""]), "--quick"]
    if cmd == "serve":
        return ["serve", "--port", rng.choice(["-1", "65536", "abc", "1e9"]), "--host",
                rng.choice(["127.0.0.1", "", "0.0.0.0"])]
    # compare --fit with an awkward --fit-out (and sometimes an existing --out file)
    from fuzz_families import bench_names

    name = rng.choice(bench_names())
    files[name] = (_root() / "tests/fixtures/bench" / name).read_bytes()
    args = ["compare", "{tmp}/" + name, "--fit", "--fit-out", awkward_path(rng, files, "fit.yaml")]
    if rng.random() < 0.3:
        files["cmp.file"] = b"old"
        args += ["--out", "{tmp}/cmp.file"]
    return args
