"""The management API fuzzed from its own OpenAPI document (schemathesis) against a processor.

Every operation gets generated requests, with the token; each answer must be
documented (status, content type, body schema) and never a server error. The
processor runs a pipeline of its own, so fuzzed stops and offsets writes touch
nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from processor.openapi import OPENAPI
from tests.integration.processes import Processor, pipeline_config
from tests.integration.test_api import TOKEN
from tidemark.cli.devstack.stack import DevStack
from tidemark.config import TOKEN_ENV

pytestmark = pytest.mark.integration

schema = schemathesis.openapi.from_dict(OPENAPI)
#: Operations whose bodies have rules across fields or against Kafka that a schema cannot
#: say (a condition's table among data-collections; topics and offsets of this pipeline):
#: a schema-valid body may get a documented 400 there.
CROSS_CHECKED = {
    "POST /snapshots",
    "PUT /pipelines/{name}/offsets",
    "PATCH /pipelines/{name}/offsets",
    "POST /pipelines/{name}/offsets/reset",
}


@pytest.fixture(scope="module")
def fuzzed(stack: DevStack) -> Iterator[str]:
    """The base URL of the API of a processor running pipeline ``fuzz``."""
    config = pipeline_config(stack, "fuzz")
    processor = Processor(stack, config, "fuzz-processor").start(env={TOKEN_ENV: TOKEN})
    try:
        yield f"http://127.0.0.1:{config.processor.web_port}/api/v1"
    finally:
        processor.stop()


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_documented(case: schemathesis.Case, fuzzed: str) -> None:
    excluded = [positive_data_acceptance] if case.operation.label in CROSS_CHECKED else []
    case.call_and_validate(
        base_url=fuzzed, headers={"Authorization": f"Bearer {TOKEN}"}, excluded_checks=excluded
    )
