"""Attacks on the session's repairs: the poller's stop, moto's patches, per-container
metrics, the benchmark's option checks."""

from __future__ import annotations

import threading
from typing import Any

from tests.integration.test_poller import FAST, setup, signup_id, write  # noqa: F401
from turnstile_tools.local.poller import StreamPoller


def test_a_poller_run_again_after_a_stop_delivers_the_batch_it_gave_up_on(setup):  # noqa: F811
    # GIVEN a poller whose failing batch a stop gave up on (behind the checkpoint)
    client, make, messages = setup
    write(client, 3)
    stop = threading.Event()
    calls: list[list[str]] = []
    fail = [True]

    def handler(event: dict[str, Any], context: Any) -> Any:
        calls.append([signup_id(r) for r in event["Records"]])
        if fail[0]:
            stop.set()
            raise RuntimeError("the table is unreachable")
        return {"batchItemFailures": []}

    template = make(handler)
    poller = StreamPoller(
        handler,
        template.streams,
        template.stream_arn,
        template.checkpoints,
        sqs_client=template.sqs,
        failure_queue_url=template.failure_queue_url,
        settings=FAST,
    )
    poller.run(stop)
    assert calls == [["s0", "s1", "s2"]]
    # WHEN the same poller runs again (the handler now succeeds)
    fail[0] = False
    poller.run(threading.Event(), until_idle_s=0.3)
    # THEN the records it gave up on are delivered: nothing read and abandoned is skipped
    assert calls[1:] == [["s0", "s1", "s2"]]
    assert messages() == []
