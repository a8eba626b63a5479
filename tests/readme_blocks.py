"""The Python code blocks of README.md and the pages of docs/, for tests that run them: a block is found by its first
line, a comment naming it ("# PyTorch", "# Keras", ...), once across every page. A line `expression  # literal...`
states what the expression gives; check() evaluates it and compares."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))  # README.md, then docs/*.md


def text() -> str:
    """Every page's text, README.md first, joined."""
    return "\n".join(p.read_text(encoding="utf-8") for p in PAGES)


def blocks() -> list[str]:
    """The code of every ```python block of every page."""
    return re.findall(r"```python\n(.*?)```", text(), flags=re.DOTALL)


def block(label: str) -> str:
    """The code of the ```python block whose first line is `# {label}`; fails the test if it is absent or in more
    than one place."""
    found = [b for b in blocks() if b.splitlines()[0].strip() == f"# {label}"]
    assert len(found) == 1, f"README.md and docs/ have {len(found)} python blocks labelled '# {label}'"
    return found[0]


def run(label: str) -> dict:
    """Execute the block; then each `expression  # literal` line is evaluated and compared with the literal.
    Returns the block's namespace."""
    code = block(label)
    namespace: dict = {}
    exec(compile(code, f"README.md:{label}", "exec"), namespace)  # noqa: S102 - the project's own README
    for line in code.splitlines():
        if line.startswith((" ", "#")) or "  # " not in line:
            continue
        expression, comment = line.split("  # ", 1)
        try:
            ast.parse(expression.strip(), mode="eval")
        except SyntaxError:
            continue
        expected = _literal(comment.strip())
        if expected is _NONE:
            continue
        got = eval(expression.strip(), namespace)
        assert got == expected, f"README {label}: {expression.strip()} gives {got!r}, the README says {expected!r}"
    return namespace


_NONE = object()


def _literal(comment: str):
    for text in (comment, comment.split(":", 1)[0]):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue
    return _NONE
