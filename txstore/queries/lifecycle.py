"""An application instance's lifecycle states: the state machine and its listener.

:class:`Lifecycle` holds the state (Kafka's ``KafkaStreams.State``), the state of the processing
side (``ThreadState``) and a generation number that changes with either, and with every change
of the hosted partitions (composite stores compare it to know when to look again). Transitions
follow Kafka's table (:func:`~txstore.queries.types.valid_transition`); the listener set with
:meth:`Lifecycle.set_state_listener` hears each one.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable

from txstore.errors import StreamsNotRunningError, StreamsNotStartedError
from txstore.queries.types import State, ThreadState, valid_transition

__all__ = ["Lifecycle"]

_log = logging.getLogger("txstore.queries")


class Lifecycle:
    """The lifecycle states of an application instance (the base of
    :class:`~txstore.queries.Application`; see the module docstring)."""

    def __init__(self) -> None:
        self._state = State.CREATED
        self._thread_state = ThreadState.CREATED
        self._state_lock = threading.RLock()
        self._state_listener: Callable[[State, State], None] | None = None
        self._gen_counter = itertools.count(1)
        self._gen = 0
        self._stop = threading.Event()
        self._error: BaseException | None = None

    @property
    def state(self) -> State:
        """The lifecycle state. O(1)."""
        return self._state

    @property
    def error(self) -> BaseException | None:
        """What made the application fail (state ``ERROR``), or None. O(1)."""
        return self._error

    @property
    def thread_state(self) -> ThreadState:
        """The state of the processing side (``PARTITIONS_ASSIGNED`` while restoring). O(1)."""
        return self._thread_state

    @property
    def generation(self) -> int:
        """A number that changes whenever the state, the processing side's state, the
        assignment or the hosted partitions change (composite stores compare it with the one
        their readers were resolved at, to know when to resolve them again). O(1)."""
        return self._gen

    def set_state_listener(self, listener: Callable[[State, State], None] | None) -> None:
        """Call ``listener(new_state, old_state)`` on every state change (from the thread
        making the change). Set it before :meth:`~txstore.queries.Application.start`.

        O(1); ``None`` removes it. An exception the listener raises is logged, not raised.
        """
        self._state_listener = listener

    def _set_state(self, new: State) -> bool:
        with self._state_lock:
            old = self._state
            if old is new:
                return new is State.REBALANCING  # Kafka: REBALANCING -> REBALANCING, silently
            if not valid_transition(old, new):
                return False
            self._state = new
            self._gen = next(self._gen_counter)
        listener = self._state_listener
        if listener is not None:
            try:
                listener(new, old)
            except Exception:  # a listener must not break the application
                _log.exception("state listener failed")
        return True

    def _set_thread_state(self, new: ThreadState) -> None:
        with self._state_lock:
            self._thread_state = new
            self._gen = next(self._gen_counter)

    def _running(self) -> bool:
        return self._state.is_running_or_rebalancing()

    def _validate_running(self) -> None:
        state = self._state
        if state is State.CREATED:
            raise StreamsNotStartedError()
        if not state.is_running_or_rebalancing():
            raise StreamsNotRunningError(str(state))
