"""Issue 17's reproducers, one explicit fuzz case each (the harness's seeds), numbered by the
issue's list: non-UTF-8 files (1), a documented format (2), --imbalance (3), size guards (4),
workloads (5), calibration CSVs (6), HF config.json types (7), model/hardware YAML (8),
validate/accuracy options (9), special files and long names (10), negative or infinite
output (11), click's usage errors (13)."""

from __future__ import annotations

import json

from fuzz_inputs import MEASURED, ROOT, Case


def _seed(kind, args, files=None, env=None) -> Case:
    return Case(kind, args, files or {}, env or {})


_M, _H = ["-m", "llama-3.1-8b"], ["--hardware", "h100-sxm"]
_WL = ("name: t\nmodel: llama-3.1-8b\nhardware: [h100-sxm]\narrival: {rate_per_s: 2}\n"
       "prompt_len: {dist: fixed, value: 100}\noutput_len: {dist: fixed, value: 10}\n")
_HF = (ROOT / "tests/fixtures/hf/gemma-2-9b/config.json").read_text() if (ROOT / "tests/fixtures/hf").exists() else "{}"


def _hf(**changes) -> bytes:
    cfg = json.loads(_HF)
    cfg.update(changes)
    return json.dumps(cfg).encode()


def _csv_cell(column: str, value: str) -> bytes:
    lines = (MEASURED / "measurements.csv").read_text().splitlines()
    header, first = lines[0].split(","), lines[1].split(",")
    first[header.index(column)] = value
    return ("\n".join([lines[0], ",".join(first), *lines[2:]]) + "\n").encode()


def _calibrate(body: bytes) -> Case:
    return _seed("calibrate", ["calibrate", "--kernels", "{tmp}/run", "--hardware",
                               "cpu-generic-2core", "--out", "{tmp}/cal.yaml"],
                 {"run/measurements.csv": body, "run/model.yaml": (MEASURED / "model.yaml").read_bytes()})


SEEDS: list[Case] = [
    _seed("show", ["show", "{tmp}/x.yaml"], {"x.yaml": b"name: caf\xe9\n"}),                        # 1
    _calibrate((MEASURED / "measurements.csv").read_bytes().replace(b"cpu", b"cp\xe9", 1)),           # 1
    _seed("listing", ["hardware", "--format", "csv"]),                                                  # 2
    _seed("estimate", ["estimate", *_M, *_H, "--imbalance", "inf"]),                                    # 3
    _seed("estimate", ["estimate", *_M, *_H, "--imbalance", "nan", "-f", "json"]),                      # 3
    _seed("estimate", ["estimate", *_M, *_H, "--imbalance", "1e308", "-f", "json"]),                    # 3
    _seed("estimate", ["estimate", *_M, *_H, "--batch", "1:100000"]),                                   # 4
    _seed("estimate", ["estimate", *_M, *_H, "--batch", "1:10000000"]),                                 # 4
    _seed("intensity", ["intensity", *_M, "--seq-len", "1:100000000"]),                                # 4
    _seed("sweep", ["sweep", "--batch", "1:1000000000"]),                                               # 4
    _seed("sweep", ["sweep", "--batch", "1:2000", "--prompt-len", "1:2000"]),                          # 4
    *[_seed("plan", ["plan", "{tmp}/w.yaml"], {"w.yaml": _WL + extra}) for extra in (                  # 5
        "seed: -1\n", "requests: 1.0e+9\n", "max_batch: [1.0e+9]\n", "prices: {h100-sxm: .inf}\n",
        "slo: {ttft_p99_s: .inf}\n", "serving: {block_size: 1000000000}\n", "dtypes: {weight: fp7}\n")],
    _seed("plan", ["plan", "{tmp}/w.yaml"], {"w.yaml": _WL.replace("{rate_per_s: 2}", "{rate_per_s: .inf}")}),
    _seed("plan", ["plan", "{tmp}/w.yaml"],
          {"w.yaml": _WL.replace("{dist: fixed, value: 100}", "{dist: normal, mean: 100, std: 1.0e+30}")}),
    _seed("plan", ["plan", "{tmp}/w.yaml"],
          {"w.yaml": _WL.split("prompt_len")[0] + "trace: t.csv\n", "t.csv": b"prompt_len,output_len\n1e20,5\n"}),
    _calibrate(_csv_cell("dtype", " ")),                                                                # 6
    _calibrate(_csv_cell("samples", "-inf")),
    _calibrate(_csv_cell("measured_s", "inf")),
    _calibrate(_csv_cell("batch", "-1")),
    _calibrate((MEASURED / "measurements.csv").read_bytes()[:900]),
    _calibrate((MEASURED / "measurements.csv").read_bytes() * 1 + b"\n".join(
        (MEASURED / "measurements.csv").read_bytes().splitlines()[1:]) * 300),
    *[_seed("show", ["show", "{tmp}/g/config.json"], {"g/config.json": _hf(**c)}) for c in (          # 7
        {"num_hidden_layers": 42.0}, {"num_hidden_layers": "42"}, {"mlp_only_layers": 5},
        {"max_window_layers": "x"}, {"layer_types": 7}, {"sliding_window_pattern": "6"},
        {"architectures": [["LlamaForCausalLM"]]}, {"layer_types": ["sliding_attention"] * 3},
        {"layer_types": "sliding_attention"}, {"attention_bias": "no"}, {"sliding_window_pattern": -1},
        {"sliding_window_pattern": 1.5})],
    _seed("show", ["show", "{tmp}/deep/config.json"], {"deep/config.json": b"[" * 100_000 + b"]" * 100_000}),
    *[_seed("show", ["show", "{tmp}/m.yaml"], {"m.yaml": (ROOT / "model_configs/llama-3.1-8b.yaml").read_text()
                                              .replace("num_layers: 32", f"num_layers: {v}")})          # 8
      for v in ("1.0e+9", str(2**63), "1" * 5000)],
    _seed("show", ["show", "{tmp}/h.yaml"], {"h.yaml": (ROOT / "hardware_profiles/h100-sxm.yaml").read_text()
                                           .replace("memory_gb: 80", "memory_gb: .inf")}),
    _seed("show", ["show", "{tmp}/d.yaml"], {"d.yaml": (ROOT / "model_configs/llama-3.1-8b.yaml").read_text()
                                           + "num_layers: 16\n"}),
    _seed("validate", ["validate", "-m", "tiny-decoder", "--out", "{tmp}/v", "--dtype", "fp7"]),        # 9
    _seed("validate", ["validate", "-m", "tiny-decoder", "--out", "{tmp}/v", "--dtype", ""]),
    _seed("accuracy", ["accuracy", "--out", "{tmp}/afile", "--no-fit"], {"afile": b"x"}),
    _seed("show", ["show", "{tmp}/" + "a" * 300 + ".yaml"]),                                            # 10
    _seed("show", ["show", "{tmp}/x.yaml"], {"x.yaml": "<fifo>"}),
    _seed("listing", ["models"], {"cat/f.yaml": "<fifo>"}, {"ROOFLINE_MODEL_PATH": "{tmp}/cat"}),
    _seed("show", ["show", "/dev/zero"]),
    _seed("intensity", ["intensity", *_M, "--seq-len", "1,-1,0", "-f", "json"]),                        # 11
    _seed("ops", ["ops", *_M, *_H, "--batch", "99999999999999999999", "-f", "json"]),
    _seed("usage", ["ops", *_M, *_H, "--batch", "0"]),                                                  # 13
    _seed("usage", ["estimate", *_M, *_H, "--format", "xml"]),
    _seed("usage", ["estimate", *_M, *_H, "--tp", "abc"]),
]
