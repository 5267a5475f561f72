"""What a write task instance was given, as the digest its task commit records (the protocol's ``inputs``).

Recovery adopts a task's commit of an earlier application attempt only when the task is given the same inputs now
(:meth:`~airflow_commit_provider.protocol.records.task.TaskCommitRecord.same_inputs`): after a failed run is
cleared, a mapped list whose element *i* changed (reordered, replaced, an upstream XCom that returns other values,
a template rendered differently, ``op_kwargs`` edited in the DAG file) runs task *i* again instead of committing
the old element's rows under its index. The inputs are the task instance's rendered ``op_args`` and ``op_kwargs``
(the map element included), and nothing else: context keys (``ti``, ``dag_run``, the logical dates) are inputs
only when the DAG passes them explicitly in ``op_kwargs``. No Airflow import: the digest is plain JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)


def inputs_digest(op_args: Sequence[Any], op_kwargs: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of ``{"op_args": ..., "op_kwargs": ...}`` canonicalised as JSON: mapping keys sorted, sets
    sorted, tuples as lists, and every value JSON has no form for by its ``repr`` (a date, a path, a Decimal).

    A value is thus compared by its ``repr``. One whose ``repr`` names its memory address (``<Foo object at
    0x...>``) differs on every try, so its task is never recovered (it runs again after a clear: safe, not
    cheap; logged as a warning); one whose ``repr`` does not show the whole value (a large DataFrame) can hide a
    change. Pass what identifies the input (a path, a date, an id) rather than the data itself."""
    unstable: list[str] = []

    def by_repr(value: Any) -> str:
        text = repr(value)
        if " at 0x" in text:
            unstable.append(text)
        return text

    text = json.dumps({"op_args": _canonical(list(op_args), by_repr), "op_kwargs": _canonical(dict(op_kwargs),
                                                                                               by_repr)},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=by_repr)
    if unstable:
        log.warning("the write's arguments hold %s, whose repr names a memory address: its inputs differ on every "
                    "try, so a clear of a failed run runs this task again instead of recovering it. Pass what "
                    "identifies the value (a path, a date, an id) instead", unstable[0])
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _canonical(value: Any, by_repr: Any) -> Any:
    """*value* with every mapping's keys as strings (non-string keys by type and ``repr``, so ``1`` and ``"1"``
    stay apart and keys of mixed types sort), tuples as lists and sets as sorted lists (a set's order varies
    from process to process)."""
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else f"{type(k).__name__}:{k!r}": _canonical(v, by_repr)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, by_repr) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [_canonical(v, by_repr) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, default=by_repr))
    return value


__all__ = ["inputs_digest"]
