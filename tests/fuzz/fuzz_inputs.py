"""The fuzz harness's inputs: generated cases for every subcommand and input kind.

One input is a ``Case``: a command line plus the files it reads (model / hardware YAML,
HF config.json, workload YAML and trace CSV, calibration CSV, special files), written into a
scratch folder before the run. ``generate(rng)`` draws one from a ``random.Random`` (the
pytest harness passes hypothesis' shrinkable random, the campaign a seeded one). The issue's
reproducers are in fuzz_seeds.py; running and judging a case is fuzz_run.py.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(p.stem for p in (ROOT / "model_configs").glob("*.yaml"))
HARDWARE = sorted(p.stem for p in (ROOT / "hardware_profiles").glob("*.yaml"))
HF = sorted(p.parent.name for p in (ROOT / "tests" / "fixtures" / "hf").glob("*/config.json"))
WORKLOADS = sorted((ROOT / "reports" / "plans" / "workloads").glob("*.yaml"))
MEASURED = ROOT / "reports" / "validation" / "cpu-llama-3.2-1b-1layer"
KERNELS = ROOT / "reports" / "validation" / "cpu-heldout-1thread" / "kernels"
PLOTS = ["roofline", "ttft", "tpot-batch", "tpot-context", "throughput", "kv-memory", "breakdown", "tp"]
DTYPES = ["bf16", "fp16", "fp8", "int8", "int4", "fp4", "fp32", "tf32"]
ENGINES = ["ideal", "default", "vllm", "sglang", "trtllm", "llama.cpp", "hf"]
SMALL_MODELS = ["llama-3.2-1b", "tiny-decoder", "gpt2", "llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b",
                "gemma-3-12b", "deepseek-v2-lite"]
SMALL_MODELS = [m for m in SMALL_MODELS if m in MODELS] or MODELS[:4]

# Numbers as text: the edges of every range, non-finite values, wrong types, huge integers.
NUMBERS = ["0", "1", "2", "3", "7", "8", "64", "128", "1024", "4096", "-1", "-0", "0.5", "1.5", "1e3", "1e9",
           "1e19", "1e20", "1e308", "9223372036854775808", "99999999999999999999", "inf", "-inf", "nan", "NaN",
           "abc", "", " ", "0x10", "1_000", "1" * 5000, "16777217", "1073741825"]
RANGES = ["1,8,64", "1:100000", "1:10000000", "1:1000000000", "5:1", "1:10:0", "1:10:-1", "1:10:2", "1,-1,0",
          "1,,2", "1:2:3:4", ":", "1:", "128:8192:128", "1,2,4:16:4", "1:2000"]
# YAML scalars: non-finite, huge, wrong type, nested, null.
YAML_VALUES = [".inf", "-.inf", ".nan", "1.0e+9", "1.0e+19", "1.0e+308", str(2**63), "-1", "0", "0.5", "42.0",
               '"42"', "true", "null", "[]", "{}", "[1, 2]", "abc", "''", "1" * 5000, "2", "1", "7"]
JSON_VALUES = [42.0, "42", -1, 0, 1.5, 10**19, 10**9, True, None, [], {}, "x", [["a"]], 7, 1e308, "1", "no", 6, -5]


@dataclass
class Case:
    """One generated input: the argv, the files to create (relative name -> bytes or a special
    kind), and environment overrides."""

    kind: str
    args: list[str]
    files: dict[str, bytes | str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def materialise(self, tmp: Path) -> list[str]:
        """Write the files under ``tmp``; {tmp} in args becomes the folder."""
        for name, body in self.files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() or path.is_symlink():
                continue
            if body == "<fifo>":
                os.mkfifo(path)
            elif body == "<dir>":
                path.mkdir()
            elif body == "<chardev>":  # a /dev/null of our own (as root): writers must leave it be
                os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
            elif body == "<loop>":
                path.symlink_to(path)
            elif isinstance(body, str) and body.startswith("<link:"):
                path.symlink_to(body[len("<link:"):-1])
            else:
                path.write_bytes(body if isinstance(body, bytes) else body.encode())
        return [a.replace("{tmp}", str(tmp)) for a in self.args]


# --------------------------------------------------------------------------- generators


def _pick(rng: random.Random, seq):
    return seq[rng.randrange(len(seq))]


def _number(rng: random.Random, sane: list[str]) -> str:
    return _pick(rng, sane) if rng.random() < 0.5 else _pick(rng, NUMBERS + RANGES)


def _fmt(rng, args, bad: float = 0.25):
    if rng.random() < 0.8:
        args += ["--format", _pick(rng, ["xml", ""]) if rng.random() < bad else _pick(rng, ["json", "csv", "table"])]
    return args


def _scenario(rng: random.Random, args: list[str], lists: bool = True) -> list[str]:
    """The shared scenario options, each present with some probability."""
    sane = ["1", "2", "4", "8"]
    for opt, pool in (("--tp", sane), ("--pp", ["1", "2"]), ("--ep", ["1", "2"]), ("--imbalance", ["1", "1.2", "2"]),
                      ("--group-size", ["32", "128"])):
        if rng.random() < 0.25:
            args += [opt, _number(rng, pool)]
    for opt in ("--weight-dtype", "--kv-dtype", "--compute-dtype"):
        if rng.random() < 0.2:
            args += [opt, _pick(rng, DTYPES + ["fp7", "", "bf16,fp8", "BF16"])]
    if rng.random() < 0.15:
        args += ["--attention", _pick(rng, ["fused", "unfused", "flash", ""])]
    if rng.random() < 0.2:
        args += ["--engine", _pick(rng, ENGINES + ["vlm", ""])]
    if rng.random() < 0.1:
        args.append("--ideal")
    if rng.random() < 0.1:  # speculative decoding
        if rng.random() < 0.5:
            args += ["--spec-heads", _pick(rng, ["1", "2:4096", "0", "100000", "1:1e9", "abc", "3:0"])]
        else:
            args += ["--spec-draft", _pick(rng, ["llama-3.2-1b", "tiny-decoder", "gpt2", "nope", "/dev/zero"])]
        if rng.random() < 0.5:
            args += ["--spec-k", _number(rng, ["2", "4", "8"])]
        if rng.random() < 0.5:
            args += ["--spec-accept", _pick(rng, ["0.5", "0.9", "0", "1", "nan", "inf", "-0.1", "abc"])]
    return args


def _model_ref(rng: random.Random, files: dict) -> str:
    r = rng.random()
    if r < 0.6:
        return _pick(rng, SMALL_MODELS)
    if r < 0.75:
        files["m.yaml"] = mutate_yaml(rng, (ROOT / "model_configs" / f"{_pick(rng, SMALL_MODELS)}.yaml").read_text())
        return "{tmp}/m.yaml"
    if r < 0.9:
        files["hf/config.json"] = mutate_json(rng, (ROOT / "tests/fixtures/hf" / _pick(rng, HF) / "config.json").read_text())
        return "{tmp}/hf/config.json"
    return _special(rng, files, "model.yaml")


def _hardware_ref(rng: random.Random, files: dict) -> str:
    r = rng.random()
    if r < 0.7:
        return _pick(rng, HARDWARE)
    if r < 0.92:
        files["h.yaml"] = mutate_yaml(rng, (ROOT / "hardware_profiles" / f"{_pick(rng, HARDWARE)}.yaml").read_text())
        return "{tmp}/h.yaml"
    return _special(rng, files, "hw.yaml")


def _special(rng: random.Random, files: dict, name: str) -> str:
    """A path that is not a readable small regular file."""
    kind = rng.randrange(7)
    if kind == 0:
        files["fifo-" + name] = "<fifo>"
        return "{tmp}/fifo-" + name
    if kind == 1:
        return "/dev/zero"
    if kind == 2:
        return "{tmp}/" + "a" * 300 + ".yaml"
    if kind == 3:
        files["dir-" + name] = "<dir>"
        return "{tmp}/dir-" + name
    if kind == 4:
        return "{tmp}/missing/" + name
    if kind == 5:
        files["latin1-" + name] = b"name: caf\xe9\nnum_layers: 2\n"
        return "{tmp}/latin1-" + name
    files["empty-" + name] = b""
    return "{tmp}/empty-" + name


def mutate_yaml(rng: random.Random, text: str) -> bytes:
    """A YAML file with one to three lines changed: a value replaced, a key dropped or doubled,
    an unknown key, bytes that are not UTF-8, a truncation or deep nesting."""
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        keyed = [i for i, ln in enumerate(lines) if re.match(r"^\s*[A-Za-z_][\w-]*:\s*\S", ln) and "#" not in ln[:1]]
        op = rng.randrange(10)
        if op <= 4 and keyed:
            i = _pick(rng, keyed)
            indent, key = re.match(r"^(\s*)([\w-]+):", lines[i]).groups()
            lines[i] = f"{indent}{key}: {_pick(rng, YAML_VALUES)}"
        elif op == 5 and keyed:
            del lines[_pick(rng, keyed)]
        elif op == 6 and keyed:
            i = _pick(rng, keyed)
            lines.insert(i + 1, lines[i])  # a duplicate key
        elif op == 7:
            lines.append(f"{_pick(rng, ['bogus', 'num_layer', 'memory_gbs'])}: 1")
        elif op == 8:
            lines = lines[: rng.randrange(len(lines) + 1)]
        else:
            lines.append("deep: " + "[" * rng.choice([10, 1000, 100000]) + "]" * rng.choice([0, 10]))
    body = ("\n".join(lines) + "\n").encode()
    if rng.random() < 0.05:
        body = body.replace(b"a", b"\xe9", 1)
    return body


def mutate_json(rng: random.Random, text: str) -> bytes:
    cfg = json.loads(text)
    target = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    keys = list(target)
    extra = ["layer_types", "mlp_only_layers", "sliding_window_pattern", "max_window_layers", "attention_bias",
             "decoder_sparse_step", "use_sliding_window", "architectures"]
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        key = _pick(rng, keys + extra)
        if op <= 3:
            target[key] = _pick(rng, JSON_VALUES + [["sliding_attention"] * rng.randint(0, 60), "sliding_attention"])
        elif op == 4 and key in target:
            del target[key]
        else:
            return ("[" * 100_000 + "]" * 100_000).encode() if rng.random() < 0.5 else text[: len(text) // 2].encode()
    return json.dumps(target if target is not cfg and rng.random() < 0.1 else cfg).encode()


def _workload(rng: random.Random, files: dict) -> str:
    base = (_pick(rng, WORKLOADS)).read_text()
    base = re.sub(r"^requests:.*$", "requests: 200", base, flags=re.M)
    if "requests:" not in base:
        base += "requests: 200\n"
    lines = base.splitlines()
    if rng.random() < 0.3:
        files["trace.csv"] = _trace(rng)
        lines = [ln for ln in lines if not ln.startswith(("prompt_len", "output_len", "  "))
                 or ln.startswith("  ") and not any(x in ln for x in ("dist:", "value:", "median:", "sigma:",
                                                                       "low:", "high:", "mean:", "std:", "min:", "max:"))]
        lines.append("trace: trace.csv")
    extras = ["seed: -1", "seed: 1.0e+30", "requests: 1.0e+9", "requests: 200000", "max_batch: [1.0e+9]",
              "prices: {h100-sxm: .inf}", "slo: {ttft_p99_s: .inf}", "serving: {block_size: 1000000000}",
              "serving: {block_size: 1048576}", "dtypes: {weight: fp7}", "arrival: {rate_per_s: .inf}",
              "arrival: {rate_per_s: 1.0e+30}", "arrival: {concurrency: 100000000}", "tp: [0]", "tp: [3]",
              "max_gpus: 1.0e+9", "prompt_len: {dist: normal, mean: 100, std: 1.0e+30}",
              "prompt_len: {dist: lognormal, median: 1000, sigma: 50}", "output_len: {dist: fixed, value: 0}",
              "engine: nope", "hardware: []", "model: nope", "chunk_tokens: [512, 2048]", "chunk_tokens: [0]",
              "chunk_tokens: [1.0e+12]", "prefix_cache: {shared_tokens: 1000000000000, hit_rate: 0.5}",
              "prefix_cache: {shared_tokens: 100, hit_rate: 1.5}",
              "disaggregation: {network_gb_s: .inf}", "disaggregation: {gpus_per_node: 0}"]
    text = "\n".join(lines) + "\n"
    body = mutate_yaml(rng, text) if rng.random() < 0.5 else text.encode()
    if rng.random() < 0.6:
        body += ("\n".join(rng.sample(extras, rng.randint(1, 2))) + "\n").encode()
    files["w.yaml"] = body
    return "{tmp}/w.yaml"


def _trace(rng: random.Random) -> bytes:
    rows = ["prompt_len,output_len"]
    for _ in range(rng.randint(0, 20)):
        rows.append(f"{_pick(rng, ['100', '512', '2000'])},{_pick(rng, ['10', '128'])}")
    if rng.random() < 0.6:
        rows.insert(rng.randint(1, len(rows)), f"{_pick(rng, NUMBERS)},{_pick(rng, NUMBERS)}")
    if rng.random() < 0.1:
        rows = ["prompt,output"] + rows[1:]
    body = ("\n".join(rows) + "\n").encode()
    return body[: rng.randrange(len(body) + 1)] if rng.random() < 0.1 else body


def _measurements(rng: random.Random) -> bytes:
    text = (MEASURED / "measurements.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    for _ in range(rng.randint(0, 3)):
        r, c = rng.randrange(len(body)), rng.randrange(len(header))
        body[r][c] = _pick(rng, NUMBERS + ["prefill", "decode", "fp7", " ", "ok", "oom"])
    if rng.random() < 0.05:
        body = body * 300  # 24,000 rows
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, *body])
    out = buf.getvalue().encode()
    if rng.random() < 0.15:
        out = out[: rng.randrange(len(out))]  # truncated mid-row
    if rng.random() < 0.05:
        out = out.replace(b"cpu", b"cp\xe9", 1)
    return out


def generate(rng: random.Random) -> Case:
    """One input, of a kind drawn at random (every subcommand and every input kind; a third of
    half of them from the schema-generated families of fuzz_families.py and fuzz_extra.py)."""
    if rng.random() < 0.5:
        from fuzz_families import family_case

        return family_case(rng)
    files: dict = {}
    kind = _pick(rng, ["estimate", "estimate", "ops", "intensity", "sweep", "plot", "show", "listing", "plan",
                       "calibrate", "validate", "accuracy", "validate-comm", "usage"])
    if kind == "estimate":
        args = ["estimate", "-m", _model_ref(rng, files), "--hardware", _hardware_ref(rng, files)]
        for opt, pool in (("--batch", ["1", "8", "1,8,64"]), ("--prompt-len", ["512", "128:1024:128"]),
                          ("--output-len", ["128", "2"])):
            if rng.random() < 0.6:
                args += [opt, _number(rng, pool)]
        args = _fmt(rng, _scenario(rng, args))
    elif kind == "ops":
        args = ["ops", "-m", _model_ref(rng, files), "--hardware", _hardware_ref(rng, files),
                "--phase", _pick(rng, ["prefill", "decode", "decode", "both"])]
        for opt, pool in (("--batch", ["1", "8"]), ("--seq-len", ["1024", "1"])):
            if rng.random() < 0.6:
                args += [opt, _number(rng, pool)]
        args = _fmt(rng, _scenario(rng, args))
    elif kind == "intensity":
        args = _fmt(rng, ["intensity", "-m", _model_ref(rng, files), "--seq-len", _number(rng, ["128,1024", "1"])])
    elif kind == "sweep":
        args = ["sweep", "-m", ",".join(rng.sample(SMALL_MODELS, rng.randint(1, 2))), "--hardware",
                _pick(rng, ["h100-sxm", "h100-sxm,l4", "a100-80gb-sxm", "nope"])]
        for opt, pool in (("--batch", ["1,8", "1:64"]), ("--prompt-len", ["512", "128:2048:128"]),
                          ("--output-len", ["128"]), ("--context", ["1024,2048"])):
            if rng.random() < 0.4:
                args += [opt, _number(rng, pool)]
        args = _scenario(rng, args)
        if rng.random() < 0.4:
            args += ["--out", "{tmp}/" + _pick(rng, ["s.csv", "s.jsonl", "s.parquet", "nodir/s.csv", "s.json", "s.xlsx"])]
        if rng.random() < 0.2:
            args.append("--quiet")
        if rng.random() < 0.1:
            args += ["--columns", _pick(rng, ["ttft_s", "nope", "tpot_s,ttft_s"])]
        if rng.random() < 0.05:
            args.append("--yes")
    elif kind == "plot":
        args = ["plot", _pick(rng, PLOTS + ["pie"]), "-m", _pick(rng, SMALL_MODELS), "--hardware",
                _pick(rng, ["h100-sxm", "h100-sxm,l4", "l4"])]
        if rng.random() < 0.9:
            args += ["--out", "{tmp}/" + _pick(rng, ["p.png", "p.svg", "p.jpg", "nodir/p.png", "p"])]
        for opt, pool in (("--batch", ["1,8,32"]), ("--context", ["1024:8192:1024"]), ("--tp", ["1,2,4"]),
                          ("--prompt-len", ["512"]), ("--output-len", ["128"])):
            if rng.random() < 0.25:
                args += [opt, _number(rng, pool)]
        if rng.random() < 0.1:
            args += ["--phase", _pick(rng, ["prefill", "decode", "both", "x"])]
    elif kind == "show":
        r = rng.random()
        ref = (_model_ref(rng, files) if r < 0.4 else _hardware_ref(rng, files) if r < 0.8
               else _pick(rng, ["nope", "llama", "h100", ""]))
        args = _fmt(rng, ["show", ref])
    elif kind == "listing":
        args = _fmt(rng, [_pick(rng, ["models", "hardware", "engines"])])
        if rng.random() < 0.3:
            files["cat/bad.yaml"] = mutate_yaml(rng, (ROOT / "model_configs" / "llama-3.2-1b.yaml").read_text())
            return Case(kind, args, files, {"ROOFLINE_MODEL_PATH": "{tmp}/cat", "ROOFLINE_HARDWARE_PATH": "{tmp}/cat"})
    elif kind == "plan":
        args = ["plan", _workload(rng, files) if rng.random() < 0.9 else _special(rng, files, "w.yaml")]
        if rng.random() < 0.15:
            args += ["--requests", _pick(rng, ["10", "50", "9", "-1", "1e9", "abc", "100000"])]
        if rng.random() < 0.2:
            args += ["--out", "{tmp}/" + _pick(rng, ["plan", "w.yaml", "nodir/plan"])]
        args = _fmt(rng, args, bad=0.05)
    elif kind == "calibrate":
        # a kernel-table folder (roofline profile's): the saved tables, one or two of them mutated,
        # or not a table folder at all
        tables = sorted(KERNELS.glob("*.yaml")) if KERNELS.is_dir() else []
        bad = rng.randrange(len(tables)) if tables and rng.random() < 0.5 else None
        for i, table in enumerate(tables):
            body = table.read_text()
            files[f"run/{table.name}"] = mutate_yaml(rng, body) if i == bad else body
        if rng.random() < 0.1:
            files["run/measurements.csv"] = _measurements(rng)
        if rng.random() < 0.05:
            files["run/fifo.yaml"] = "<fifo>"
        args = ["calibrate", "--kernels", _pick(rng, ["{tmp}/run"] * 8 + ["{tmp}/none", "/dev/zero", "{tmp}/run/x"]),
                "--hardware", _pick(rng, ["cpu-generic-2core", "cpu-generic-2core", "h100-sxm", "nope"]),
                "--out", "{tmp}/" + _pick(rng, ["cal.yaml", "nodir/cal.yaml", "run"])]
    elif kind == "validate":
        # always invalid in at least one place: a valid run times torch for a minute
        bad = {"--dtype": _pick(rng, ["fp7", "", ",", "fp8", "int4", "fp32,fp7"]),
               "--model": _pick(rng, ["nope", "llama-3.1-405b", "/dev/zero", "{tmp}/" + "a" * 300]),
               "--out": "{tmp}/afile", "--layers": _pick(rng, ["0", "-1", "abc", "1e9", "1000"]),
               "--device": _pick(rng, ["tpu", "", "cuda:99"]), "--threads": _pick(rng, ["0", "abc"]),
               "--budget": _pick(rng, ["0", "nan", "-1", "inf"]), "--impl": _pick(rng, ["x", ""])}
        which = rng.choice([k for k in bad if k not in ("--device", "--impl", "--budget", "--layers")])
        opts = {"--model": "tiny-decoder", "--out": "{tmp}/v", "--dtype": "fp32", "--quick": None}
        opts[which] = bad[which]
        for k in rng.sample(list(bad), rng.randint(0, 2)):
            opts[k] = bad[k]
        files["afile"] = b"x"
        args = ["validate"] + [t for k, v in opts.items() for t in ((k,) if v is None else (k, v))]
    elif kind == "accuracy":
        files["afile"] = b"x"
        args = ["accuracy", "--out", _pick(rng, ["{tmp}/afile", "/dev/null", "{tmp}/afile/sub"]), "--no-fit"]
    elif kind == "validate-comm":
        args = ["validate-comm", "--world-size", _pick(rng, ["0", "1", "-1", "abc", "1e3"]),
                "--out", "{tmp}/c"]
        if rng.random() < 0.5:
            args += ["--backend", _pick(rng, ["mpi", "gloo", "", "nccl"])]
    else:  # usage: unknown commands and options, missing values
        args = _pick(rng, [["nocmd"], ["estimate", "--bogus"], ["estimate", "-m"], ["ops", "--batch", "0"],
                           ["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--format", "xml"],
                           ["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "abc"],
                           ["show"], ["plot"], ["sweep", "--batch"], ["plan"], ["calibrate"], ["--bogus"]])
    return Case(kind, args, files)
