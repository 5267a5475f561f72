"""The output modes as strategies: what a job commit replaces, which markers it withdraws and writes, and whether
the job must own an empty target. The plan, the markers and the abort ask the mode; none of them compares names.

=============  ===========================================================================================
``error``      the target must hold no data; the first job to commit claims it (:mod:`.targetclaim`)
``append``     new files beside the old; a name that exists is refused (nothing is replaced by accident)
``overwrite``  every visible file is replaced; every marker withdrawn first
``dynamic``    only the partitions this job writes are replaced; one ``_SUCCESS`` per partition
=============  ===========================================================================================
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import InvalidOutputSpec
from .paths import partition_of


class Mode:
    """``append``: the base every mode refines."""

    name = "append"
    #: the target must be empty and the job holds the error-mode claim on it (:mod:`.targetclaim`)
    claims_target = False
    #: a file the job writes at a name that is visible (and not its own earlier generation's) is refused,
    #: where files become visible at job commit
    refuses_clobber = True
    #: every ``_SUCCESS`` of the output is withdrawn before the first change, not only those above changed files
    withdraws_all_markers = False
    #: a ``_SUCCESS`` in every partition the job wrote, besides the root's
    partition_markers = False

    def check(self, partition_by: tuple[str, ...]) -> None:
        """Refuse a configuration this mode cannot run (by name)."""

    def replaced(self, visible: Iterable[str], written: set[str]) -> set[str]:
        """The visible files a job commit that writes *written* deletes (besides its earlier generation's)."""
        return set()


class ErrorMode(Mode):
    name = "error"
    claims_target = True


class OverwriteMode(Mode):
    name = "overwrite"
    refuses_clobber = False
    withdraws_all_markers = True

    def replaced(self, visible: Iterable[str], written: set[str]) -> set[str]:
        return set(visible)


class DynamicMode(Mode):
    name = "dynamic"
    refuses_clobber = False
    partition_markers = True

    def check(self, partition_by: tuple[str, ...]) -> None:
        if not partition_by:
            raise InvalidOutputSpec("mode='dynamic' replaces the partitions a job writes, so it needs partition_by")

    def replaced(self, visible: Iterable[str], written: set[str]) -> set[str]:
        parts = {partition_of(p) for p in written}
        return {p for p in visible if partition_of(p) in parts}


_MODES: dict[str, Mode] = {m.name: m for m in (ErrorMode(), Mode(), OverwriteMode(), DynamicMode())}
MODES = tuple(_MODES)


def mode_named(name: str) -> Mode:
    """The strategy of mode *name*; :class:`InvalidOutputSpec` naming the modes for anything else."""
    if not isinstance(name, str) or name not in _MODES:
        raise InvalidOutputSpec(f"unknown output mode {name!r}: use one of {', '.join(MODES)}")
    return _MODES[name]


def check_mode(name: str) -> str:
    """*name* if it names a mode."""
    return mode_named(name).name


__all__ = ["MODES", "Mode", "check_mode", "mode_named"]
