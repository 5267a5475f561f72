"""The package's shape, checked from its source: no import cycles, and the layout written down once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from airflow_commit_provider.protocol import layout

from ..conftest import REPO

PACKAGE = REPO / "airflow_commit_provider"


def module_of(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_edges() -> dict[str, set[str]]:
    """Module -> the package modules it imports, anywhere in it: a late import inside a function hides a cycle, it
    does not remove it, and so does an import under ``if TYPE_CHECKING:`` (the loop is in the design either way)."""
    modules = {module_of(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
                names = [f"{target}.{a.name}" for a in node.names] + [target]
                # the parent packages are imported before any module in them anyway: no edge
                edges[mod].update(n for n in names if n in modules and n != mod and not mod.startswith(n + "."))
            elif isinstance(node, ast.Import):
                edges[mod].update(a.name for a in node.names if a.name in modules)
    return edges


def test_no_import_cycles():
    edges = import_edges()
    cycles = []

    def visit(node: str, stack: list[str], on_stack: set[str], done: set[str]) -> None:
        on_stack.add(node)
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt in on_stack:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in done:
                visit(nxt, stack, on_stack, done)
        stack.pop()
        on_stack.discard(node)
        done.add(node)

    done: set[str] = set()
    for mod in sorted(edges):
        if mod not in done:
            visit(mod, [], set(), done)
    assert not cycles, f"import cycles: {cycles}"


def test_the_steps_take_the_job_scope_never_the_committer():
    """Job setup, the task side, job commit and its stages, the abort and the read model work in the job's scope
    (``protocol/job.py``); only the facade, the task runner that drives it and the maintenance jobs built on it
    know ``FileOutputCommitter``."""
    edges = import_edges()
    committer = "airflow_commit_provider.protocol.committer"
    steps = [m for m in edges if m.startswith("airflow_commit_provider.protocol.") and m != committer
             and not m.startswith(("airflow_commit_provider.protocol.maintenance",
                                   "airflow_commit_provider.protocol.runner"))
             and m != "airflow_commit_provider.protocol"]
    reaching = sorted(m for m in steps if committer in edges[m])
    assert not reaching, f"{reaching} import the committer; give them the Job scope instead"
    assert "airflow_commit_provider.protocol.job" in edges


def test_the_readme_layout_is_the_code_layout(tmp_path):
    """The layout is written down once, in the design document; every path there is one JobLayout (or the
    attempt ledger, or the markers) names, and every JobLayout path appears there."""
    text = (REPO / "docs" / "design.md").read_text()
    block = text[text.index("## Layout"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    documented = {re.split(r"\s{2,}", line.strip())[0] for line in block.strip().splitlines() if line.strip()}
    jl = layout.JobLayout("<job>")
    named = {
        jl.job_record, jl.plan("<job uuid>"), jl.commit_log, jl.error_claim, jl.purge_record("<run>"), jl.app_marker(0),
        jl.app_entry(0),
        jl.attempt_dir(0, 1, 2),
        jl.committed_dir(0), jl.task_record(0, 1), jl.attempt_claim(0, 1, 2), jl.attempt_claim(0, 1, 2) + ".started",
        jl.abort_record(0, "<job uuid>"), jl.commit_failure, layout.SUCCESS, f"<partition>/{layout.SUCCESS}", jl.trash_entry("<uuid>") + "/",
        layout.DEDUP_PLAN,
        jl.compaction_plan("<job uuid>"), jl.input_claim("<file>", 0), jl.refused_tasks("<job uuid>"),
        jl.job_schema("<job uuid>"), jl.audit_record("<job uuid>", 0, 2), jl.approval_record("<job uuid>", 0, 2),
    }
    normalise = {"0": "<app>", "00001": "<task>", "1": "<task>", "2": "<try>", "0000000000": "<n>"}

    def generic(path: str) -> str:
        path = re.sub(r"attempt_00001_2", "attempt_<task>_<try>", path)
        path = re.sub(r"task_00001", "task_<task>", path)
        path = re.sub(r"_app_0\.json$", "_app_<app>.json", path)
        path = re.sub(r"_(audit|approval)_<job uuid>_0_2\.json$", r"_\1_<job uuid>_<app>_<try>.json", path)
        return "/".join(normalise.get(p, p) for p in path.split("/"))

    expected = {"<out>/" + generic(p) + ("/..." if p in (jl.attempt_dir(0, 1, 2), jl.committed_dir(0))
                                         else "") for p in named}
    assert documented == expected, (f"docs/design.md lists {sorted(documented - expected)} that JobLayout does not "
                                    f"name; JobLayout names {sorted(expected - documented)} that it does not list")


def test_the_readme_names_the_dags_the_demo_runs():
    """The demo's paragraph in the README names the example DAGs ``example_runner.DEMO_DAGS`` runs, in order."""
    from airflow_commit_provider.example_runner import DEMO_DAGS

    text = " ".join((REPO / "README.md").read_text().split())
    sentence = text[text.index("`python -m airflow_commit_provider.demo` runs `example_"):]
    sentence = sentence[:sentence.index("with `dag.test()`")]
    assert re.findall(r"`(example_\w+)\.py`", sentence) == [name for name, _, _ in DEMO_DAGS]


#: Every exclusive creation of the protocol, and what makes its bytes its writer's own. On an object store an
#: exclusive create that meets an object with exactly its bytes takes it for its own (its first request's answer
#: was lost: :meth:`~airflow_commit_provider.protocol.stores.base.Store.create_exclusive`), so each payload is
#: unique to its writer, or else who wrote it decides nothing.
EXCLUSIVE_CREATES = {
    ("jobsetup", "claim_app_attempt"): "a nonce per setup",
    ("jobsetup", "create_job_record"): "a new job uuid; the answer is not used (the record is read back)",
    ("tasks.attempts", "_commit"): "the attempt (Airflow's try number) and the time of its commit",
    ("tasks.attempts", "recover"): "decides nothing: every adopter writes the same record and reads it back",
    ("ledger", "try_claim"): "the attempt's record, or the word 'failed': every claimant of a failure "
                                   "removes the attempt's files, which is idempotent",
    ("jobcommit.stages", "_fix"): "the commit's start time; a refused plan is read back and used",
    ("targetclaim", "take"): "the job and its generation; a refused claim is read back",
    ("records.claims", "_append"): "the generation and the time; the chain is read back",
    ("maintenance.compaction", "fix_plan"): "decides nothing: a refused plan is read back and used",
    ("maintenance.dedupjob", "_claim"): "a plan uuid, compared when read back",
    ("schemas", "hold_job_schema"): "decides nothing: every writer of one schema writes the same bytes; a refused "
                                    "create is read back and its schema compared",
}


def exclusive_creates(node: ast.AST, function: str = "") -> set[str]:
    """The functions under *node* (innermost, by name) that call ``create_exclusive``."""
    out = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                and child.func.attr == "create_exclusive":
            out.add(function)
        out |= exclusive_creates(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                                 else function)
    return out


def test_every_exclusive_create_says_what_makes_its_bytes_its_writers():
    """A new exclusive creation is added to :data:`EXCLUSIVE_CREATES` with the reason its bytes are unique to its
    writer (or why that decides nothing): without one, a lost answer could hand it another writer's claim."""
    found = {(module_of(path).removeprefix("airflow_commit_provider.protocol."), function)
             for path in (PACKAGE / "protocol").rglob("*.py")
             for function in exclusive_creates(ast.parse(path.read_text()))}
    assert found == set(EXCLUSIVE_CREATES), (
        f"exclusive creations without a reason: {sorted(found - set(EXCLUSIVE_CREATES))}; listed but gone: "
        f"{sorted(set(EXCLUSIVE_CREATES) - found)}")
