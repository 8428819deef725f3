"""Which tables being removed this data plane has let go of (``tidemark tables remove``).

The command deletes a table's topics only once every instance has let go of them:
librdkafka 2.16 crashes a consumer that holds a partition of a topic deleted under it.
An instance has let go of a marked topic once its subscription leaves the topic out,
an assignment has come since that subscription (an assignment can only hold topics of
the subscription it answers; with no subscription left, none comes), and the
consumer's assignment holds none of the topic's or its backfill topic's partitions.
A data plane outside its group (stopped) holds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable


class Removals:
    """The marks of tables being removed, as one data plane follows them."""

    def __init__(self) -> None:
        #: The input topics of the tables being removed (the control topic's marks).
        self.marked: set[str] = set()
        #: Those this data plane has let go of, for its reports.
        self.released: frozenset[str] = frozenset()
        self._subscriptions = 0
        #: The subscription from which on each marked topic was left out.
        self._left_out: dict[str, int] = {}
        #: The subscription the last assignment answered.
        self._settled = -1

    def read(self, marked: set[str]) -> bool:
        """Take the control topic's marks; whether they changed."""
        if marked == self.marked:
            return False
        self.marked = set(marked)
        self._left_out = {t: n for t, n in self._left_out.items() if t in marked}
        return True

    def subscribed(self, names: Iterable[str], changed: bool) -> None:
        """The subscription is now ``names`` (``changed``: a new one was asked for)."""
        if changed:
            self._subscriptions += 1
        wanted = set(names)
        for topic in self.marked - wanted:
            self._left_out.setdefault(topic, self._subscriptions)
        if not wanted:
            self._settled = self._subscriptions  # no subscription: no assignment comes

    def assigned(self) -> None:
        """An assignment came (the group's answer to the current subscription)."""
        self._settled = self._subscriptions

    def update(self, member: bool, held: set[str]) -> None:
        """Work out :attr:`released` from whether the data plane is in its group and the
        input topics of the partitions its consumer holds (a backfill partition counted
        as its input topic's)."""
        if not member:
            self.released = frozenset(self.marked)
            return
        self.released = frozenset(
            t
            for t in self.marked
            if t in self._left_out and self._settled >= self._left_out[t] and t not in held
        )
