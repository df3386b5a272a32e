"""``turnstile local --partition-throughput-scale``, started as a user starts it: its
endpoint refuses a partition over its rate as DynamoDB does (boto3 with retries off sees
the raw answer), and a bad scale is one line. The scale is so small (a write unit every
1,000 s) that no machine is slow enough for the bucket to refill during the test."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.conftest import BIN, running_local_stack, user_environment
from turnstile.base.contract import INTAKE_TABLE
from turnstile_tools.local.throughput import ON_DEMAND_MESSAGE


def test_the_local_endpoint_throttles_a_hot_partition(tmp_path):
    with running_local_stack(
        tmp_path / "state",
        "--in-memory",
        "--no-worker",
        "--partition-throughput-scale",
        "0.000001",
    ) as stack:
        dynamodb = stack.dynamodb(total_max_attempts=1)

        def signup(event: str, signup_id: str) -> dict:
            return {"event_id": {"S": event}, "signup_id": {"S": signup_id}, "seats": {"N": "1"}}

        dynamodb.put_item(TableName=INTAKE_TABLE.name, Item=signup("hot", "a"))
        with pytest.raises(dynamodb.exceptions.ThrottlingException) as refused:
            dynamodb.put_item(TableName=INTAKE_TABLE.name, Item=signup("hot", "b"))
        assert refused.value.response["Error"]["Message"] == ON_DEMAND_MESSAGE
        assert refused.value.response["throttlingReasons"][0]["reason"] == (
            "TableWriteKeyRangeThroughputExceeded"
        )
        dynamodb.put_item(TableName=INTAKE_TABLE.name, Item=signup("cold", "b"))


def test_a_bad_scale_is_one_line(tmp_path):
    done = subprocess.run(
        [str(BIN / "turnstile"), "local", "--in-memory", "--partition-throughput-scale", "-2"],
        env=user_environment("http://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a throughput scale" in lines[0], done.stderr
