"""The patch that makes a verl-agent checkout log for credit, written for that checkout.

    python3 patch_verl_agent.py ~/verl-agent              # prints the patch (a unified diff)
    python3 patch_verl_agent.py ~/verl-agent | git -C ~/verl-agent apply
    python3 patch_verl_agent.py ~/verl-agent --write      # or edits the files itself

verl-agent's forks differ line by line, so no fixed diff applies to all of them; this script finds
the three call sites in the checkout's own code (Python's `ast`, not line numbers) and prints the
diff that adds, each at its statement's indentation:

- `verl/trainer/ppo/ray_trainer.py`, `RayPPOTrainer.fit()`: `dump_steps(...)` right after
  `batch = gen_batch_output` (the rollout loop's batch, before `adjust_batch` pads it and
  `_balance_batch` reorders it), and `dump_advantages(...)` right after `batch =
  compute_advantage(...)`;
- `agent_system/multi_turn_rollout/rollout_loop.py`: `mark_outcomes(...)` after every `... =
  envs.success_evaluator(...)`, with the same `total_batch_list` and `total_infos` (so that each
  turn carries its trajectory's `won` and task type);
- `verl_agent_dump.py` (the file beside this one) at the checkout's root, where `python -m
  verl.trainer.main_ppo` run from the checkout imports it.

The logs go to $CREDIT_LOGS_DIR (default `credit_logs/`, relative to where the trainer runs):
`credit analyze credit_logs/`. A checkout already patched is left as it is. Exit status 0 with
the patch printed (or written), 2 when a call site is not found (the message names the file and
what was looked for). Standard library only.
"""

import argparse
import ast
import difflib
import os
import sys

TRAINER = "verl/trainer/ppo/ray_trainer.py"
ROLLOUT = "agent_system/multi_turn_rollout/rollout_loop.py"
DUMP = "verl_agent_dump.py"
MARK = "verl_agent_dump"  # in a patched file: the import the patch adds


class NotFound(Exception):
    pass


def _statements(node):
    """Every statement under `node`, in source order (bodies of with/for/if/try included)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            yield child
        yield from _statements(child)


def _assigns_batch(stmt, value):
    """Whether `stmt` is `batch = <value>` with `value(stmt.value)` true."""
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == "batch"
        and value(stmt.value)
    )


def _calls(expr, name):
    """Whether `expr` is a call of a function or method named `name`."""
    if not isinstance(expr, ast.Call):
        return False
    f = expr.func
    return (isinstance(f, ast.Name) and f.id == name) or (
        isinstance(f, ast.Attribute) and f.attr == name
    )


def _insertion(stmt, lines):
    """(line index after `stmt`, `lines` indented as `stmt`)."""
    indent = " " * stmt.col_offset
    return stmt.end_lineno, [indent + line + "\n" for line in lines]


def _trainer_insertions(source, path):
    tree = ast.parse(source, filename=path)
    fits = [
        f
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef) and c.name == "RayPPOTrainer"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "fit"
    ]
    if not fits:
        raise NotFound(f"{path}: no `RayPPOTrainer.fit` method")
    body = list(_statements(fits[0]))
    rollout = next(
        (
            s
            for s in body
            if _assigns_batch(s, lambda v: isinstance(v, ast.Name) and v.id == "gen_batch_output")
        ),
        None,
    )
    if rollout is None:
        raise NotFound(f"{path}: no `batch = gen_batch_output` in `RayPPOTrainer.fit`")
    advantage = next(
        (s for s in body if _assigns_batch(s, lambda v: _calls(v, "compute_advantage"))), None
    )
    if advantage is None:
        raise NotFound(f"{path}: no `batch = compute_advantage(...)` in `RayPPOTrainer.fit`")
    return [
        _insertion(
            rollout,
            [
                "# credit: this iteration's turns, before adjust_batch pads and _balance_batch",
                "# reorders them (verl_agent_dump.py; $CREDIT_LOGS_DIR, default credit_logs/)",
                f"from {MARK} import dump_steps",
                "dump_steps(batch, self.tokenizer, self.global_steps)",
            ],
        ),
        _insertion(
            advantage,
            [
                "# credit: the advantages the trainer computed, beside the rows (method `logged`)",
                f"from {MARK} import dump_advantages",
                "dump_advantages(batch, self.global_steps)",
            ],
        ),
    ]


def _rollout_insertions(source, path):
    tree = ast.parse(source, filename=path)
    insertions = []
    for stmt in _statements(tree):
        # `success: Dict[str, np.ndarray] = envs.success_evaluator(...)` is annotated in verl-agent.
        if not (
            isinstance(stmt, (ast.Assign, ast.AnnAssign))
            and _calls(stmt.value, "success_evaluator")
        ):
            continue
        keywords = {k.arg: ast.get_source_segment(source, k.value) for k in stmt.value.keywords}
        if "total_batch_list" not in keywords or "total_infos" not in keywords:
            raise NotFound(
                f"{path}:{stmt.lineno}: `success_evaluator(...)` without "
                "`total_batch_list=` and `total_infos=` keywords"
            )
        insertions.append(
            _insertion(
                stmt,
                [
                    "# credit: each turn gets its trajectory's `won` and task type",
                    f"from {MARK} import mark_outcomes",
                    f"mark_outcomes({keywords['total_batch_list']}, {keywords['total_infos']})",
                ],
            )
        )
    if not insertions:
        raise NotFound(f"{path}: no `... = envs.success_evaluator(...)`")
    return insertions


def _patched(source, insertions):
    lines = source.splitlines(keepends=True)
    for at, new in sorted(insertions, key=lambda x: x[0], reverse=True):
        lines[at:at] = new
    return "".join(lines)


def _diff(name, old, new):
    old_lines = old.splitlines(keepends=True) if old is not None else []
    return difflib.unified_diff(
        old_lines,
        new.splitlines(keepends=True),
        fromfile=f"a/{name}" if old is not None else "/dev/null",
        tofile=f"b/{name}",
    )


def changes(root):
    """[(path relative to root, old text or None for a new file, new text)] for a checkout."""
    out = []
    for name, find in ((TRAINER, _trainer_insertions), (ROLLOUT, _rollout_insertions)):
        path = os.path.join(root, name)
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
        except OSError as e:
            raise NotFound(f"{path}: {e.strerror} (is {root} a verl-agent checkout?)") from e
        if MARK in source:
            continue
        out.append((name, source, _patched(source, find(source, path))))
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), DUMP)
    with open(here, encoding="utf-8") as f:
        dump = f.read()
    target = os.path.join(root, DUMP)
    existing = open(target, encoding="utf-8").read() if os.path.exists(target) else None
    if existing != dump:
        out.append((DUMP, existing, dump))
    return out


def _write(path, text):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    if os.path.exists(path):
        os.chmod(tmp, os.stat(path).st_mode)
    os.replace(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", help="the verl-agent checkout's root folder")
    parser.add_argument("--write", action="store_true", help="edit the files instead of printing")
    args = parser.parse_args(argv)
    try:
        edits = changes(args.checkout)
    except (NotFound, SyntaxError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not edits:
        print(f"{args.checkout}: already patched", file=sys.stderr)
        return 0
    for name, old, new in edits:
        if args.write:
            _write(os.path.join(args.checkout, name), new)
            print(f"patched {name}", file=sys.stderr)
        else:
            sys.stdout.writelines(_diff(name, old, new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
