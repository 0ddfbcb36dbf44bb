"""LMDeploy's benchmark scripts' CSV results (InternLM/lmdeploy @
1263d5cd889b7ad500e85b8eb20401327a4516ab). Both append one row per run, with a header when the
file is new; both write CSV whatever the file is called (profile_restful_api names a random-
dataset run `*.jsonl`).

benchmark/profile_restful_api.py (benchmark(), the dict `result` written by csv.DictWriter):
`backend, dataset_name, sharegpt_output_len, random_input_len, random_output_len,
random_range_ratio, request_rate, completed, total_input_tokens, total_output_tokens, duration,
request_throughput, input_throughput, output_throughput, mean_e2e_latency_ms, mean_ttft_ms,
mean_tpot_ms, mean_itl_ms`. Its calculate_metrics is SGLang's (TPOT per request = (latency -
TTFT) / (G - 1); ITL every streamed gap). Requests are sent at Poisson times at `request_rate`
(get_request: np.random.exponential), or all at once when it is `inf`: there is no concurrency
limit in this script, so inf is a burst.

benchmark/profile_throughput.py (Profiler.save_csv in lmdeploy/profiler.py): `backend, bs,
dataset_name, sharegpt_output_len, random_input_len, random_output_len, random_range_ratio,
num_prompts, completed, total_input_tokens, total_output_tokens, duration,
request_throughput, input_throughput, output_throughput, mean_e2e_latency_ms, mean_ttft_ms,
mean_tpot_ms, mean_itl_ms` (`-` for TTFT and ITL without streaming). `bs` is --concurrency:
that many clients in a closed loop (min(bs, num_prompts)), and the engine's max_batch_size.
Its TPOT is per request (last - first token time) / (tokens after the first); its ITL the mean
of every gap between streamed chunks after the first.
"""

from __future__ import annotations

import calc.accuracy.benchmarks.schema as S
from calc.accuracy.benchmarks.common import Run, csv_records, serving_run

COMMON = ("completed", "output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_e2e_latency_ms")


def is_lmdeploy_csv(header: list[str]) -> bool:
    return all(k in header for k in COMMON) and ("bs" in header or "request_rate" in header)


def read_csv(header: list[str], rows: list[list[str]], path: str) -> list[Run]:
    records = csv_records(header, rows, path)
    throughput = "bs" in header
    runs = []
    for i, r in enumerate(records):
        where = f"line {i + 2}: "
        label = f"run {i + 1}" if len(records) > 1 else "run"
        doc = dict(r)
        if throughput:  # profile_throughput: a closed loop of bs clients, bs the engine's batch cap
            bs = S.count(r, "bs", path, where, low=1, required=True, text=True)
            n = S.count(r, "num_prompts", path, where, low=1, text=True)
            doc["max_concurrency"] = str(min(bs, n) if n else bs)
            cond = {"max_num_seqs": bs}
        else:
            cond = {}
        cond.update({k: S.string(r, k, path, where) for k in ("backend", "dataset_name") if r.get(k)})
        run = serving_run(doc, path, "lmdeploy-throughput" if throughput else "lmdeploy-restful", label,
                          "e2e_latency", where, text=True, conditions=cond, served=not throughput)
        runs.append(run)
    return runs
