#!/usr/bin/env python3
"""`credit watch` on a synthetic training run written one iteration at a time, and the cost of
`credit.metrics` per 10k rows.

Usage:
    cargo build --workspace
    python3 bench/watch.py [--iterations 300] [--interval 0.2] [--credit target/debug/credit]
                           [--methods grpo,gigpo] [--metrics]

`--lifecycle` chooses how each iteration's file lands: `one-write` (a file renamed into place) or
`patch` (the verl-agent patch's two writes, integrations/verl_agent_dump.py: the rows pending,
then, `--advantage-delay` seconds later as `compute_advantage` would, the file written once with
an `advantage` per row; watched with `--methods logged,...`).

It generates the run with bench/synth_scale.py (16 groups of 8 rollouts per iteration, about
3,000 rows), splits it into one `{iteration}.jsonl.gz` per iteration (verl-agent's dump:
integrations/verl_agent_dump.py), starts `credit watch RUN --out REPORT --format json` and writes
the files into RUN one by one as the dump does (a temporary file renamed into place), each after
the line of the one before. Latency per iteration: from the rename to the line `credit watch`
prints once summary.json is rewritten; it includes the wait for the file's size to hold still
across two polls (one to two intervals). Peak RSS from wait4 after SIGINT. With `--metrics`,
`credit.metrics` (the package installed in this Python) on 10k rows of the same run.
"""
import argparse
import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def iterations(path, n):
    """The first `n` iterations' lines of the generated log, iteration by iteration."""
    lines, current = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            it = json.loads(line)["iteration"]
            if it != current and lines:
                yield current, lines
                lines = []
                if it > n:
                    return
            current = it
            lines.append(line)
    if lines and current <= n:
        yield current, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--methods", default="grpo,gigpo")
    ap.add_argument("--credit", default=os.path.join(HERE, "..", "target", "debug", "credit"))
    ap.add_argument("--metrics", action="store_true")
    ap.add_argument("--lifecycle", choices=["one-write", "patch"], default="one-write")
    ap.add_argument("--advantage-delay", type=float, default=0.3)
    args = ap.parse_args()
    if args.lifecycle != "one-write":
        args.methods = "logged," + args.methods
    sys.path.insert(0, os.path.join(HERE, "..", "integrations"))
    import verl_agent_dump as dump

    with tempfile.TemporaryDirectory(prefix="credit-watch-bench-") as tmp:
        log = os.path.join(tmp, "all.jsonl")
        rows = args.iterations * 3500
        subprocess.run([sys.executable, os.path.join(HERE, "synth_scale.py"), "--rows", str(rows),
                        "--out", log, "--no-parquet"], check=True, stdout=subprocess.DEVNULL)
        staged = os.path.join(tmp, "staged")
        os.mkdir(staged)
        sizes = []
        for it, lines in iterations(log, args.iterations):
            with gzip.open(os.path.join(staged, f"{it}.jsonl.gz"), "wt", encoding="utf-8") as f:
                f.writelines(lines)
            sizes.append(len(lines))
        if args.metrics:
            metrics(log)
        os.remove(log)
        run, out = os.path.join(tmp, "run"), os.path.join(tmp, "report")
        os.mkdir(run)
        proc = subprocess.Popen(
            [args.credit, "watch", run, "--out", out, "--methods", args.methods,
             "--interval", str(args.interval), "--format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        latencies, lines_printed = [], 0
        started = time.perf_counter()
        for k in range(1, len(sizes) + 1):
            name = f"{k}.jsonl.gz"
            path = os.path.join(run, name)
            if args.lifecycle == "one-write":
                partial = os.path.join(run, f".{name}.tmp")
                with open(os.path.join(staged, name), "rb") as src, open(partial, "wb") as dst:
                    dst.write(src.read())
                os.replace(partial, path)
            else:
                with gzip.open(os.path.join(staged, name), "rt", encoding="utf-8") as f:
                    rows = [json.loads(line) for line in f]
                dump._settle_pending(path, "jsonl.gz")
                dump._write(rows, path + dump._PENDING, "jsonl.gz")
                time.sleep(args.advantage_delay)
                for i, row in enumerate(rows):
                    row["advantage"] = (i % 7) / 7 - 0.5
                dump._write(rows, path, "jsonl.gz")
                os.remove(path + dump._PENDING)
            landed = time.perf_counter()
            while True:
                line = proc.stdout.readline()
                if not line:
                    sys.exit(f"credit watch ended early:\n{proc.stderr.read()}")
                printed = json.loads(line).get("iteration", {})
                lines_printed += "iteration" in printed
                if printed.get("iteration") == k:
                    break
            latencies.append(time.perf_counter() - landed)
        wall = time.perf_counter() - started
        proc.send_signal(signal.SIGINT)
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
        assert summary["headline"]["rows"] == sum(sizes), (summary["headline"]["rows"], sum(sizes))
        q = statistics.quantiles(latencies, n=20)
        print(f"{len(sizes)} iterations, {sum(sizes)} rows ({sum(sizes) / len(sizes):.0f} per "
              f"iteration), lifecycle {args.lifecycle}, methods {args.methods}, interval "
              f"{args.interval} s, exit {code}; {lines_printed} iteration lines, {wall:.1f} s in all")
        print(f"latency file complete -> summary.json rewritten: median {statistics.median(latencies):.3f} s, "
              f"p95 {q[18]:.3f} s, max {max(latencies):.3f} s; first 10 mean "
              f"{statistics.mean(latencies[:10]):.3f} s, last 10 mean {statistics.mean(latencies[-10:]):.3f} s")
        print(f"peak RSS {usage.ru_maxrss / 1024:.0f} MB")
        slowest = sorted(range(len(latencies)), key=lambda k: -latencies[k])[:3]
        print("slowest: " + ", ".join(f"iteration {k + 1} {latencies[k]:.3f} s" for k in slowest))
        notes = proc.stderr.read().strip()
        if notes:
            print(notes)


def metrics(log):
    """`credit.metrics` on the first 10k rows of the run, median of 5."""
    import pyarrow as pa

    import credit

    with open(log, encoding="utf-8") as f:
        rows = [json.loads(next(f)) for _ in range(10_000)]
    table = pa.Table.from_pylist(rows)
    for methods in ["grpo,gigpo", "grpo,gigpo,proxmo,graphgpo,mgr"]:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            credit.metrics(table, methods=methods, preset="verl")
            times.append(time.perf_counter() - start)
        print(f"credit.metrics on 10k rows ({methods}): median {statistics.median(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
