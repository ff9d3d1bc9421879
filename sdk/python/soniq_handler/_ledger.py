"""The results of attach mode, each kept until a session acknowledges it
(docs/protocol.md, "The Session stream and attach mode"): ``Sent`` is one
session's side of the acknowledgements, ``Ledger`` what waits for the next
session."""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

from . import protocol
from ._log import log

# Results of jobs that ended while no session was open, or that were sent on a
# session that ended before acknowledging them, wait for the next one; at most
# this many (the oldest is dropped first, with a warning). A sidecar holds far
# fewer jobs than this per process (its concurrency).
MAX_KEPT_RESULTS = 1000
# How long a handler told to stop waits, once it holds no job, for the open
# session to acknowledge the results it sent.
ACK_WAIT_SECONDS = 5.0


class Sent:
    """One session's side of the acknowledgements: whether its sidecar
    acknowledges results, and the results sent on it that it has not
    acknowledged yet (by job id)."""

    def __init__(self) -> None:
        self.acks = False  # the sidecar said it acknowledges results (an Ack)
        # Whether a message came from the sidecar yet: one that acknowledges
        # results sends an Ack first, so anything else first means it never will.
        self.heard = False
        self.unacked: Dict[str, protocol.ResultFrame] = {}


class Ledger:
    """Results of attach mode, each kept until a session acknowledges it.

    A result that ends with no session open, or that was sent on a session
    that ended without acknowledging it, waits here for the next session
    (``kept``, oldest first, at most ``limit``). A spawned process
    (``attach`` false) has no next session: nothing is kept.
    """

    def __init__(self, attach: bool, limit: int = MAX_KEPT_RESULTS) -> None:
        self.attach = attach
        self.limit = limit
        self.kept: Dict[str, protocol.ResultFrame] = {}
        # A sidecar acknowledged results once: from then on a session that
        # ends with results unacknowledged hands them to the next one.
        self.peer_acks = False

    def open(self) -> Tuple[Sent, List[protocol.ResultFrame]]:
        """A session opens: the results kept for it, to send it, tracked as
        unacknowledged until its sidecar says whether it acknowledges."""
        sent = Sent()
        kept, self.kept = self.kept, {}
        sent.unacked.update(kept)
        return sent, list(kept.values())

    def heard(self, s: Sent, is_ack: bool) -> None:
        """A message came on the session (``is_ack``: an Ack)."""
        if not s.heard:
            s.heard = True
            if not is_ack:
                s.unacked.clear()  # an older sidecar: it never acknowledges

    def sent(self, s: Sent, frame: protocol.ResultFrame) -> None:
        """A result went out on the session."""
        if self.attach and (s.acks or not s.heard):
            s.unacked[frame["id"]] = frame

    def acked(self, s: Sent, ids: Iterable[str]) -> bool:
        """The sidecar settled these results; True if it named any."""
        s.acks = True
        self.peer_acks = True
        named = False
        for job_id in ids:
            named = True
            s.unacked.pop(job_id, None)
        return named

    def closed(self, s: Sent, unsent: Iterable[protocol.ResultFrame], why: str) -> None:
        """The session is over: the results queued for it and never written
        (``unsent``) go to the next one, and, when the sidecar acknowledges
        results, those written that it may never have received or recorded."""
        pending = {frame["id"]: frame for frame in unsent}
        if s.acks or self.peer_acks:
            pending = {**s.unacked, **pending}
        s.unacked = {}
        for frame in pending.values():
            self.keep(frame, why)

    def keep(self, frame: protocol.ResultFrame, why: str) -> None:
        if not self.attach:
            return  # spawned: there is no next session
        job_id = frame["id"]
        self.kept.pop(job_id, None)
        if len(self.kept) >= self.limit:
            lost = next(iter(self.kept))
            del self.kept[lost]
            log(f"WARN: more than {self.limit} results wait for a session; the result of job {lost} is dropped")
        self.kept[job_id] = frame
        log(f"job {job_id} {why}; its result waits for the next session")

    @staticmethod
    def awaiting(s: Optional[Sent]) -> bool:
        """The session acknowledges results and has not acknowledged some it was sent."""
        return s is not None and s.acks and bool(s.unacked)

    def lost(self, s: Optional[Sent]) -> List[str]:
        """Ids of results no session received (or acknowledged)."""
        return list(self.kept) + (list(s.unacked) if s is not None and s.acks else [])
