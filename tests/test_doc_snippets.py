"""The code blocks of the Markdown a user follows run as written, and print what they show.

Documents: ``DOCUMENTS`` (README.md, docs/plugin-reference.md, docs/fp8.md, docs/debugging.md,
docs/tuning.md, docs/serving.md, every examples/*/README.md). docs/architecture.md's package
graph is held to the code by tests/unit/test_import_graph.py; the other docs have no code
blocks.
Every fenced block is one of these; anything else fails the test:

* ``python``: executed in this process, in document order, all of a document's Python blocks
  in one namespace (like a notebook; ``__name__`` is ``"__main__"``) under the suite's
  ``filterwarnings = error``. A block whose first line is a comment naming a relative file
  (``# my-tiles/src/my_tiles/__init__.py``) is not executed but written to that file; so is a
  ``toml`` block (or one of another language) that starts with such a line.
* ``console``, ``bash`` or ``shell``: commands. With ``$ `` prompts, each ``$ `` line is a
  command (a trailing ``\\`` continues it) and the lines up to the next prompt are what it
  prints, stdout and stderr together; it must exit 0 and print exactly that, after trailing
  whitespace is stripped from every line and trailing blank lines are dropped, where a line
  ``...`` stands for any number of lines and ``...`` within a line for any text on that line.
  Without prompts every line is a command whose output is not shown; it must exit 0. Commands
  may start with ``NAME=value`` assignments and end with ``> FILE`` and a ``# comment``:
  ``mmaplug ...`` runs in this process (``mmaplug.cli.main.main``), ``python ...`` in a subprocess,
  ``pip install ...`` never (see below). Any other program or shell syntax fails.
* ``text``: shown, never run (diagrams, output that no command here prints).

Markers, an HTML comment on the last non-blank line before the fence:

* ``<!-- gpu -->``: needs a CUDA GPU. The block runs on its own (fresh namespace and
  directory) in ``test_gpu_block``, marked ``gpu``: skipped without a GPU.
* ``<!-- no-test: REASON -->``: never run; the reason is required.

Environment: a document runs in a fresh directory holding a link to the repository's
``examples/``, with no ``MMAPLUG_*`` variable set (but ``MMAPLUG_CACHE_DIR``, pointing into the
directory), ``COLUMNS=80``, and the plugins of installed distributions hidden: its commands and
code see the built-in plugins plus the packages the document itself installs. ``pip install
[-e] PATH`` of a directory with a ``pyproject.toml`` (an example, or a project the document
wrote) installs it for the rest of the document: its packages go on the path and its
``[project.entry-points.mmaplug]`` are registered (a ``.dist-info`` in a directory on the
path). ``pip install`` of the checkout (``.``) or of a name from PyPI is skipped: the tests run
where mmaplug is installed.

After a change of what a command prints, rewrite the outputs shown (those without ``...``)::

    python tests/test_doc_snippets.py --update README.md docs/plugin-reference.md
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import logging
import os
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mmaplug.log import STAGES

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    "README.md",
    "docs/plugin-reference.md",
    "docs/fp8.md",
    "docs/debugging.md",
    "docs/tuning.md",
    "docs/serving.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*/README.md")),
]
SHELLS = frozenset({"console", "bash", "shell"})
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>gpu|no-test)\s*(?::(?P<reason>.*?))?\s*-->\s*$")
FILE_LINE = re.compile(r"^(?:#|//)\s*(?P<path>[\w.-]+(?:/[\w.-]+)*\.\w+)\s*$")
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
SHELL_SYNTAX = frozenset({"|", "||", "&&", ";", "&", "<", ">>", "2>", "2>&1", "<<"})


@dataclass
class Command:
    """One command of a shell block; ``shown`` is None when its output is not shown."""

    text: str
    line: int  # 1-based line of the command in the document
    shown: list[str] | None
    out_span: tuple[int, int] = (0, 0)  # 0-based [start, end) of the output lines in the file


@dataclass
class Block:
    """A fenced block: language, body (indent removed), marker and where it is."""

    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    indent: int
    marker: str = ""
    reason: str = ""
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def file(self) -> str | None:
        """The relative path a file block is written to, else None."""
        first = self.body.split("\n", 1)[0]
        match = FILE_LINE.match(first)
        return match.group("path") if match and self.lang not in SHELLS else None


def parse(doc: str, text: str) -> list[Block]:
    """The fenced blocks of *text*, with their markers and (shell blocks) commands."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = len(match.group("indent")), match.group("fence")
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines))
        body = [
            line[indent:] if line[:indent].strip() == "" else line for line in lines[i + 1 : end]
        ]
        block = Block(doc, i + 1, match.group("lang"), "\n".join(body), indent)
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        if marker := MARKER.match(before):
            block.marker, block.reason = (
                marker.group("kind"),
                (marker.group("reason") or "").strip(),
            )
        if block.lang in SHELLS:
            block.commands = parse_commands(body, i + 1)
        blocks.append(block)
        i = end + 1
    return blocks


def parse_commands(body: list[str], first: int) -> list[Command]:
    """Commands of a shell block whose body starts after 0-based file line *first* - 1."""
    prompted = any(line.startswith("$ ") or line == "$" for line in body)
    commands: list[Command] = []
    i = 0
    while i < len(body):
        line = body[i]
        if prompted and not line.startswith("$"):
            if not commands:
                raise AssertionError(f"line {first + i + 1}: output before the first '$ ' prompt")
            commands[-1].shown.append(line)  # type: ignore[union-attr]
            commands[-1].out_span = (commands[-1].out_span[0], first + i + 1)
            i += 1
            continue
        if not prompted and (not line.strip() or line.lstrip().startswith("#")):
            i += 1
            continue
        start = i
        text = line[2:] if prompted else line
        while text.rstrip().endswith("\\") and i + 1 < len(body):
            i += 1
            text = text.rstrip()[:-1].rstrip() + " " + body[i].strip()
        commands.append(
            Command(text, first + start + 1, [] if prompted else None, (first + i + 1,) * 2)
        )
        i += 1
    return commands


def normalise(lines: list[str]) -> list[str]:
    """Trailing whitespace stripped from every line, trailing blank lines dropped."""
    out = [line.rstrip() for line in lines]
    while out and not out[-1]:
        out.pop()
    return out


def matches(shown: list[str], printed: str) -> bool:
    """Whether *printed* is what *shown* shows (``...`` lines and in-line ``...`` wildcards)."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line == "..." else ".*?".join(map(re.escape, line.split("..."))) + "\n"
        for line in normalise(shown)
    )
    text = "".join(line + "\n" for line in normalise(printed.split("\n")))
    return re.fullmatch(pattern, text) is not None


class DocumentRun:
    """Runs one document's blocks in a directory, with its own installs (see the module doc)."""

    def __init__(self, doc: str, workdir: Path, mp: pytest.MonkeyPatch) -> None:
        self.doc, self.workdir, self.mp = doc, workdir, mp
        self.site = workdir / ".doc-site"
        self.site.mkdir()
        self.paths: list[Path] = []  # package directories of installed projects
        self.namespace: dict[str, object] = {"__name__": "__main__"}
        self.updates: list[tuple[Command, str]] = []
        (workdir / "examples").symlink_to(ROOT / "examples")
        for name in [n for n in os.environ if n.startswith("MMAPLUG_")]:
            mp.delenv(name)
        mp.setenv("MMAPLUG_CACHE_DIR", str(workdir / ".cache"))
        mp.setenv("COLUMNS", "80")
        mp.chdir(workdir)
        mp.syspath_prepend(str(self.site))
        mp.setattr(importlib.metadata, "distributions", self._distributions)
        (self.site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(site=str(self.site)))
        self._original = _ORIGINAL_DISTRIBUTIONS

    def _distributions(self, **kwargs: object) -> list[importlib.metadata.Distribution]:
        return [d for d in self._original(**kwargs) if _visible(d, self.site)]

    def run(self, block: Block, *, update: bool = False) -> None:
        """Run *block* as its language says; AssertionError names the block on a mismatch."""
        from mmaplug.hooks.manager import reset_plugin_manager

        if block.marker == "no-test":
            assert block.reason, f"{block.where}: <!-- no-test: REASON --> needs a reason"
            return
        try:
            if block.file is not None:
                target = self.workdir / block.file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.body + "\n")
            elif block.lang == "python":
                exec(compile(block.body, block.where, "exec"), self.namespace)
            elif block.lang in SHELLS:
                for command in block.commands:
                    self.command(command, block, update=update)
            elif block.lang != "text":
                raise AssertionError(
                    f"{block.where}: a ```{block.lang or '(no language)'} block is not run; "
                    "use python, console, text or a file block, or mark it "
                    "<!-- no-test: REASON -->"
                )
        finally:
            reset_plugin_manager()

    def command(self, command: Command, block: Block, *, update: bool) -> None:
        tokens = shlex.split(command.text, comments=True)
        env: dict[str, str] = {}
        while tokens and ASSIGNMENT.match(tokens[0]):
            name, _, value = tokens.pop(0).partition("=")
            env[name] = value
        redirect = None
        if len(tokens) > 2 and tokens[-2] == ">":
            redirect, tokens = tokens[-1], tokens[:-2]
        where = f"{self.doc}:{command.line}: {command.text}"
        bad = SHELL_SYNTAX.intersection(tokens)
        assert not bad, f"{where}: shell syntax {sorted(bad)} is not supported"
        assert tokens, f"{where}: no command"
        program, args = tokens[0], tokens[1:]
        if program == "pip":
            self.pip(args, where)
            code, printed = 0, ""
        elif program == "mmaplug":
            code, printed = self.mmaplug(args, env, redirect)
        elif program == "python":
            code, printed = self.python(args, env, redirect)
        else:
            raise AssertionError(
                f"{where}: only mmaplug, python and pip install commands run; "
                "mark the block <!-- no-test: REASON -->"
            )
        assert code == 0, f"{where}: exit status {code}\n{printed}"
        if command.shown is None:
            return
        if update and "..." not in command.shown and not matches(command.shown, printed):
            self.updates.append((command, printed))
            return
        assert matches(command.shown, printed), (
            f"{where}: printed\n{printed}\nbut {block.where} shows\n" + "\n".join(command.shown)
        )

    def pip(self, args: list[str], where: str) -> None:
        assert args[:1] == ["install"], f"{where}: only 'pip install' is understood"
        for target in (a for a in args[1:] if not a.startswith("-")):
            path = target.split("[", 1)[0]
            folder = path.rstrip("/") not in (".", "") and (self.workdir / path).is_dir()
            if folder or "/" in path.rstrip("/"):
                self.install(self.workdir / path, where)
            # else the checkout (.) or a distribution from PyPI: installed where tests run

    def install(self, project: Path, where: str) -> None:
        """Put *project*'s packages on the path and register its ``mmaplug`` entry points."""
        assert (project / "pyproject.toml").is_file(), f"{where}: {project} has no pyproject.toml"
        meta = tomllib.loads((project / "pyproject.toml").read_text())
        name, version = meta["project"]["name"], meta["project"].get("version", "0")
        points = meta["project"].get("entry-points", {}).get("mmaplug", {})
        find = meta.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {})
        for folder in find.get("where", ["."]):
            self.paths.append(project / folder)
            self.mp.syspath_prepend(str(project / folder))
        info = self.site / f"{re.sub(r'[-.]+', '_', name)}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        entry_points = "".join(f"{key} = {value}\n" for key, value in points.items())
        (info / "entry_points.txt").write_text(f"[mmaplug]\n{entry_points}")
        importlib.invalidate_caches()

    def mmaplug(
        self, args: list[str], env: dict[str, str], redirect: str | None
    ) -> tuple[int, str]:
        from mmaplug.cli.main import main
        from mmaplug.hooks.manager import reset_plugin_manager

        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            for name, value in env.items():
                mp.setenv(name, value)
            reset_plugin_manager()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(args)
            reset_plugin_manager()
        if redirect:
            (self.workdir / redirect).write_text(out.getvalue())
            return code, err.getvalue()
        return code, out.getvalue() + err.getvalue()

    def python(self, args: list[str], env: dict[str, str], redirect: str | None) -> tuple[int, str]:
        path = [str(self.site), *map(str, self.paths), os.environ.get("PYTHONPATH", "")]
        done = subprocess.run(
            [sys.executable, *args],
            env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(p for p in path if p)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if redirect else subprocess.STDOUT,
            text=True,
            timeout=600,
        )
        if redirect:
            (self.workdir / redirect).write_text(done.stdout)
            return done.returncode, done.stderr
        return done.returncode, done.stdout


def _visible(dist: importlib.metadata.Distribution, site: Path) -> bool:
    """Installed mmaplug plugins are hidden; the document's own installs (in *site*) are not."""
    if Path(str(dist.locate_file(""))).resolve() == site.resolve():
        return True
    return not any(ep.group == "mmaplug" for ep in dist.entry_points)


_ORIGINAL_DISTRIBUTIONS = importlib.metadata.distributions

#: Imported at start-up by every ``python`` command: the same hiding as ``_visible``.
SITECUSTOMIZE = """\
import importlib.metadata as _metadata
from pathlib import Path as _Path

_original = _metadata.distributions


def _distributions(**kwargs):
    site = _Path({site!r}).resolve()
    return [
        d
        for d in _original(**kwargs)
        if _Path(str(d.locate_file(""))).resolve() == site
        or not any(ep.group == "mmaplug" for ep in d.entry_points)
    ]


_metadata.distributions = _distributions
"""


def blocks_of(doc: str) -> list[Block]:
    return parse(doc, (ROOT / doc).read_text())


def _cleanup_modules(before: set[str], paths: list[Path]) -> None:
    """Forget modules a document imported from the directories it installed or wrote."""
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None) or ""
        if any(file.startswith(str(p)) for p in paths):
            del sys.modules[name]


@contextlib.contextmanager
def document_run(doc: str, workdir: Path, mp: pytest.MonkeyPatch) -> Iterator[DocumentRun]:
    before = set(sys.modules)
    run = DocumentRun(doc, workdir, mp)
    try:
        with _logging_kept():  # a document may configure logging, as its reader would
            yield run
    finally:
        _cleanup_modules(before, [workdir, *run.paths])


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """Restore the root logger's handlers and level and the levels of mmaplug's loggers."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    ours = [logging.getLogger(name) for name in ("mmaplug", *(f"mmaplug.{s}" for s in STAGES))]
    levels = [logger.level for logger in ours]
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for logger, kept in zip(ours, levels, strict=True):
            logger.setLevel(kept)


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_document_runs_as_written(doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Every block of *doc* but the gpu ones runs, in order, and prints what it shows."""
    with document_run(doc, tmp_path, monkeypatch) as run:
        for block in blocks_of(doc):
            if block.marker != "gpu":
                run.run(block)


GPU_BLOCKS = [b for doc in DOCUMENTS for b in blocks_of(doc) if b.marker == "gpu"]


@pytest.mark.gpu
@pytest.mark.parametrize("block", GPU_BLOCKS, ids=[b.where for b in GPU_BLOCKS])
def test_gpu_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A block marked gpu runs on its own on a GPU machine."""
    with document_run(block.doc, tmp_path, monkeypatch) as run:
        run.run(block)


def test_the_conventions_on_a_sample():
    """Prompts, continued commands, outputs, wildcards and markers are read as documented."""
    sample = (
        "<!-- no-test: a reason -->\n```console\n$ mmaplug a \\\n    --b\none\n...\n```\n"
        "   ```python\n   # pkg/mod.py\n   X = 1\n   ```\n```console\npip install .\n```\n"
    )
    skipped, written, plain = parse("s.md", sample)
    assert (skipped.marker, skipped.reason) == ("no-test", "a reason")
    (command,) = skipped.commands
    assert (command.text, command.shown, command.out_span) == (
        "mmaplug a --b",
        ["one", "..."],
        (4, 6),
    )
    assert (written.file, written.body) == ("pkg/mod.py", "# pkg/mod.py\nX = 1")
    assert [c.shown for c in plain.commands] == [None]
    assert matches(["a", "...", "z"], "a\nb\nc\nz\n") and matches(["a", "...", "z"], "a\nz")
    assert matches(["2 passed in ...s"], "2 passed in 0.31s  \n\n")
    assert not matches(["a"], "a\nb") and not matches(["a ...s"], "a 1\n2s")


def test_unknown_languages_and_programs_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An untagged block, a foreign language or program, or a reasonless no-test fails."""
    cases = ["```\nx\n```\n", "```yaml\na: 1\n```\n", "```console\n$ ls\n```\n"]
    cases.append("<!-- no-test -->\n```python\n1/0\n```\n")
    with document_run("sample.md", tmp_path, monkeypatch) as run:
        for case in cases:
            (block,) = parse("sample.md", case)
            with pytest.raises(AssertionError):
                run.run(block)


def update(doc: str) -> int:
    """Rewrite the shown outputs of *doc* that differ from what the commands print now; one
    with ``...`` is left alone (a difference there stops this, as it fails the test)."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        with document_run(doc, Path(tmp), mp) as run:
            for block in blocks_of(doc):
                if block.marker != "gpu":
                    run.run(block, update=True)
    lines = (ROOT / doc).read_text().split("\n")
    for command, printed in sorted(run.updates, key=lambda u: -u[0].out_span[0]):
        block = next(b for b in blocks_of(doc) if any(c.line == command.line for c in b.commands))
        start, end = command.out_span
        new = [" " * block.indent + line for line in normalise(printed.split("\n"))]
        lines[start:end] = new
        print(f"{doc}:{command.line}: updated the output of {command.text}")
    (ROOT / doc).write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=update.__doc__)
    parser.add_argument("--update", nargs="+", metavar="DOC", required=True)
    sys.exit(max(update(doc) for doc in parser.parse_args().update))
