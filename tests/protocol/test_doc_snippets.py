"""Code the docs show from a tested file is that file's code: a block preceded by
``<!-- snippet: <path> <name> -->`` equals, dedented, the lines between ``# [START <name>]`` and ``# [END <name>]``
in *path* (an example DAG that a test runs). A snippet edited in one place only fails here."""

from __future__ import annotations

import re
import textwrap

from ..conftest import REPO

SNIPPET = re.compile(r"<!-- snippet: (\S+) (\S+) -->\n```\w*\n(.*?)```", re.S)


def marked(path: str, name: str) -> str:
    text = (REPO / path).read_text()
    start, end = f"# [START {name}]\n", f"# [END {name}]"
    assert start.strip() in text and end in text, f"{path} has no {start.strip()!r} ... {end!r}"
    body = text.split(start.strip(), 1)[1].split("\n", 1)[1]
    body = body[:body.index(end)]
    return textwrap.dedent(body.rstrip(" ")).strip("\n") + "\n"


def snippets() -> list[tuple[str, str, str, str]]:
    out = []
    for doc in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]:
        out += [(doc.name, path, name, code) for path, name, code in SNIPPET.findall(doc.read_text())]
    return out


def test_every_snippet_is_the_marked_code_of_its_file():
    found = snippets()
    assert {(path, name) for _, path, name, _ in found} >= {("dags_examples/example_audit.py", "audit_stage"),
                                                            ("dags_examples/example_audit.py", "audit_approval")}
    for doc, path, name, code in found:
        assert code == marked(path, name), f"{doc}: the snippet {name} is not the code of {path} between its markers"
