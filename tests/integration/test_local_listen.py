"""The local stack's servers on a port another program holds: ``ListenError``, nothing
printed, nothing started or written (``turnstile local`` turns it into one line)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstile_tools.local.api_server import ApiServer
from turnstile_tools.local.server import EmbeddedAws, ListenError
from turnstile_tools.local.stack import LocalStack


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_endpoint_on_a_taken_port_raises_and_prints_nothing(busy_port, capfd):
    # (werkzeug, left to bind, prints two lines to stderr and exits the process)
    with pytest.raises(ListenError) as error:
        EmbeddedAws("127.0.0.1", busy_port)
    assert (error.value.server, error.value.port, error.value.in_use) == ("aws", busy_port, True)
    assert capfd.readouterr() == ("", "")


def test_the_api_on_a_taken_port_raises(busy_port):
    with pytest.raises(ListenError) as error:
        ApiServer("127.0.0.1", busy_port, dict)
    assert (error.value.server, error.value.port, error.value.in_use) == ("api", busy_port, True)


def test_an_address_not_of_this_machine_is_not_in_use():
    with pytest.raises(ListenError) as error:
        EmbeddedAws("192.0.2.1", 0)  # TEST-NET-1: never a local address
    assert not error.value.in_use and error.value.reason


def test_a_taken_api_port_stops_the_stack_before_it_touches_its_state(busy_port, tmp_path: Path):
    stack = LocalStack(port=free_port(), api_port=busy_port, state_dir=tmp_path, worker=False)
    with pytest.raises(ListenError) as error:
        stack.start()
    assert error.value.server == "api"
    assert stack.aws is None and list(tmp_path.iterdir()) == []


def test_the_endpoint_serves_on_the_port_asked_for():
    import urllib.request

    port = free_port()
    server = EmbeddedAws("127.0.0.1", port)
    server.start()
    try:
        assert server.port == port
        from turnstile_tools.local.roles import DENIALS_PATH

        with urllib.request.urlopen(f"http://127.0.0.1:{port}{DENIALS_PATH}") as reply:
            assert reply.status == 200
    finally:
        server.stop()


def test_a_server_never_started_stops_at_once():
    # (a start that fails half-way stops what it built; shutdown() alone would wait forever)
    import threading

    server = EmbeddedAws("127.0.0.1", 0)
    stopping = threading.Thread(target=server.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=5)
    assert not stopping.is_alive()
