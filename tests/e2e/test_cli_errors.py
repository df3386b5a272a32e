"""Errors a newcomer can provoke, through the ``turnstile`` command run as a real process:
each is one line on stderr starting ``turnstile:``, exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.e2e.conftest import BIN, RunningStack, free_port, user_environment, wait_healthy

pytestmark = pytest.mark.e2e


def turnstile(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "turnstile"), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The error line, after checking it is the only output on stderr and the exit is 2."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("turnstile: "), lines[0]
    assert "unexpected error" not in lines[0], lines[0]  # foreseen: said in its own words
    return lines[0]


@contextmanager
def plain_http_server(body: bytes, content_type: str, status: int = 200) -> Iterator[str]:
    """An HTTP server that is not turnstile's API: every request gets ``body``."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def busy_port() -> Iterator[int]:
    """A port another program (this test) is listening on: a web server with a page of its
    own, as whatever else holds 4566 or 8080 would be. Asked whether it is a turnstile local,
    it answers no at once (a listener that never answers is asked for 2 s: the integration
    test of a taken API port, tests/integration/test_local_listen.py, has that one)."""
    with plain_http_server(b"<h1>It works!</h1>\n", "text/html") as url:
        yield int(url.rsplit(":", 1)[1])


def nothing_listening() -> str:
    return f"http://127.0.0.1:{free_port()}"


# -- the AWS side ----------------------------------------------------------------------


def test_a_stack_asked_of_the_local_endpoint_is_one_line(local_stack: RunningStack):
    # --stack reads CloudFormation, which the local endpoint does not serve (whatever moto
    # modules happen to be installed): one line naming what it serves, and no traceback on
    # the local stack's console either.
    line = one_line_error(turnstile("--stack", "Turnstile", "audit", env=local_stack.env))
    assert line.startswith(f"turnstile: {local_stack.endpoint}: turnstile local serves ")
    assert "not cloudformation; unset AWS_ENDPOINT_URL to reach AWS" in line
    # The same for the AWS CLI, which reads the error the endpoint sends.
    cli = subprocess.run(
        [str(BIN / "aws"), "cloudformation", "describe-stacks"],
        env=local_stack.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode != 0
    assert "ServiceNotServedLocally" in cli.stderr and "not cloudformation" in cli.stderr
    assert "Traceback" not in (local_stack.state_dir / "local.log").read_text()


def test_an_endpoint_that_is_not_a_url_is_one_line():
    env = user_environment("notaurl")
    line = one_line_error(turnstile("event", "show", "concert", env=env))
    assert "AWS_ENDPOINT_URL='notaurl' is not an endpoint URL" in line


def test_an_endpoint_with_nothing_listening_is_one_line():
    endpoint = nothing_listening()
    line = one_line_error(turnstile("event", "show", "concert", env=user_environment(endpoint)))
    assert f"cannot reach the AWS endpoint {endpoint}" in line
    assert "turnstile local" in line


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"<html><body>Bad gateway</body></html>", "text/html", 502),
        (b"Not found\n\nat all", "text/plain", 404),
    ],
)
def test_an_endpoint_that_is_not_aws_is_one_line(body, content_type, status):
    # (A non-AWS server answering 200 is not caught: botocore reads its body as empty.)
    with plain_http_server(body, content_type, status) as url:
        result = turnstile("event", "show", "concert", env=user_environment(url))
    line = one_line_error(result)
    assert f"{url} is not an AWS endpoint: it answered HTTP {status}" in line


def test_the_api_port_given_as_the_aws_endpoint_is_one_line(local_stack: RunningStack):
    result = turnstile("event", "show", "concert", env=user_environment(local_stack.api_url))
    line = one_line_error(result)
    assert f"{local_stack.api_url} is not an AWS endpoint" in line


def test_a_region_without_the_tables_names_them_and_the_region(local_stack: RunningStack):
    env = {**local_stack.env, "AWS_DEFAULT_REGION": "eu-west-3"}
    env.pop("AWS_REGION", None)
    for command in (["event", "show", "concert"], ["audit"], ["status", "concert", "alice"]):
        line = one_line_error(turnstile(*command, env=env))
        assert "turnstile-main" in line and "turnstile-intake" in line, line
        assert "not found in region eu-west-3" in line, line


def without_an_aws_configuration(tmp_path: Path) -> dict[str, str]:
    """The environment of a newcomer who has not run the banner's export line, nor `aws
    configure`: no region, no credentials, no configuration files."""
    env = {k: v for k, v in user_environment("http://unused").items() if not k.startswith("AWS_")}
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "none")
    return env


@pytest.mark.parametrize("command", [["audit"], ["event", "show", "concert"]])
def test_no_region_names_the_local_stack_s_export_line(tmp_path: Path, command):
    line = one_line_error(turnstile(*command, env=without_an_aws_configuration(tmp_path)))
    assert line == (
        "turnstile: no AWS region: set AWS_DEFAULT_REGION (or AWS_REGION), or run `aws "
        "configure` (for turnstile local: run the export line its banner prints)"
    )


# -- the HTTP API side -----------------------------------------------------------------


@pytest.mark.parametrize("command", [["status", "concert", "alice"], ["submit", "concert", "a"]])
def test_an_api_url_that_is_not_a_url_is_one_line(local_stack: RunningStack, command):
    line = one_line_error(turnstile(*command, "--api-url", "notaurl", env=local_stack.env))
    assert "--api-url 'notaurl' is not an http:// or https:// URL" in line
    env = {**local_stack.env, "TURNSTILE_API_URL": "ftp://example.com"}
    line = one_line_error(turnstile(*command, env=env))
    assert "TURNSTILE_API_URL 'ftp://example.com' is not an http" in line


@pytest.mark.parametrize("command", [["status", "concert", "alice"], ["submit", "concert", "a"]])
def test_the_aws_endpoint_given_as_the_api_is_not_a_turnstile_api(
    local_stack: RunningStack, command
):
    # moto answers XML (or an HTML error page) where the API would answer JSON.
    result = turnstile(*command, "--api-url", local_stack.endpoint, env=local_stack.env)
    line = one_line_error(result)
    assert f"{local_stack.endpoint} is not a turnstile API" in line


@pytest.mark.parametrize("status", [200, 404])
def test_a_plain_http_server_is_not_a_turnstile_api(local_stack: RunningStack, status):
    with plain_http_server(b"<h1>It works!</h1>\n", "text/html", status) as url:
        result = turnstile("status", "concert", "alice", "--api-url", url, env=local_stack.env)
    line = one_line_error(result)
    assert f"{url} is not a turnstile API" in line and f"HTTP {status}" in line


def test_an_api_with_nothing_listening_is_one_line(local_stack: RunningStack):
    url = nothing_listening()
    result = turnstile("status", "concert", "alice", "--api-url", url, env=local_stack.env)
    line = one_line_error(result)
    assert f"cannot reach the turnstile API at {url}" in line


# -- turnstile local's ports -----------------------------------------------------------


def local(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return turnstile(
        "local", "--in-memory", *args, env=env or user_environment("http://unused"), timeout=120
    )


def test_local_with_the_endpoint_port_taken_names_the_port_and_the_option():
    with busy_port() as port:
        line = one_line_error(local("--port", str(port), "--api-port", str(free_port())))
    assert f"port {port} (the AWS endpoint) is in use" in line
    assert "--port" in line and "--api-port" not in line and "make" not in line
    # the very line docs/local-stack.md shows
    assert line == shown_line("docs/local-stack.md").replace("4566", str(port))


def shown_line(doc: str) -> str:
    """The port-in-use line a document of the repository shows."""
    text = (Path(__file__).resolve().parents[2] / doc).read_text()
    return next(x for x in text.splitlines() if x.startswith("turnstile: port 4566"))


def make_run(*variables: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`make run VARIABLES` (its install taken as done: -o, the stamp is not redone)."""
    root = Path(__file__).resolve().parents[2]
    # as a user runs it, at the top level: not as a sub-make of `make test` (make[1]: ...)
    outer = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")
    env = {k: v for k, v in env.items() if k not in outer}
    return subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed-local", "run", *variables],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def turnstile_line(result: subprocess.CompletedProcess) -> str:
    """turnstile's one error line under make, which adds a line of its own after it."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [x for x in result.stderr.splitlines() if not x.startswith("make: ***")]
    assert len(lines) == 1 and lines[0].startswith("turnstile: "), result.stderr
    return lines[0]


def test_make_run_with_its_port_taken_names_make_run_s_variable(tmp_path: Path):
    # `make run PORT=4792` with 4792 taken named --port, an option make run does not take
    env = {**user_environment("http://unused"), "TURNSTILE_STATE_DIR": str(tmp_path / "state")}
    with busy_port() as port:
        line = turnstile_line(make_run(f"PORT={port}", f"API_PORT={free_port()}", env=env))
    assert line == (
        f"turnstile: port {port} (the AWS endpoint) is in use by another program: stop it, "
        "or choose another port with make run PORT=N (or TURNSTILE_PORT)"
    )
    assert line == shown_line("README.md").replace("4566", str(port))  # what the README shows
    with busy_port() as api_port:
        line = turnstile_line(make_run(f"PORT={free_port()}", f"API_PORT={api_port}", env=env))
    assert line.endswith("choose another port with make run API_PORT=N (or TURNSTILE_API_PORT)")
    line = turnstile_line(make_run("PORT=4790", "API_PORT=4790", env=env))
    assert line.startswith("turnstile: PORT and API_PORT are both 4790")


def test_local_with_the_api_port_taken_names_the_port_and_the_option():
    with busy_port() as api_port:
        line = one_line_error(local("--port", str(free_port()), "--api-port", str(api_port)))
    assert f"port {api_port} (the HTTP API) is in use" in line
    assert "--api-port" in line


def test_local_names_the_environment_variable_it_read_the_port_from():
    with busy_port() as port:
        env = {**user_environment("http://unused"), "TURNSTILE_PORT": str(port)}
        line = one_line_error(local("--api-port", str(free_port()), env=env))
    assert f"port {port} (the AWS endpoint) is in use" in line and "TURNSTILE_PORT" in line
    env = {**user_environment("http://unused"), "TURNSTILE_API_PORT": "eighty"}
    line = one_line_error(local(env=env))
    assert "TURNSTILE_API_PORT must be a port number from 0 to 65535, not 'eighty'" in line


def test_local_listens_on_the_ports_of_its_environment_variables(tmp_path: Path):
    port, api_port = free_port(), free_port()
    env = {
        **user_environment(f"http://127.0.0.1:{port}"),
        "TURNSTILE_PORT": str(port),
        "TURNSTILE_API_PORT": str(api_port),
    }
    with open(tmp_path / "local.log", "w") as log:
        process = subprocess.Popen(
            [str(BIN / "turnstile"), "local", "--in-memory", "--no-worker"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_healthy(f"http://127.0.0.1:{api_port}", process)
            shown = turnstile("event", "create", "ported", "--capacity", "1", env=env)
            assert shown.returncode == 0, shown.stderr
        finally:
            process.terminate()
            process.wait(timeout=30)
    banner = (tmp_path / "local.log").read_text()
    assert f"AWS endpoint http://127.0.0.1:{port}" in banner
    assert f"HTTP API     http://127.0.0.1:{api_port}" in banner


# -- the command line itself -----------------------------------------------------------


def test_a_usage_error_is_one_line():
    line = one_line_error(turnstile("status", env=user_environment("http://unused")))
    assert "required: event_id, signup_id" in line and "turnstile status --help" in line


def test_version_is_the_package_version():
    from importlib.metadata import version

    result = turnstile("--version", env=user_environment("http://unused"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"turnstile {version('turnstile')}\n"


def test_a_reader_that_closed_the_pipe_gets_quiet(local_stack: RunningStack):
    # `turnstile ... | head -1`: the reader is gone before the output is written. Nothing on
    # stderr, and success: the command did its work, only nobody read the rest.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [str(BIN / "turnstile"), "event", "create", "piped", "--capacity", "1"],
            env=local_stack.env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (0, "")
    shown = turnstile("event", "show", "piped", env=local_stack.env)
    assert shown.returncode == 0 and '"capacity": 1' in shown.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "piped", "alice"],
        ["status", "piped", "alice", "--output", "table"],
        ["event", "list", "-o", "text"],
        ["audit"],
        ["--help"],
    ],
)
def test_a_pipe_closed_by_head_gets_quiet(local_stack: RunningStack, argv: list[str]):
    # `turnstile status concert alice | head -1`, with a reader that reads nothing
    # (head -c0): whether the write comes before or after head exits, nothing on stderr,
    # exit 0 (pipefail: the exit is turnstile's).
    local_stack.turnstile("event", "create", "piped", "--capacity", "1")
    local_stack.turnstile("submit", "piped", "alice")
    command = " ".join([str(BIN / "turnstile"), *argv])
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{command} | head -c0"],
        env=local_stack.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["evnt", "list"], "turnstile: no such command 'evnt'; did you mean 'event'?"),
        (
            ["event", "create", "x", "--capcity", "3"],
            "turnstile: no such option --capcity; did you mean --capacity?",
        ),
    ],
)
def test_a_typo_is_one_line_that_suggests_the_fix(argv: list[str], line: str):
    result = turnstile(*argv, env=user_environment("http://unused"))
    assert one_line_error(result) == line
    assert result.stdout == ""


def test_a_second_local_on_the_same_state_directory_is_refused(local_stack: RunningStack):
    # Other ports, the same state: refused before it touches the write log, naming the
    # process that holds it; the first one runs on.
    result = turnstile(
        "local",
        "--state-dir",
        str(local_stack.state_dir),
        "--port",
        str(free_port()),
        "--api-port",
        str(free_port()),
        env=local_stack.env,
        timeout=120,
    )
    line = one_line_error(result)
    assert (
        f"the state directory {local_stack.state_dir} is in use by another turnstile local" in line
    )
    assert f"(pid {local_stack.process.pid})" in line
    assert local_stack.process.poll() is None
    assert turnstile("event", "list", env=local_stack.env).returncode == 0


@pytest.mark.parametrize("server", ["aws", "api"])
def test_a_port_held_by_another_local_says_so(local_stack: RunningStack, server: str):
    taken = int(
        (local_stack.endpoint if server == "aws" else local_stack.api_url).rsplit(":", 1)[1]
    )
    ports = {"aws": free_port(), "api": free_port()} | {server: taken}
    line = one_line_error(local("--port", str(ports["aws"]), "--api-port", str(ports["api"])))
    assert f"port {taken} " in line and "is in use by another turnstile local" in line
