#!/usr/bin/env python3
"""Cost per row across log shapes: the same number of small step rows, grouped in different ways.

Usage:
    cargo build --workspace
    python3 bench/shapes.py --rows 1000000 [--shapes a b ...] [--repeat 3] [--data DIR]
                            [--credit target/debug/credit]
    python3 bench/shapes.py --rows 200000 --generate-only SHAPE --out PATH

Shapes (each N rows, ~150 bytes a row except f; deterministic, standard library only):
    a  groups of 8 trajectories of 20 steps, 16 groups per iteration (the ordinary log)
    b  single-row groups: one trajectory of one step per group (verl single-turn with n=1)
    c  one trajectory of 100k steps per group
    d  one group of 200k trajectories (of N/200k steps each)
    e  the rows of a split over 10k files (a directory)
    f  the layout of a with 1 KB group and trajectory ids
    g  the rows of a inside a group that is open from the first row to the last (it holds every
       window back, and makes ingest read the log twice)
    h  the rows of a, each with one extra key no other row has (trainers that log per-sample
       fields): every row has a shape of its own

For each shape it runs `credit analyze FILE --format json` and `credit advantages FILE --methods
grpo -o out.parquet` (each --repeat times as its own process; with --before, the two builds take
turns round by round) and prints a Markdown table: median wall time, µs per row, median peak RSS
(from wait4) and the ratio of wall time to shape a's. Each input is read once, untimed, first.
"""
import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile

from scale import measure  # bench/scale.py, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {
    "a": "groups of 8 × 20 steps",
    "b": "single-row groups",
    "c": "100k-step trajectories",
    "d": "200k-trajectory groups",
    "e": "10k files",
    "f": "1 KB ids",
    "g": "a group open throughout",
    "h": "a key of its own per row",
}
PLACES = ["cabinet", "drawer", "countertop", "shelf", "fridge", "microwave", "sinkbasin", "desk"]
OBJECTS = ["apple", "mug", "knife", "bread", "egg", "plate", "bowl", "cup"]
ROWS_PER_ITERATION = 2560


def layout(shape, rows):
    """(groups, trajectories per group, steps per trajectory) covering at least `rows` rows."""
    if shape in "aefgh":
        trajs, steps = 8, 20
    elif shape == "b":
        trajs, steps = 1, 1
    elif shape == "c":
        trajs, steps = 1, 100_000
    elif shape == "d":
        trajs, steps = 200_000, max(1, rows // 200_000)
    else:
        raise ValueError(shape)
    per_group = trajs * steps
    return -(-rows // per_group), trajs, steps


def long_id(prefix):
    """`prefix` padded to 1 KB with a deterministic tail (ids differ in their first bytes)."""
    return prefix + "-" + ("x" * (1024 - len(prefix) - 1))


def lines(shape, rows, seed=0):
    """The shape's N rows as JSONL lines (with newline)."""
    if shape == "g":
        yield from spanning_group(lines("a", rows - 2, seed))
        return
    rng = random.Random(seed)
    groups, trajs, steps = layout(shape, rows)
    per_iteration = max(1, ROWS_PER_ITERATION // (trajs * steps))
    written = 0
    for g in range(groups):
        gid = long_id(f"g{g}") if shape == "f" else f"g{g}"
        iteration = g // per_iteration
        for t in range(trajs):
            tid = long_id(f"g{g}-t{t}") if shape == "f" else f"g{g}-t{t}"
            won = rng.random() < 0.4
            for s in range(steps):
                if written == rows:
                    return
                place = rng.choice(PLACES)
                obs = f"You are at {place} {rng.randint(1, 3)}. You see a {rng.choice(OBJECTS)}."
                last = s == steps - 1
                reward = 10.0 if last and won else 0.0
                own = f', "extra_{written}": 1' if shape == "h" else ""
                yield (f'{{"uid": "{gid}", "traj_uid": "{tid}", "iteration": {iteration}, "step": {s}, '
                       f'"anchor_obs": "{obs}", "action": "go to {rng.choice(PLACES)}", '
                       f'"reward": {reward}, "won": {"true" if last and won else "false"}{own}}}\n')
                written += 1


def spanning_group(inner):
    """`inner` between the two steps of a group of its own."""
    row = ('{{"uid": "spanning", "traj_uid": "spanning-t0", "iteration": 0, "step": {}, '
           '"anchor_obs": "You are in the hall.", "action": "wait", "reward": {}, "won": {}}}\n')
    yield row.format(0, 0.0, "false")
    yield from inner
    yield row.format(1, 10.0, "true")


FILES = 10_000


def generate(shape, rows, out):
    """Writes the shape to `out`: a file, or for e a directory of 10k files."""
    if shape == "e":
        os.makedirs(out, exist_ok=True)
        per_file = -(-rows // FILES)
        source = lines("a", rows)
        for k in range(FILES):
            with open(os.path.join(out, f"part-{k:05}.jsonl"), "w") as f:
                for _ in range(per_file):
                    line = next(source, None)
                    if line is None:
                        break
                    f.write(line)
    else:
        with open(out, "w") as f:
            f.writelines(lines(shape, rows))


def size_mb(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)) / 1e6
    return os.path.getsize(path) / 1e6


def warm(path):
    """Reads the input once, untimed: a log not read for a while may have left the page cache
    (some machines page out cold file pages proactively), and the first run would time the disk."""
    files = [path] if os.path.isfile(path) else [
        os.path.join(root, name) for root, _, names in os.walk(path) for name in names]
    for file in files:
        with open(file, "rb") as f:
            while f.read(1 << 24):
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "credit-shapes"))
    ap.add_argument("--credit", default=os.path.join(HERE, "..", "target", "debug", "credit"))
    ap.add_argument("--before", help="an earlier credit binary, run beside --credit on every shape")
    ap.add_argument("--commands", nargs="+", default=["analyze", "advantages"],
                    choices=["analyze", "advantages"])
    ap.add_argument("--generate-only", metavar="SHAPE", choices=list(SHAPES))
    ap.add_argument("--out", help="with --generate-only: where to write the shape")
    a = ap.parse_args()
    if a.generate_only:
        generate(a.generate_only, a.rows, a.out)
        return
    os.makedirs(a.data, exist_ok=True)
    scratch = tempfile.mkdtemp(dir=a.data)
    print(f"credit: {a.credit}; {os.cpu_count()} CPUs; median of {a.repeat}\n")
    print("| shape | rows | input MB | command | wall s | µs/row | peak RSS MB | vs a |")
    print("|---|---|---|---|---|---|---|---|")
    base = {}
    try:
        for shape in a.shapes:
            path = os.path.join(a.data, f"shape-{shape}-{a.rows}" + ("" if shape == "e" else ".jsonl"))
            if not os.path.exists(path):
                generate(shape, a.rows, path + ".part")
                os.rename(path + ".part", path)
            commands = {
                "analyze": ["analyze", path, "--format", "json"],
                "advantages": ["advantages", path, "--methods", "grpo", "-o",
                               os.path.join(scratch, "out.parquet")],
            }
            binaries = ([("before ", a.before)] if a.before else []) + [("", a.credit)]
            warm(path)
            for name in a.commands:
                # The builds take turns, round by round: a machine's speed drifts over minutes.
                runs = {tag: [] for tag, _ in binaries}
                for _ in range(a.repeat):
                    for tag, binary in binaries:
                        # credit replaces only its own earlier output: start each run afresh.
                        if os.path.exists(os.path.join(scratch, "out.parquet")):
                            os.remove(os.path.join(scratch, "out.parquet"))
                        runs[tag].append(measure([binary] + commands[name]))
                for tag, _ in binaries:
                    wall = statistics.median(s for s, _ in runs[tag])
                    rss = statistics.median(r for _, r in runs[tag])
                    base.setdefault(tag + name, wall if shape == "a" else None)
                    ratio = f"{wall / base[tag + name]:.2f}" if base.get(tag + name) else ""
                    print(f"| {shape}: {SHAPES[shape]} | {a.rows:,} | {size_mb(path):,.0f} | {tag}{name} | "
                          f"{wall:.2f} | {wall / a.rows * 1e6:.2f} | {rss:,.0f} | {ratio} |")
                    sys.stdout.flush()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
