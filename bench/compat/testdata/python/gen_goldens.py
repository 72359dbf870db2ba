# Generates the golden files of bench/compat/pyjson_test.go and formats_test.go
# with CPython's json module and numpy, the libraries SGLang's bench_one_batch
# and vLLM's bench latency write their files with. The tests read the files
# only; they never run Python. Regenerate (rarely) with:
#   /usr/bin/python3 bench/compat/testdata/python/gen_goldens.py bench/compat/testdata/python
# (Debian 12: python3 3.11 and python3-numpy 1.24.)
import json
import math
import os
import random
import struct
import sys

import numpy as np

out = sys.argv[1]
rng = random.Random(20260101)


def floats():
    fixed = [0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 0.2, 0.3, 1 / 3, 123.0, 1e-05, 1e-4, 0.0001234,
             0.00012345678901234, 1e16, 1e15, 9999999999999998.0, 1234567890123456.0,
             12345678901234567.0, 1e22, 1e-7, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
             float("inf"), float("-inf"), float("nan"), 2.5, 1e100, 1.5e300, 6.02214076e23,
             0.060751234, 987.6345, 4096.0, 65536.5, 3.14159, 2.0 ** 53, 2.0 ** 53 + 2, 1e-300]
    for _ in range(300):
        fixed.append(rng.uniform(1e-5, 10))  # latencies and throughputs
    for _ in range(300):
        fixed.append(math.copysign(10 ** rng.uniform(-320, 308), rng.choice([-1, 1])))
    for _ in range(50):
        fixed.append(float(rng.randint(-10 ** 17, 10 ** 17)))
    with open(os.path.join(out, "floats.txt"), "w") as f:
        for x in fixed:
            f.write("%s %s\n" % (x.hex() if math.isfinite(x) else repr(x), json.dumps(x)))


def strings():
    cases = [b"", b"default", b'quote " backslash \\ slash /', b"\n\r\t\b\f\x00\x01\x1f\x7f",
             "caf\u00e9 \u65e5\u672c \U0001f680 \ufffd".encode(), b"bad \xff\xfe utf-8 \xc3",
             "\u2028\u2029".encode(), b"~ !#$%&'()*+,-.:;<=>?@[]^_`{|}", b"\xed\xa0\x80"]
    with open(os.path.join(out, "strings.txt"), "w") as f:
        for c in cases:
            f.write("%s %s\n" % (c.hex() or "-", json.dumps(c.decode("utf-8", "surrogateescape"))))


def one_batch_record(run_name, batch, input_len, output_len, prefills, decodes):
    # bench_one_batch.py's latency_test_run_once per iteration; stepbench
    # reports the median over iterations (np.median), which is one_batch's
    # own value when there is one iteration.
    totals = []
    for p, ds in zip(prefills, decodes):
        tot = 0
        tot += p
        for d in ds:
            tot += d
        totals.append(tot)
    rec = {"run_name": run_name, "batch_size": batch, "input_len": input_len, "output_len": output_len}
    prefill = float(np.median(prefills)) if len(prefills) > 1 else prefills[0]
    rec["prefill_latency"] = prefill
    rec["prefill_throughput"] = input_len * batch / prefill
    if output_len > 1:
        med = np.median([d for ds in decodes for d in ds])
        rec["median_decode_latency"] = med
        rec["median_decode_throughput"] = batch / med
    total = float(np.median(totals)) if len(totals) > 1 else totals[0]
    rec["total_latency"] = total
    rec["overall_throughput"] = (input_len + output_len) * batch / total
    return rec


def one_batch():
    cases = [("default", 1, 1024, 16, 1), ("test_run", 8, 256, 32, 1), ("caf\u00e9 \"x\"", 2, 64, 1, 1),
             ("multi", 4, 128, 8, 3), ("multi", 1, 16, 4, 4), ("big", 64, 4096, 2, 1)]
    with open(os.path.join(out, "onebatch.jsonl"), "w") as f:
        for name, batch, input_len, output_len, iters in cases:
            prefills = [rng.uniform(0.001, 2.0) for _ in range(iters)]
            decodes = [[rng.uniform(0.001, 0.05) for _ in range(output_len - 1)] for _ in range(iters)]
            want = json.dumps(one_batch_record(name, batch, input_len, output_len, prefills, decodes))
            case = {"run_name": name, "batch_size": batch, "input_len": input_len, "output_len": output_len,
                    "prefill": prefills, "decode": decodes, "want": want}
            f.write(json.dumps(case) + "\n")


def vllm():
    # vllm/benchmarks/latency.py: the stdout summary and json.dump(indent=4).
    with open(os.path.join(out, "vllm.jsonl"), "w") as f:
        for n in [1, 2, 3, 7, 8, 9, 16, 17, 30, 129, 300]:
            latencies = np.array([rng.uniform(0.05, 3.0) for _ in range(n)])
            percentages = [10, 25, 50, 75, 90, 99]
            percentiles = np.percentile(latencies, percentages)
            lines = ["Avg latency: %s seconds" % np.mean(latencies).item(),
                     "Std latency: %s seconds" % np.std(latencies).item()]
            for percentage, percentile in zip(percentages, percentiles):
                lines.append(f"{percentage}% percentile latency: {percentile} seconds")
            results = {
                "avg_latency": np.mean(latencies).item(),
                "std_latency": np.std(latencies).item(),
                "latencies": latencies.tolist(),
                "percentiles": dict(zip(percentages, percentiles.tolist())),
            }
            f.write(json.dumps({"latencies": latencies.tolist(), "stdout": "\n".join(lines) + "\n",
                                "json": json.dumps(results, indent=4)}) + "\n")


floats()
strings()
one_batch()
vllm()
