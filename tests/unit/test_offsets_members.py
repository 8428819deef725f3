"""Whether instances run, as an offsets write asks before it writes (review A11).

A write goes ahead only when the data plane's group has no members. Any error of the
broker's answer used to count as "no such group, nobody in it": a timeout, a coordinator
still loading after a broker restart, a missing DESCRIBE ACL. The write then tombstoned
changelogs under running instances. Only "the group does not exist" means empty now;
any other error refuses the write.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from processor.pipeline.offsets import Offsets
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError


class Answering:
    """An admin client whose group description fails with ``code`` (the broker's answer)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def describe_consumer_groups(self, groups: list[str]) -> dict[str, Future[Any]]:
        future: Future[Any] = Future()
        future.set_exception(KafkaException(KafkaError(self.code)))
        return {groups[0]: future}


def offsets_answered(code: int) -> Offsets:
    return Offsets(Config(), Answering(code))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._TIMED_OUT,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError._TRANSPORT,
    ],
)
def test_a_group_that_cannot_be_described_is_not_taken_for_empty(code: int) -> None:
    with pytest.raises(TidemarkError, match="cannot tell whether"):
        offsets_answered(code).members()


def test_a_group_that_does_not_exist_has_no_members() -> None:
    assert offsets_answered(KafkaError.GROUP_ID_NOT_FOUND).members() is False
