"""The input families issue 25's campaign found untested, generated from the schemas
(fuzz_schema.py) so that new fields and blocks are covered when they land:

- workloads with schema-typed changes anywhere (disaggregation pools, speculative, prefix,
  engine arguments, whatever Workload grows), planned with odd output paths;
- hardware profiles that point to kernel tables (paths inside, outside, absolute, symlinked,
  too long) and kernel tables changed by their schema;
- benchmark result files of every format compare reads, changed at any key path, with a sidecar
  changed by its schema, and compare's options and writers' paths;
- the size-guard environment variables, over any case;
- odd output paths for every writer (calibrate, compare --fit-out, sweep, plan --table).
"""

from __future__ import annotations

import json
import random

import yaml
from fuzz_schema import dump_json, guard_env, mutate_json_tree, mutate_spec, odd_path

from calc.spec.hardware import HardwareSpec
from calc.spec.kernel_tables import KernelTable
from calc.spec.workload import Workload

ROOT_FIXTURES = "tests/fixtures/bench"


def _root():
    from fuzz_inputs import ROOT

    return ROOT


def _yaml(data) -> bytes:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()


def workload_case(rng: random.Random, files: dict) -> list[str]:
    from fuzz_inputs import WORKLOADS, _pick

    base = yaml.safe_load(_pick(rng, WORKLOADS).read_text())
    base["requests"] = 50
    data = mutate_spec(rng, Workload, base, keep=("requests",) if rng.random() < 0.9 else ())
    files["w.yaml"] = _yaml(data)
    args = ["plan", "{tmp}/w.yaml"]
    r = rng.random()
    if r < 0.3:
        args += ["--out", odd_path(rng, files, "plan")]
    elif r < 0.5:
        args += ["--table", odd_path(rng, files, "plan.csv") + rng.choice([".csv", ".jsonl", ""])]
    return args + ["--format", "json", "-q"]


TABLE_PATHS = ["kernels/t.yaml", "../outside/t.yaml", "{tmp}/outside/t.yaml", "/etc/passwd", "/proc/self/environ",
               "kernels/link.yaml", "kernels/" + "k" * 300 + ".yaml", "kernels/missing.yaml", "kernels/"]


def kernel_profile_case(rng: random.Random, files: dict) -> list[str]:
    from fuzz_inputs import KERNELS, _pick

    tables = sorted(KERNELS.glob("*.yaml")) if KERNELS.is_dir() else []
    base = yaml.safe_load((_root() / "hardware_profiles" / "cpu-generic-2core.yaml").read_text())
    if tables:
        table = yaml.safe_load(_pick(rng, tables).read_text())
        if rng.random() < 0.5:
            table = mutate_spec(rng, KernelTable, table)
        files["prof/kernels/t.yaml"] = _yaml(table)
        files["outside/t.yaml"] = _yaml(table)
        files["prof/kernels/link.yaml"] = "<link:../../outside/t.yaml>"
    base["kernel_tables"] = rng.sample(TABLE_PATHS, rng.randint(1, 2))
    if rng.random() < 0.4:
        base = mutate_spec(rng, HardwareSpec, base, keep=("kernel_tables",))
    files["prof/hw.yaml"] = _yaml(base)
    return ["estimate", "-m", "tiny-decoder", "--hardware", "{tmp}/prof/hw.yaml", "--format", "json"]


def bench_names() -> list[str]:
    """Every benchmark result fixture (a format added to the fixtures is fuzzed with no list to update)."""
    folder = _root() / ROOT_FIXTURES
    return sorted(p.name for p in folder.iterdir() if p.suffix in (".json", ".jsonl", ".csv")
                  and not p.name.endswith(".roofline.yaml") and p.name not in ("truncated.json", "unknown.json"))


def compare_case(rng: random.Random, files: dict) -> list[str]:
    from calc.accuracy.scenario import Conditions

    names = bench_names()
    args = ["compare"]
    for i in range(rng.randint(1, 2)):
        name = rng.choice(names)
        text = (_root() / ROOT_FIXTURES / name).read_text()
        target = f"r{i}-{name}"
        if name.endswith(".json"):
            files[target] = dump_json(rng, mutate_json_tree(rng, json.loads(text))) if rng.random() < 0.85 \
                else text.encode()
        elif name.endswith(".jsonl"):
            lines = [json.loads(x) for x in text.splitlines() if x.strip()]
            if rng.random() < 0.1:
                lines = lines * 2000
            body = [json.dumps(mutate_json_tree(rng, x) if rng.random() < 0.5 else x) for x in lines[:5000]]
            files[target] = ("\n".join(body) + "\n").encode()
        else:
            files[target] = text.encode()
        if rng.random() < 0.3:
            files[f"r{i}-{name.rsplit('.', 1)[0]}.roofline.yaml"] = _yaml(mutate_spec(rng, Conditions, {}))
        args.append("{tmp}/" + target)
    if rng.random() < 0.1:
        files["fifo.json"] = "<fifo>"
        args.append("{tmp}/fifo.json")
    if rng.random() < 0.05:
        args.append("/dev/zero")
    for opt, pool in (("--hardware", ["h100-sxm", "a100-80gb-sxm", "nope"]),
                      ("--tp", ["1", "2", "3", "0", "-1", "100000"]), ("--pp", ["1", "2", "0", "70000"]),
                      ("--ep", ["1", "2", "0", "70000"]), ("--gpus", ["1", "2", "3", "0", "70000"]),
                      ("--cached-requests", ["0", "3", "-1", "99999999999"]),
                      ("--model", ["llama-3.1-8b", "nope"]), ("--engine", ["vllm", "sglang", "nope"])):
        if rng.random() < 0.4:
            args += [opt, rng.choice(pool)]
    if rng.random() < 0.3:
        args += ["--out", odd_path(rng, files, "cmp")]
    if rng.random() < 0.2:
        args += ["--fit", "--fit-out", odd_path(rng, files, "fit.yaml")]
    return args


def calibrate_out_case(rng: random.Random, files: dict) -> list[str]:
    from fuzz_inputs import KERNELS

    for t in sorted(KERNELS.glob("*.yaml")) if KERNELS.is_dir() else []:
        files[f"run/{t.name}"] = t.read_bytes()
    return ["calibrate", "--kernels", "{tmp}/run", "--hardware", "cpu-generic-2core", "--out",
            odd_path(rng, files, "cal.yaml")]


def _families():
    from fuzz_extra import args_case, catalog_case, gentle_case, web_case

    return (("plan", workload_case), ("kernels", kernel_profile_case), ("compare", compare_case),
            ("writers", calibrate_out_case), ("gentle", gentle_case), ("gentle", gentle_case), ("web", web_case),
            ("catalog", catalog_case), ("args", args_case))


def family_case(rng: random.Random):
    """One case of one of the families, with the guards set wrong one time in five."""
    from fuzz_inputs import Case

    files: dict = {}
    kind, make = rng.choice(_families())
    made = make(rng, files)
    args, env = made if isinstance(made, tuple) else (made, {})
    if rng.random() < 0.2:
        env = {**env, **guard_env(rng)}
    return Case(f"family-{kind}", args, files, env)
