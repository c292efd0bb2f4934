"""The cockpit's answers, computed once for every reader and refreshed in the background.

Why: on a busy machine (deployed drivers, an incremental run, a backfill) the API server gets a
small share of the cores, and one computation of the overview (the ops tables read, the health
of every flow) takes seconds of it; every open page asks again every 10 s, and a scraper too.
Here a request is answered at once from the latest computation while it is younger than
``max_stale``; an answer older than ``fresh`` also starts one refresh in the background (never
two at once for the same key), so the next request gets a newer one. Only a key nobody asked
for within ``max_stale`` (or ever) makes a request wait for a computation, and concurrent
requests for it share that one. Each answer says when it was computed (``generated_at``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

log = logging.getLogger("lakehouse.cockpit")


@dataclass
class _Entry:
    answer: tuple[Any, float] | None = None  # (value, computed at), replaced as one
    computing: threading.Lock = field(default_factory=threading.Lock)


class SharedAnswers:
    """Answers by key, served stale-while-revalidate (see the module's docstring)."""

    def __init__(
        self,
        fresh: float = 5.0,
        max_stale: float = 60.0,
        capacity: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fresh, self.max_stale, self.capacity, self.clock = fresh, max_stale, capacity, clock
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.refreshes: list[threading.Thread] = []  # the background ones started (tests join them)

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The answer for ``key``: the shared one when recent enough, else ``compute()``'s."""
        entry = self._entry(key)
        if (answer := entry.answer) is not None:
            age = self.clock() - answer[1]
            if age <= self.max_stale:
                if age > self.fresh:
                    self._refresh_in_background(key, entry, compute)
                return answer[0]
        with entry.computing:  # one computation per key; concurrent requests wait for it
            answer = entry.answer
            if answer is None or self.clock() - answer[1] > self.max_stale:
                answer = entry.answer = (compute(), self.clock())
            return answer[0]

    def _entry(self, key: Hashable) -> _Entry:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
                while len(self._entries) > self.capacity:  # the least recently asked goes
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(key)
            return entry

    def _refresh_in_background(self, key: Hashable, entry: _Entry, compute: Callable[[], Any]) -> None:
        if not entry.computing.acquire(blocking=False):
            return  # being computed: the next request gets it

        def refresh() -> None:
            try:
                entry.answer = (compute(), self.clock())
            except Exception:  # the previous answer stays until max_stale, then a request retries
                log.exception("refreshing the cockpit's answer %r failed", key)
            finally:
                entry.computing.release()

        thread = threading.Thread(target=refresh, name=f"cockpit-refresh-{key}", daemon=True)
        self.refreshes = [t for t in self.refreshes if t.is_alive()] + [thread]
        thread.start()
