"""Transactions as a ``with`` block: these writes, all or nothing.

``with db.transaction(offsets) as tx:`` commits the named stores with their changelog offsets
when the block ends normally (one LMDB write transaction, as :meth:`Database.commit
<txstore.runtime.database.Database.commit>`), and rolls them back to their last commit when it
raises (their uncommitted writes are discarded, as ``recover`` does); the exception goes on.
``with task.transaction(input_position):`` does the same for a task: :meth:`Task.commit
<txstore.runtime.task.Task.commit>` on success, :meth:`Task.abort
<txstore.runtime.task.Task.abort>` on an exception.

Writes made before the block, and not yet committed, are part of it: a transaction ends at a
commit and starts at the one before, as the overlay does.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from txstore.errors import InvalidStateStoreError

__all__ = ["Transaction"]


class Transaction:
    """One all-or-nothing unit of work; made by ``db.transaction(...)`` or
    ``task.transaction(...)``.

    ``commit`` and ``rollback`` are what the block's end calls; :meth:`rollback` may also be
    called inside the block to discard its writes early (the block's end then does nothing).
    """

    def __init__(self, commit: Callable[[], None], rollback: Callable[[], None]) -> None:
        self._commit = commit
        self._rollback = rollback
        self.state = "open"  # then "committed" or "rolled back"

    def rollback(self) -> None:
        """Discard the uncommitted writes now (of the stores this transaction covers)."""
        self._check_open()
        self._rollback()
        self.state = "rolled back"

    def _check_open(self) -> None:
        if self.state != "open":
            raise InvalidStateStoreError(f"this transaction is already {self.state}")

    def __enter__(self) -> Transaction:
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.state != "open":
            return
        if exc_type is not None:
            self._rollback()
            self.state = "rolled back"
            return
        try:
            self._commit()
        except BaseException:
            # A refused or failed commit (e.g. an offset going backwards) leaves nothing
            # half-done: roll back as for an exception in the block, then raise it.
            self._rollback()
            self.state = "rolled back"
            raise
        self.state = "committed"
