"""The patch that makes a verl-agent checkout log for credit, written for that checkout.

    python3 patch_verl_agent.py ~/verl-agent              # prints the patch (a unified diff)
    python3 patch_verl_agent.py ~/verl-agent | git -C ~/verl-agent apply
    python3 patch_verl_agent.py ~/verl-agent --write      # or edits the files itself

verl-agent's forks differ line by line, so no fixed diff applies to all of them; this script finds
the three call sites in the checkout's own code (Python's `ast`, not line numbers) and prints the
diff that adds, each after its statement with that line's own indentation (tabs or spaces):

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
`credit analyze credit_logs/`. A call site whose function already calls what the patch adds is
left as it is (a checkout already patched gets no patch). Files keep their encoding (their coding
cookie's) and line endings, and the printed diff is their bytes, so `git apply` takes it. Every
patched file is compiled before anything is printed or written. Exit status 0 with the patch
printed (or written), 2 with a message naming the file (and line) when a call site is not found,
shares its line with another statement, a file cannot be read or decoded, or the patched file
would not compile; then nothing is printed or written. Standard library only.
"""

import argparse
import ast
import difflib
import io
import os
import sys
import tokenize
import warnings

TRAINER = "verl/trainer/ppo/ray_trainer.py"
ROLLOUT = "agent_system/multi_turn_rollout/rollout_loop.py"
DUMP = "verl_agent_dump.py"
MODULE = "verl_agent_dump"  # what the patched files import


class PatchError(Exception):
    """Why no patch is made; the message names the file (and line)."""


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


def _called_in(node, name):
    """Whether code under `node` calls `name` (a comment or string naming it does not count)."""
    return any(_calls(n, name) for n in ast.walk(node))


def _enclosing_function(tree, stmt):
    """The innermost function around `stmt` (the module when there is none)."""
    inner = tree
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.lineno <= stmt.lineno <= node.end_lineno
            and node.lineno >= getattr(inner, "lineno", 0)
        ):
            inner = node
    return inner


class Source:
    """A Python file of the checkout: its bytes, its text decoded as its coding cookie (or BOM)
    says, with its line endings as they are, its lines as Python counts them, and its tree."""

    def __init__(self, root, name):
        self.path = os.path.join(root, name)
        try:
            with open(self.path, "rb") as f:
                self.data = f.read()
        except OSError as e:
            raise PatchError(f"{self.path}: {e.strerror} (is {root} a verl-agent checkout?)") from e
        try:
            self.encoding, _ = tokenize.detect_encoding(io.BytesIO(self.data).readline)
        except SyntaxError as e:  # an unknown or contradictory coding cookie
            raise PatchError(f"{self.path}: {e.msg}") from e
        try:
            self.text = self.data.decode(self.encoding)
        except LookupError as e:  # a codec that is not a text encoding (`hex`, `rot13`)
            raise PatchError(f"{self.path}: {e}") from e
        except UnicodeDecodeError as e:
            line = self.data.count(b"\n", 0, e.start) + 1
            column = e.start - self.data.rfind(b"\n", 0, e.start)
            raise PatchError(
                f"{self.path}:{line}:{column}: not {self.encoding} text ({e.reason}); "
                "a file in another encoding declares it in a coding cookie (PEP 263)"
            ) from e
        # Python ends lines at \n, \r\n and \r only (str.splitlines also at \f and others).
        self.lines = io.StringIO(self.text, newline="").readlines()
        self.newline = next(
            (line[len(line.rstrip("\r\n")):] for line in self.lines if line.endswith(("\n", "\r"))),
            "\n",
        )
        try:
            self.tree = _compile(self.text, self.path, ast.PyCF_ONLY_AST)
        except SyntaxError as e:
            where = f":{e.lineno}" if e.lineno else ""
            where += f":{e.offset}" if e.lineno and e.offset else ""
            raise PatchError(f"{self.path}{where}: {e.msg}") from e
        except ValueError as e:  # null bytes
            raise PatchError(f"{self.path}: {e}") from e

    def insertion(self, stmt, what, code):
        """(index of the line after `stmt`, `code`'s lines at the indentation of `stmt`'s line);
        a statement that shares its line (`if x: batch = ...`, `a; batch = ...`) is refused."""
        first = self.lines[stmt.lineno - 1]
        indent = first[: len(first) - len(first.lstrip(" \t\f"))]
        # Offsets count UTF-8 bytes; the indentation is ASCII, so its length is its byte count.
        after = self.lines[stmt.end_lineno - 1].encode("utf-8")[stmt.end_col_offset :]
        if len(indent) != stmt.col_offset or after.lstrip().startswith(b";"):
            column = len(first.encode("utf-8")[: stmt.col_offset].decode("utf-8")) + 1
            raise PatchError(
                f"{self.path}:{stmt.lineno}:{column}: {what} shares its line with another "
                "statement; put it on a line of its own and run again"
            )
        return stmt.end_lineno, [indent + line + self.newline for line in code]

    def patched(self, insertions):
        """The file's bytes with `insertions` made, once the result compiles."""
        lines = list(self.lines)
        origin = list(range(1, len(lines) + 1))  # each line's number in the file as it is
        for at, new in sorted(insertions, key=lambda x: x[0], reverse=True):
            if not lines[at - 1].endswith(("\n", "\r")):  # the file's last line
                lines[at - 1] += self.newline
            lines[at:at] = new
            origin[at:at] = [at] * len(new)
        text = "".join(lines)
        try:
            _compile(text, self.path, 0)
        except SyntaxError as e:  # IndentationError and TabError included
            # The line as the file numbers it now (an inserted line: the statement it follows).
            where = f":{origin[e.lineno - 1]}" if e.lineno and e.lineno <= len(origin) else ""
            raise PatchError(
                f"{self.path}{where}: the patched file would not compile ({e.msg}); "
                "no file was changed"
            ) from e
        return text.encode(self.encoding)


def _compile(text, path, flags):
    """`compile(text)` without printing the checkout's own SyntaxWarnings (not ours to report)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(text, path, "exec", flags, dont_inherit=True)


def _trainer_insertions(source):
    fits = [
        f
        for c in ast.walk(source.tree)
        if isinstance(c, ast.ClassDef) and c.name == "RayPPOTrainer"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "fit"
    ]
    if not fits:
        raise PatchError(f"{source.path}: no `RayPPOTrainer.fit` method")
    fit = fits[0]
    body = list(_statements(fit))
    sites = [
        (
            "dump_steps",
            "`batch = gen_batch_output`",
            lambda v: isinstance(v, ast.Name) and v.id == "gen_batch_output",
            [
                "# credit: this iteration's turns, before adjust_batch pads and _balance_batch",
                "# reorders them (verl_agent_dump.py; $CREDIT_LOGS_DIR, default credit_logs/)",
                f"from {MODULE} import dump_steps",
                "dump_steps(batch, self.tokenizer, self.global_steps, advantages_follow=True)",
            ],
        ),
        (
            "dump_advantages",
            "`batch = compute_advantage(...)`",
            lambda v: _calls(v, "compute_advantage"),
            [
                "# credit: the advantages the trainer computed, beside the rows (method `logged`)",
                f"from {MODULE} import dump_advantages",
                "dump_advantages(batch, self.global_steps)",
            ],
        ),
    ]
    insertions = []
    for function, what, value, code in sites:
        if _called_in(fit, function):
            continue
        stmt = next((s for s in body if _assigns_batch(s, value)), None)
        if stmt is None:
            raise PatchError(f"{source.path}: no {what} in `RayPPOTrainer.fit`")
        insertions.append(source.insertion(stmt, what, code))
    return insertions


def _rollout_insertions(source):
    insertions = []
    found = False
    for stmt in _statements(source.tree):
        # `success: Dict[str, np.ndarray] = envs.success_evaluator(...)` is annotated in verl-agent.
        if not (
            isinstance(stmt, (ast.Assign, ast.AnnAssign))
            and _calls(stmt.value, "success_evaluator")
        ):
            continue
        found = True
        if _called_in(_enclosing_function(source.tree, stmt), "mark_outcomes"):
            continue
        keywords = {
            k.arg: ast.get_source_segment(source.text, k.value) for k in stmt.value.keywords
        }
        if "total_batch_list" not in keywords or "total_infos" not in keywords:
            raise PatchError(
                f"{source.path}:{stmt.lineno}: `success_evaluator(...)` without "
                "`total_batch_list=` and `total_infos=` keywords"
            )
        insertions.append(
            source.insertion(
                stmt,
                "`... = envs.success_evaluator(...)`",
                [
                    "# credit: each turn gets its trajectory's `won` and task type",
                    f"from {MODULE} import mark_outcomes",
                    f"mark_outcomes({keywords['total_batch_list']}, {keywords['total_infos']})",
                ],
            )
        )
    if not found:
        raise PatchError(f"{source.path}: no `... = envs.success_evaluator(...)`")
    return insertions


def _module_file(path, what):
    """The bytes of `path`, the module file (`what` says which one)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise PatchError(f"{path}: {e.strerror} ({what})") from e


def changes(root):
    """[(path relative to root, old bytes or None for a new file, new bytes)] for a checkout;
    every patched file compiles."""
    out = []
    for name, find in ((TRAINER, _trainer_insertions), (ROLLOUT, _rollout_insertions)):
        source = Source(root, name)
        insertions = find(source)
        if insertions:
            out.append((name, source.data, source.patched(insertions)))
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), DUMP)
    dump = _module_file(here, f"keep {os.path.basename(__file__)} beside {DUMP}")
    target = os.path.join(root, DUMP)
    existing = None
    if os.path.lexists(target):
        if not os.path.isfile(target):
            raise PatchError(f"{target}: not a file, and the patch puts {DUMP} there; move it away")
        existing = _module_file(target, "the copy of the module in the checkout")
    if existing != dump:
        out.append((DUMP, existing, dump))
    return out


def _diff(name, old, new):
    """The unified diff of a file's bytes, line endings as they are (so a CRLF file's diff
    applies), a last line without one marked as `git apply` expects."""
    name = name.encode("utf-8")
    lines = difflib.diff_bytes(
        difflib.unified_diff,
        old.splitlines(keepends=True) if old is not None else [],
        new.splitlines(keepends=True),
        fromfile=b"a/" + name if old is not None else b"/dev/null",
        tofile=b"b/" + name,
    )
    for line in lines:
        yield line if line.endswith((b"\n", b"\r")) else line + b"\n\\ No newline at end of file\n"


def _write_all(root, edits):
    """Every edit to a temporary file beside its target first, then each renamed over it, so a
    file that cannot be written leaves the checkout as it was."""
    staged, done = [], []
    try:
        for name, _, new in edits:
            path = os.path.join(root, name)
            staged.append(f"{path}.{os.getpid()}.tmp")
            with open(staged[-1], "wb") as f:
                f.write(new)
            if os.path.exists(path):
                os.chmod(staged[-1], os.stat(path).st_mode)
        for (name, _, _), tmp in zip(edits, staged):
            os.replace(tmp, os.path.join(root, name))
            done.append(name)
            print(f"patched {name}", file=sys.stderr)
    except OSError as e:
        for tmp in staged:
            if os.path.isfile(tmp):
                os.remove(tmp)
        changed = f"patched only {', '.join(done)}" if done else "no file was changed"
        raise PatchError(f"{e.filename2 or e.filename}: {e.strerror}; {changed}") from e


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", help="the verl-agent checkout's root folder")
    parser.add_argument("--write", action="store_true", help="edit the files instead of printing")
    args = parser.parse_args(argv)
    try:
        edits = changes(args.checkout)
        if not edits:
            print(f"{args.checkout}: already patched", file=sys.stderr)
        elif args.write:
            _write_all(args.checkout, edits)
        else:
            for name, old, new in edits:
                sys.stdout.buffer.writelines(_diff(name, old, new))
            sys.stdout.buffer.flush()
    except PatchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped (`| head`): as for any command, not an error. Python would report
        # the unflushed rest at exit, so stdout goes to /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
