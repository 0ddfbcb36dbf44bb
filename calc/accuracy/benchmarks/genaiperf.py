"""GenAI-Perf's profile export (`genai-perf profile ...`: ARTIFACT_DIR/profile_export_genai_perf.json
and .csv), as triton-inference-server/perf_analyzer's genai-perf writes it at
263c5f6e0c7a6c15472a54409174981f67930cfe (Dec 2025; the 2024 layout of 4cc7650c is read too).
GenAI-Perf is how NVIDIA NIM is benchmarked.

JSON (genai_perf/export_data/json_exporter.py): one key per metric, each the Statistics entry
of genai_perf/metrics/statistics.py: `{"unit": "ms", "avg", "min", "max", "std", "p1", "p5",
"p10", "p25", "p50", "p75", "p90", "p95", "p99"}` (np.mean / np.percentile over requests; the
2024 layout has p25..p99 only); system metrics carry `unit` and `avg` only. Then
`input_config`: the run's configuration (ConfigCommand.to_json_dict: `model_names`,
`perf_analyzer.stimulus` {"concurrency": N} or {"request_rate": R}, `endpoint.streaming`;
the 2024 layout is argparse's namespace: `model` [..], `concurrency`, `request_rate`).

CSV (csv_exporter.py): a table `Metric,avg,min,max,p99,p95,p90,p75,p50,p25[,p10,p5,p1]`, one
row per request metric named "Time To First Token (ms)" (metric.name title-cased, unit in
parentheses), values formatted `{:,.2f}`; a blank line; `Metric,Value` rows for the system
metrics ("Output Token Throughput (tokens/sec)", "Request Throughput (per sec)", ...); then GPU
telemetry. The CSV holds no configuration: the load and model come from the options or the
sidecar (`concurrency:` or `request_rate:`).

Which metric is which (genai_perf/profile_data_parser/llm_profile_data_parser.py):

time_to_first_token   first response - request, per request, ms        -> TTFT
inter_token_latency   (request latency - TTFT) / (output tokens - 1),  -> TPOT (not ITL: it is the
                      per request, ms                                      per-request mean gap vLLM calls TPOT)
request_latency       last response - request, ms                      -> e2e
output_token_throughput  all output tokens / (last response - first request)  -> output tok/s
request_throughput    requests / the same span                         -> requests/s
input_sequence_length, output_sequence_length: per-request tokens (their avg: the lengths)

The load: `concurrency` N is perf_analyzer's closed loop of N outstanding requests; a
`request_rate` R sends at R/s with perf_analyzer's default --request-distribution, constant
(evenly spaced; docs/cli.md). With neither, perf_analyzer runs concurrency 1 (config_defaults.py:
STIMULUS = {"concurrency": 1}).
"""

from __future__ import annotations

import calc.accuracy.benchmarks.schema as S
from calc.accuracy.benchmarks.common import CONSTANT_BURSTINESS, Run, measured
from calc.core.errors import SpecError

TIME_METRICS = {"time_to_first_token": "ttft", "inter_token_latency": "tpot", "request_latency": "e2e"}


def is_genaiperf(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("input_config"), dict) and any(
        isinstance(doc.get(k), dict) and "avg" in doc[k] for k in ("request_latency", "time_to_first_token"))


def is_genaiperf_csv(header: list[str]) -> bool:
    return bool(header) and header[0] == "Metric" and "avg" in header and "p99" in header


def _run(stats: dict, path: str, label: str, text: bool, **extra) -> Run:
    """A run from GenAI-Perf's statistics, ``stats[metric][stat]``."""
    metrics = {}
    for theirs, ours in TIME_METRICS.items():
        d = S.mapping(stats, theirs, path)
        unit = d.get("unit", "ms")
        if unit != "ms":
            raise SpecError(path, f"{theirs}.unit", f"{str(unit)[:20]!r}, not ms: not a GenAI-Perf layout this reads")
        for stat, name in (("avg", "mean"), ("p50", "p50"), ("p99", "p99")):
            metrics[f"{ours}_{name}_s"] = S.latency(d, stat, path, f"{theirs}.", text=text)

    def avg(key, getter=S.number):
        return getter(S.mapping(stats, key, path), "avg", path, f"{key}.", text=text)

    n = avg("request_count", S.count)
    return Run(file=path, format="genai-perf", label=label, num_requests=n or None,
               measured=measured(**metrics, output_tokens_per_s=avg("output_token_throughput"),
                                 requests_per_s=avg("request_throughput")),
               prompt_len=avg("input_sequence_length", S.tokens), output_len=avg("output_sequence_length", S.tokens),
               **extra)


def read(doc: dict, path: str) -> list[Run]:
    config = S.mapping(doc, "input_config", path)
    stimulus = S.mapping(S.mapping(config, "perf_analyzer", path, "input_config."), "stimulus", path,
                         "input_config.perf_analyzer.")
    where = "input_config.perf_analyzer.stimulus." if stimulus else "input_config."
    src = stimulus or config
    conc = S.count(src, "concurrency", path, where, low=1)
    rate = S.number(src, "request_rate", path, where, high=1e9, above=True)
    notes = []
    if stimulus and not (conc or rate):
        raise SpecError(path, where[:-1], f"stimulus {', '.join(map(str, stimulus))[:60]} is not modelled "
                                          "(concurrency or request_rate)")
    if rate is not None:
        load = {"load": "rate", "rate_per_s": rate, "burstiness": CONSTANT_BURSTINESS}
        notes.append("request_rate: evenly spaced sends (perf_analyzer's default --request-distribution constant)")
    else:
        load = {"load": "concurrency", "concurrency": conc or 1}
        if not conc:
            notes.append("no concurrency or request_rate in input_config: perf_analyzer's default concurrency 1")
    names = config.get("model_names", config.get("model"))
    if isinstance(names, list) and names:
        names = names[0]
    model_id = S.string({"model": names}, "model", path, "input_config.")
    label = f"concurrency{conc or 1}" if rate is None else f"request_rate{rate:g}"
    return [_run(doc, path, label, False, model_id=model_id, notes=tuple(notes), **load)]


def read_csv(header: list[str], rows: list[list[str]], path: str) -> list[Run]:
    """The CSV's request-metric table and system-metric rows as ``stats[metric][stat]``."""
    stats: dict[str, dict[str, str]] = {}
    columns = header[1:]
    for r in rows:
        if not r or not r[0].strip():
            continue
        name = r[0].split(" (")[0].strip().lower().replace(" ", "_")
        if name == "metric":  # the system-metric table's header, "Metric,Value"
            columns = [c.strip() if c.strip() != "Value" else "avg" for c in r[1:]]
            continue
        if name in stats:
            continue  # GPU telemetry repeats metric names per GPU: the request table came first
        stats[name] = dict(zip(columns, (c.strip() for c in r[1:]), strict=False))
    if not any(k in stats for k in TIME_METRICS):
        raise SpecError(path, None, "a GenAI-Perf CSV without its request metrics (Time To First Token, "
                                    "Request Latency)")
    return [_run(stats, path, "run", True, load=None,
                 notes=("a GenAI-Perf CSV records no load or model: they come from the options or sidecar",))]
