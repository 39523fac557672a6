"""integrations/patch_verl_agent.py on fixtures/verl_agent (a verl-agent checkout in miniature),
edited the ways real checkouts differ: tabs, CRLF, a coding cookie, a BOM, a form feed, no last
newline, code that shares a line. Either the printed diff (through `git apply`) and `--write` give
the same files, which compile, or the patcher exits 2 with a message naming the file and nothing
changes. Standard library and git only: no Ray, no `credit` package."""

import ast
import errno
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

PATCHER = ROOT / "integrations" / "patch_verl_agent.py"
FIXTURE = ROOT / "fixtures" / "verl_agent"
TRAINER = "verl/trainer/ppo/ray_trainer.py"
ROLLOUT = "agent_system/multi_turn_rollout/rollout_loop.py"
DUMP = "verl_agent_dump.py"
# git as installed, without the user's settings (core.autocrlf would rewrite line endings).
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "verl-agent"
    shutil.copytree(FIXTURE, root)
    return root


def patch(checkout, *args, patcher=PATCHER):
    out = subprocess.run(
        [sys.executable, str(patcher), str(checkout), *args], capture_output=True
    )
    assert b"Traceback" not in out.stderr, out.stderr.decode()
    return out


def edit(path, change):
    """`path`'s bytes replaced by `change(bytes)`, which must change them."""
    old = path.read_bytes()
    new = change(old)
    assert new != old, path
    path.write_bytes(new)


def files(root):
    """{path relative to root: bytes} for every file under root (git's own left out)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def line_of(path, text):
    """The 1-based number of the line of `path` that contains `text`."""
    lines = path.read_bytes().split(b"\n")
    return next(i for i, line in enumerate(lines, 1) if text.encode() in line)


def calls(path):
    """How many times the code in `path` calls each function named by a plain name."""
    tree = compile(path.read_bytes(), str(path), "exec", ast.PyCF_ONLY_AST)
    names = [
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]
    return {name: names.count(name) for name in names}


def assert_patched(checkout, tmp_path):
    """The printed diff, applied by `git apply` to a copy, gives the bytes `--write` gives; both
    patched files compile and call what the patch adds. Returns the written files."""
    applied = tmp_path / "applied"
    shutil.copytree(checkout, applied)
    subprocess.run(["git", "init", "-q"], cwd=applied, env=GIT_ENV, check=True)
    printed = patch(checkout)
    assert printed.returncode == 0, printed.stderr.decode()
    git = subprocess.run(
        ["git", "apply", "-"], cwd=applied, env=GIT_ENV, input=printed.stdout, capture_output=True
    )
    assert git.returncode == 0, git.stderr.decode()
    written = patch(checkout, "--write")
    assert written.returncode == 0, written.stderr.decode()
    assert written.stderr.decode() == "".join(
        f"patched {name}\n" for name in (TRAINER, ROLLOUT, DUMP)
    )
    assert files(applied) == files(checkout)
    assert {"dump_steps", "dump_advantages"} <= calls(checkout / TRAINER).keys()
    assert "mark_outcomes" in calls(checkout / ROLLOUT)
    return files(checkout)


def assert_refused(checkout, message):
    """Exit 2 with `message` (the checkout's path written {root}), and no file changed."""
    before = files(checkout)
    for args in ((), ("--write",)):
        out = patch(checkout, *args)
        assert out.returncode == 2
        assert out.stdout == b""
        assert out.stderr.decode() == f"error: {message.format(root=checkout)}\n"
    assert files(checkout) == before


def test_the_fixture_is_patched_at_its_call_sites(checkout, tmp_path):
    trainer = assert_patched(checkout, tmp_path)[TRAINER].split(b"\n")
    at = trainer.index(b" " * 20 + b"batch = gen_batch_output")
    assert trainer[at + 3] == b" " * 20 + b"from verl_agent_dump import dump_steps"


def test_a_tab_indented_checkout_gets_its_own_tabs(checkout, tmp_path):
    def tabs(data):
        lines = []
        for line in data.split(b"\n"):
            body = line.lstrip(b" ")
            spaces = len(line) - len(body)
            lines.append(b"\t" * (spaces // 4) + b" " * (spaces % 4) + body)
        return b"\n".join(lines)

    for name in (TRAINER, ROLLOUT):
        edit(checkout / name, tabs)
        compile((checkout / name).read_bytes(), name, "exec")
    patched = assert_patched(checkout, tmp_path)
    trainer = patched[TRAINER].split(b"\n")
    at = trainer.index(b"\t" * 5 + b"batch = gen_batch_output")
    assert trainer[at + 3] == b"\t" * 5 + b"from verl_agent_dump import dump_steps"
    rollout = patched[ROLLOUT].split(b"\n")
    assert b"\t" * 2 + b"mark_outcomes(total_batch_list, total_infos)" in rollout


@pytest.mark.parametrize(
    "before, after, column",
    [
        # A one-line compound statement: its body's indentation is not its line's.
        ("batch = gen_batch_output", "if True: batch = gen_batch_output", 30),
        ("batch = gen_batch_output", "batch = gen_batch_output; del gen_batch_output", 21),
        # Columns count characters, where Python's offsets count UTF-8 bytes.
        ("batch = gen_batch_output", '_ = "é"; batch = gen_batch_output', 30),
    ],
)
def test_a_call_site_that_shares_its_line_is_refused(checkout, before, after, column):
    trainer = checkout / TRAINER
    edit(trainer, lambda data: data.replace(before.encode(), after.encode()))
    line = line_of(trainer, after)
    assert_refused(
        checkout,
        f"{{root}}/{TRAINER}:{line}:{column}: `batch = gen_batch_output` shares its line with "
        "another statement; put it on a line of its own and run again",
    )


def test_a_patch_that_would_not_compile_changes_nothing(checkout):
    # `global` after the name is bound is a compile error, not a parse error: the check compiles.
    trainer = checkout / TRAINER
    edit(
        trainer,
        lambda data: data.replace(
            b"self.global_steps += 1", b"self.global_steps += 1\n                global dump_steps"
        ),
    )
    compile(trainer.read_bytes(), TRAINER, "exec")
    line = line_of(trainer, "global dump_steps")
    # Python's words for it, which differ between versions.
    with pytest.raises(SyntaxError) as why:
        compile(
            "def f():\n from m import dump_steps\n dump_steps()\n global dump_steps\n", "", "exec"
        )
    assert_refused(
        checkout,
        f"{{root}}/{TRAINER}:{line}: the patched file would not compile ({why.value.msg}); "
        "no file was changed",
    )


def test_a_comment_or_string_naming_the_module_is_not_a_patch(checkout, tmp_path):
    edit(checkout / TRAINER, lambda data: b"# logs for credit: see verl_agent_dump.py\n" + data)
    edit(checkout / ROLLOUT, lambda data: data + b'MODULE = "verl_agent_dump"\n')
    assert_patched(checkout, tmp_path)


def test_an_already_patched_checkout_is_left_as_it_is(checkout, tmp_path):
    patched = assert_patched(checkout, tmp_path)
    for args in ((), ("--write",)):
        out = patch(checkout, *args)
        assert (out.returncode, out.stdout) == (0, b"")
        assert out.stderr.decode() == f"{checkout}: already patched\n"
    assert files(checkout) == patched


def test_a_call_site_patched_by_hand_gets_only_the_rest(checkout):
    edit(
        checkout / TRAINER,
        lambda data: data.replace(
            b"batch = gen_batch_output\n",
            b"batch = gen_batch_output\n"
            b"                    from verl_agent_dump import dump_steps\n"
            b"                    dump_steps(batch, self.tokenizer, self.global_steps)\n",
        ),
    )
    out = patch(checkout, "--write")
    assert out.returncode == 0, out.stderr.decode()
    trainer = calls(checkout / TRAINER)
    assert (trainer["dump_steps"], trainer["dump_advantages"]) == (1, 1)
    assert calls(checkout / ROLLOUT)["mark_outcomes"] == 1


def test_a_crlf_checkout_keeps_crlf_and_its_diff_applies(checkout, tmp_path):
    for name in (TRAINER, ROLLOUT):
        edit(checkout / name, lambda data: data.replace(b"\n", b"\r\n"))
    patched = assert_patched(checkout, tmp_path)
    for name in (TRAINER, ROLLOUT):
        assert patched[name].count(b"\n") == patched[name].count(b"\r\n"), name


def test_files_keep_their_encoding(checkout, tmp_path):
    # A latin-1 cookie, with latin-1 bytes in the diff's context; a UTF-8 BOM.
    edit(
        checkout / TRAINER,
        lambda data: b"# -*- coding: latin-1 -*-\n"
        + data.replace(
            b"batch = compute_advantage(",
            ("# Zoë's\n" + " " * 24 + "batch = compute_advantage(").encode("latin-1"),
        ),
    )
    edit(checkout / ROLLOUT, lambda data: b"\xef\xbb\xbf" + data)
    patched = assert_patched(checkout, tmp_path)
    assert "# Zoë's\n".encode("latin-1") in patched[TRAINER]
    assert patched[ROLLOUT].startswith(b"\xef\xbb\xbfimport uuid\n")


def test_a_form_feed_does_not_move_the_insertions(checkout, tmp_path):
    # Python ends lines at \n, \r\n and \r only; str.splitlines also at \f.
    edit(checkout / TRAINER, lambda data: data.replace(b"    def fit(", b"\f\n    def fit("))
    trainer = assert_patched(checkout, tmp_path)[TRAINER].split(b"\n")
    at = trainer.index(b" " * 20 + b"batch = gen_batch_output")
    assert trainer[at + 3] == b" " * 20 + b"from verl_agent_dump import dump_steps"


def test_a_file_without_a_last_newline(checkout, tmp_path):
    # The trainer's last line is in the diff's context, and the rollout's call site is its last.
    edit(checkout / TRAINER, lambda data: data.rstrip(b"\n"))
    rollout = checkout / ROLLOUT
    edit(rollout, lambda data: data[: data.index(b"\n        return total_batch_list")])
    compile(rollout.read_bytes(), ROLLOUT, "exec")
    patched = assert_patched(checkout, tmp_path)
    assert patched[ROLLOUT].endswith(b"        mark_outcomes(total_batch_list, total_infos)\n")


def test_a_folder_where_the_module_goes_is_an_error(checkout):
    (checkout / DUMP).mkdir()
    assert_refused(
        checkout,
        f"{{root}}/{DUMP}: not a file, and the patch puts {DUMP} there; move it away",
    )


def test_files_it_cannot_read_are_errors_naming_them(checkout):
    trainer = checkout / TRAINER
    trainer.unlink()
    trainer.mkdir()
    assert_refused(
        checkout, f"{{root}}/{TRAINER}: Is a directory (is {{root}} a verl-agent checkout?)"
    )
    shutil.rmtree(checkout)
    out = patch(checkout)
    assert out.returncode == 2
    assert out.stderr.decode() == (
        f"error: {checkout}/{TRAINER}: No such file or directory "
        f"(is {checkout} a verl-agent checkout?)\n"
    )


@pytest.mark.parametrize(
    "head, message",
    [
        (b"import os\n# caf\xe9\n", ":2:6: not utf-8 text (invalid continuation byte); a file in "
         "another encoding declares it in a coding cookie (PEP 263)"),
        (b"# -*- coding: klingon -*-\n", ": unknown encoding: klingon"),
        (b"# coding: hex\n", ": 'hex' is not a text encoding; use codecs.decode() to handle "
         "arbitrary codecs"),
    ],
)
def test_files_it_cannot_decode_are_errors_naming_them(checkout, head, message):
    edit(checkout / TRAINER, lambda data: head + data)
    assert_refused(checkout, f"{{root}}/{TRAINER}{message}")


def test_a_file_python_cannot_parse_is_an_error_naming_it(checkout):
    edit(checkout / TRAINER, lambda data: data + b"def broken(:\n")
    # Python's words and column for it, which differ between versions.
    with pytest.raises(SyntaxError) as why:
        compile((checkout / TRAINER).read_bytes(), TRAINER, "exec")
    where = f"{why.value.lineno}:{why.value.offset}"
    assert_refused(checkout, f"{{root}}/{TRAINER}:{where}: {why.value.msg}")


def test_a_file_with_a_null_byte_is_an_error_naming_it(checkout):
    trainer = checkout / TRAINER
    edit(trainer, lambda data: data + b"\0")
    before = files(checkout)
    out = patch(checkout)
    assert out.returncode == 2
    # Python's words for it differ between versions (3.12 makes it a SyntaxError with a line).
    assert out.stderr.decode().startswith(f"error: {trainer}")
    assert "cannot contain null bytes" in out.stderr.decode()
    assert files(checkout) == before


def test_the_patcher_needs_its_module_beside_it(checkout, tmp_path):
    alone = tmp_path / "alone" / "patch_verl_agent.py"
    alone.parent.mkdir()
    shutil.copy(PATCHER, alone)
    out = patch(checkout, patcher=alone)
    assert out.returncode == 2
    assert out.stderr.decode() == (
        f"error: {alone.parent}/{DUMP}: No such file or directory "
        f"(keep patch_verl_agent.py beside {DUMP})\n"
    )


def test_a_reader_that_stops_is_not_an_error(checkout):
    # `patch_verl_agent.py CHECKOUT | head`: the pipe closes before the diff is written.
    run = subprocess.Popen(
        [sys.executable, str(PATCHER), str(checkout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    run.stdout.close()
    with run.stderr:
        assert run.stderr.read() == b""
    assert run.wait() == 0


def load_patcher():
    """The patcher as a module, to run its `main` in this process (where its pid is known)."""
    spec = importlib.util.spec_from_file_location("patch_verl_agent", PATCHER)
    patcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(patcher)
    return patcher


def test_a_file_it_cannot_write_changes_nothing(checkout, capsys):
    staged = checkout / f"{DUMP}.{os.getpid()}.tmp"  # where the module is written before its rename
    staged.mkdir()
    before = files(checkout)
    assert load_patcher().main([str(checkout), "--write"]) == 2
    assert capsys.readouterr().err == f"error: {staged}: Is a directory; no file was changed\n"
    assert files(checkout) == before  # the trainer and rollout staged before it removed


def test_a_rename_that_fails_names_the_files_patched(checkout, capsys, monkeypatch):
    patcher = load_patcher()
    replace = os.replace

    def refuse_the_rollout(src, dst):
        if dst.endswith(ROLLOUT):
            raise PermissionError(errno.EACCES, "Permission denied", src, None, dst)
        replace(src, dst)

    monkeypatch.setattr(patcher.os, "replace", refuse_the_rollout)
    rollout = (checkout / ROLLOUT).read_bytes()
    assert patcher.main([str(checkout), "--write"]) == 2
    assert capsys.readouterr().err == (
        f"patched {TRAINER}\n"
        f"error: {checkout}/{ROLLOUT}: Permission denied; patched only {TRAINER}\n"
    )
    assert (checkout / ROLLOUT).read_bytes() == rollout
    assert not (checkout / DUMP).exists()
    assert not list(checkout.rglob("*.tmp"))
