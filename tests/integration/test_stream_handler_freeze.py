"""The stream handler freezes the container's own objects out of the garbage collector's
walks once, after its first batch (``handlers.stream._freeze_container``): they are the
modules, the client and the processor, alive as long as the container, and each full
collection would walk them again to free nothing."""

from __future__ import annotations

import gc

import pytest

from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile_tools.local.context import LocalLambdaContext


@pytest.fixture
def unfrozen(store, monkeypatch):
    gc.unfreeze()
    monkeypatch.setattr(stream_handler, "_frozen", False)
    monkeypatch.setattr(stream_handler, "_processor", StreamProcessor(store))
    yield
    gc.unfreeze()


def test_the_first_batch_freezes_what_is_alive_and_later_ones_freeze_nothing(unfrozen):
    assert gc.get_freeze_count() == 0
    stream_handler.handler({"Records": []}, LocalLambdaContext())
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # the modules, the client, the processor: the container's own
    garbage = [[i] for i in range(1000)]  # objects of a later batch
    stream_handler.handler({"Records": []}, LocalLambdaContext())
    assert gc.get_freeze_count() == frozen  # never frozen: collected as usual
    del garbage
