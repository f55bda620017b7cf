"""When the frontier heard from the fetcher, and the silences between (pure, takes times).

An expired lease spends one of its URL's attempts (`max_lease_attempts`, then the URL
is parked) only if the fetcher could have sent it: it was alive when the lease was
issued. A lease issued while the fetcher was silent (down, restarting, cut off) was read
by no one, or only by a new incarnation, which never sends a lease issued before it
started (udfs/core/backqueue.py): its expiry is not the URL's fault, however often it
comes. A lease whose fetch kills the fetcher still spends its attempts, and is parked
in the end, while other completions come in between its grant and the crash.

The fetcher's completions (of any host, NOT_SENT included) say it is alive, each at the
time the fetcher wrote it (`fetched_at`), not when it arrived: a late copy of an old
record (at-least-once delivery) says nothing about now. The fetcher is silent from the
last thing heard until the next: the silence going on now, and each past one longer
than `silence_s` (far longer than completions are apart while it works). The last
`keep` past silences are remembered: a lease is never out longer than its look-ahead
and its timeout, and restarts are rare.
"""

from __future__ import annotations

from collections import deque

SILENCE_S = 10.0  # a restart from a checkpoint takes longer (about 20 s on the test machine)


class FetcherHearing:
    """The fetcher's completions as the frontier heard them, and the silences between."""

    __slots__ = ("silence_s", "heard_at", "silences")

    def __init__(self, silence_s: float = SILENCE_S, keep: int = 16) -> None:
        self.silence_s = silence_s
        self.heard_at: float | None = None  # the latest time the fetcher wrote something
        self.silences: deque[tuple[float, float]] = deque(maxlen=keep)  # (start, end)

    def started(self, now: float) -> None:
        """This frontier (re)started at `now` and has heard nothing yet: the fetcher is
        taken as alive until now, silent after (until its first completion comes)."""
        if self.heard_at is None:
            self.heard_at = now

    def heard(self, written_at: float) -> None:
        """A completion the fetcher wrote at `written_at` (its `fetched_at`, at most now)."""
        last = self.heard_at
        if last is None or written_at > last:
            if last is not None and written_at - last > self.silence_s:
                self.silences.append((last, written_at))
            self.heard_at = written_at

    def silent_at(self, t: float) -> bool:
        """Whether the fetcher was silent at `t` (a lease issued then spends no attempt)."""
        if self.heard_at is None:
            return False  # nothing known yet: every expiry counts
        if t > self.heard_at:
            return True
        return any(start < t < end for start, end in self.silences)
