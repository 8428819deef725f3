"""Which reconciled topics the sink reads, and with how many partitions."""

from __future__ import annotations

from typing import Any

from spark_sink.reader import sink_topics


class Listing:
    """``AdminClient.list_topics`` answers, one per call: the broker lists a topic it
    just created without its partitions, or with an error, for a moment."""

    def __init__(self, *answers: dict[str, int | None]) -> None:
        self.answers, self.calls = list(answers), 0

    def list_topics(self, timeout: float) -> Any:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return type("Meta", (), {"topics": {n: topic(p) for n, p in answer.items()}})


def topic(partitions: int | None) -> Any:
    """Topic metadata: ``None`` partitions is a metadata error."""
    error = "LEADER_NOT_AVAILABLE" if partitions is None else None
    return type("Topic", (), {"error": error, "partitions": dict.fromkeys(range(partitions or 0))})


def test_a_topic_listed_without_its_partitions_is_listed_again() -> None:
    admin = Listing({"r.a": 3, "r.b": 0}, {"r.a": 3, "r.b": None}, {"r.a": 3, "r.b": 2})
    assert sink_topics(admin, r"^r\.", [], settle_s=5, pause_s=0) == {"r.a": 3, "r.b": 2}
    assert admin.calls == 3


def test_a_topic_that_never_settles_is_left_out_after_a_while() -> None:
    admin = Listing({"r.a": 3, "r.b": 0, "other": 0})
    assert sink_topics(admin, "", ["r.a", "r.b"], settle_s=0.05, pause_s=0.01) == {"r.a": 3}
    assert admin.calls > 1
