"""A small Python client of the turnstile HTTP API, for producers and polling clients.

Standard library HTTP (``urllib.request``) so it adds no dependency; botocore (already
required) signs requests with SigV4 when the API is IAM-authorized on AWS. Each answer is
read into its view (``turnstile.service.views``: the models the API serves and documents),
which reads as an attribute or as a key alike.

    client = TurnstileClient("http://127.0.0.1:8080")
    client.submit("concert", "user-42", seats=2)
    decision = client.wait("concert", "user-42", timeout_s=30)
    decision.status == decision["status"]
"""

from __future__ import annotations

import http.client
import json
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Mapping
from decimal import Decimal
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from pydantic import ValidationError

from turnstile.base.contract import Status, signup_key
from turnstile.service import views

__all__ = [
    "FINAL_STATUSES",
    "ApiError",
    "ApiUnreachableError",
    "NotTurnstileApiError",
    "TurnstileClient",
    "WaitTimeoutError",
    "intake_key",
    "region_of_execute_api",
    "shard_key_of",
]

#: API Gateway's own hosts: {api-id}.execute-api.{region}.amazonaws.com (and VPC endpoints).
_EXECUTE_API_HOST = re.compile(
    r"^[a-z0-9-]+\.execute-api\.([a-z0-9-]+)\.(?:vpce\.)?amazonaws\.com(?:\.cn)?$"
)
#: Statuses worth polling through: the store or the network is having a moment.
_TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
#: The API's longest ``?wait=`` (``turnstile.web.api.MAX_WAIT_S``; not imported: the client
#: needs no Powertools).
MAX_WAIT_S = 10.0
#: Below this, a wait is not worth asking the server for: a plain read.
_MIN_WAIT_S = 0.05

V = TypeVar("V", bound=views.View)


def intake_key(event_id: str, signup_id: str, shards: int) -> str:
    """The ``event_id`` a producer writing straight into the intake table puts a signup
    under (its key is ``(intake_key(...), signup_id)``; the HTTP API does this itself).

    An event of one shard: ``event_id`` itself. A sharded event of ``shards`` shards (its
    ``shards``, as ``GET /events/{id}`` shows it): its shard's key, ``"<event_id>#<kk>"``,
    ``kk`` the shard's number in two digits (``00`` to ``31``), the shard being the first 8
    bytes of the BLAKE2b digest (``digest_size=8``) of the signup id's UTF-8, read as an
    unsigned big-endian number, modulo ``shards``. Fixed forever: a signup written under
    any other key of a sharded event is rejected ``invalid_request`` (its ``detail``
    names the right key). ``ValueError`` for ``shards`` outside 1 to 32.
    """
    return signup_key(event_id, signup_id, shards)


#: ``intake_key``'s other name (``contract.shard_of`` refers to it).
shard_key_of = intake_key


class ApiError(Exception):
    """The API answered with an error status.

    ``status`` is the HTTP status, ``code`` the API's ``error`` field (``event_not_found``,
    ``signup_conflict`` ...), ``retry_after`` the Retry-After header in seconds, if any.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.body = body

    @property
    def transient(self) -> bool:
        """True where the same request may well succeed later (429 and 5xx)."""
        return self.status in _TRANSIENT_STATUSES


class NotTurnstileApiError(ApiError):
    """What answered is not a turnstile API: the body is not JSON (an HTML page, an S3 or
    moto XML error, ...), or JSON that is not the answer's view, so the URL or its port is
    most likely wrong.

    ``url`` is the request's URL, ``content_type`` the answer's Content-Type header.
    A subclass of ``ApiError``, so ``transient`` still holds for a proxy's 502/503 page.
    """

    def __init__(
        self,
        url: str,
        status: int,
        content_type: str,
        text: str,
        retry_after: float | None = None,
        what: str = "not JSON",
    ) -> None:
        super().__init__(
            status,
            "not_turnstile_api",
            f"{url} answered HTTP {status} with {content_type or 'no Content-Type'}, {what}",
            retry_after=retry_after,
            body={"message": text},
        )
        self.url = url
        self.content_type = content_type


class ApiUnreachableError(ApiError):
    """No HTTP answer came back: nothing listens at the URL, the connection was refused,
    reset or timed out, or the name does not resolve. ``status`` is 0 (no HTTP status),
    ``code`` ``unreachable``, ``url`` the request's URL and ``reason`` what the network said.
    Transient: a restarting server may answer the next request."""

    def __init__(self, url: str, reason: object) -> None:
        super().__init__(0, "unreachable", f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason

    @property
    def transient(self) -> bool:
        return True


class WaitTimeoutError(TimeoutError):
    """``wait`` reached its deadline while the signup was still undecided."""

    def __init__(self, event_id: str, signup_id: str, timeout_s: float, last: Any) -> None:
        super().__init__(
            f"signup {signup_id!r} of event {event_id!r} still undecided after {timeout_s}s"
        )
        self.event_id = event_id
        self.signup_id = signup_id
        self.timeout_s = timeout_s
        #: The last signup seen (PENDING), or the last error, or None.
        self.last = last


def region_of_execute_api(url: str) -> str | None:
    """The AWS region in an execute-api URL, or None when the host is not API Gateway's."""
    match = _EXECUTE_API_HOST.match((urlsplit(url).hostname or "").lower())
    return match.group(1) if match else None


def _dumps(value: Any) -> str:
    """A request body as JSON, a ``Decimal`` written as its digits: the CLI reads
    ``--attributes``' fractions (and longest integers) as Decimal, which ``json.dumps``
    refuses, and a float would not keep 1.10 as 1.10 (nor 38 digits)."""
    if isinstance(value, Decimal):
        return str(value)  # 1.10, 1E+2, -0: JSON numbers (NaN is sent for the API to refuse)
    if isinstance(value, Mapping):
        items = (f"{json.dumps(str(key))}:{_dumps(item)}" for key, item in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_dumps(item) for item in value) + "]"
    return json.dumps(value)


def _segment(value: str) -> str:
    # Every reserved character escaped, so no id can reach another path than its own.
    return quote(value, safe="")


class TurnstileClient:
    """Calls the API at ``api_url`` (for instance ``http://127.0.0.1:8080`` or a stage URL).

    ``sign``: True signs every request with SigV4 (service ``execute-api``) using the
    credentials of ``session`` (a boto3 Session, default one built on demand); None signs
    only when ``api_url`` is an execute-api host; False never signs.
    Every method returns the API's answer as its view (``turnstile.service.views``: an
    ``Event``, a ``Signup`` ...; ``answer.status`` or ``answer["status"]``), or raises
    ``ApiError`` (``ApiUnreachableError`` when no HTTP answer came back,
    ``NotTurnstileApiError`` when what answered is not the API).
    """

    def __init__(
        self,
        api_url: str,
        session: Any = None,
        sign: bool | None = None,
        timeout_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = session
        self._sign = region_of_execute_api(api_url) is not None if sign is None else sign
        self._sleep = sleep
        self._clock = clock

    # -- the API ----------------------------------------------------------------------

    def create_event(
        self,
        event_id: str,
        capacity: int,
        *,
        waitlist: int | None = None,
        hold_seconds: int | None = None,
        max_seats: int | None = None,
        shards: int | None = None,
    ) -> views.Event:
        """Create an OPEN event (201); ``ApiError`` 409 ``event_exists`` if it exists with
        another capacity or options. The options left None are not sent (their defaults:
        no waitlist, no holds, no ``max_seats``, one shard). ``shards`` (1 to 32): a hot
        event's signups spread over that many shards (a ``waitlist`` bounds their lines
        together); every call still names the event by its own id."""
        body: dict[str, Any] = {"event_id": event_id, "capacity": capacity}
        options = {
            "waitlist": waitlist,
            "hold_seconds": hold_seconds,
            "max_seats": max_seats,
            "shards": shards,
        }
        body.update({name: value for name, value in options.items() if value is not None})
        return self._call("POST", "/events", views.Event, body)

    def get_event(self, event_id: str) -> views.Event:
        """The event: capacity, taken (seats), remaining, positions_given, status_counts, state,
        and its options."""
        return self._call("GET", f"/events/{_segment(event_id)}", views.Event)

    def update_event(self, event_id: str, capacity: int) -> views.Event:
        """Change the capacity: up at any time, down to the seats taken (else ``ApiError``
        400 ``capacity_below_taken``, whose message names how many are taken)."""
        path = f"/events/{_segment(event_id)}"
        return self._call("PATCH", path, views.Event, {"capacity": capacity})

    def close_event(self, event_id: str) -> views.EventClosed:
        """Close the event; ``closed_now`` says whether this call was the one that did."""
        return self._call("POST", f"/events/{_segment(event_id)}/close", views.EventClosed)

    def submit(
        self,
        event_id: str,
        signup_id: str,
        seats: int = 1,
        attributes: Mapping[str, Any] | None = None,
    ) -> views.SignupAccepted:
        """Submit a signup (202, PENDING). Safe to repeat with the same arguments."""
        body: dict[str, Any] = {"signup_id": signup_id, "seats": seats}
        if attributes is not None:
            # Not a map: sent as it is, for the API to refuse by its rules.
            body["attributes"] = dict(attributes) if isinstance(attributes, Mapping) else attributes
        path = f"/events/{_segment(event_id)}/signups"
        return self._call("POST", path, views.SignupAccepted, body)

    def confirm(self, event_id: str, signup_id: str) -> views.RequestRecorded:
        """Ask to confirm a HELD signup (202: recorded, the processor applies it);
        ``ApiError`` 409 ``request_refused`` when its status does not allow it (the
        error's ``body`` has the ``status``, ``hold_expires_at`` and ``reason``)."""
        return self._request(event_id, signup_id, "confirm")

    def cancel(self, event_id: str, signup_id: str) -> views.RequestRecorded:
        """Ask to cancel a HELD, ACCEPTED or WAITLISTED signup (202); ``ApiError`` 409
        ``request_refused`` otherwise, as ``confirm``."""
        return self._request(event_id, signup_id, "cancel")

    def _request(self, event_id: str, signup_id: str, kind: str) -> views.RequestRecorded:
        path = f"/events/{_segment(event_id)}/signups/{_segment(signup_id)}/{kind}"
        return self._call("POST", path, views.RequestRecorded)

    def get(self, event_id: str, signup_id: str, wait_s: float | None = None) -> views.Signup:
        """The signup (its status any of ``Status.ALL``). With ``wait_s``
        (above 0, at most 10) it is read from ``.../decision``, which holds the request
        until the signup is decided or that many seconds have passed."""
        path = f"/events/{_segment(event_id)}/signups/{_segment(signup_id)}"
        if wait_s is None:
            return self._call("GET", path, views.Signup)
        query = urlencode({"wait": f"{wait_s:.3f}"})
        timeout_s = self.timeout_s + wait_s
        return self._call("GET", f"{path}/decision?{query}", views.Signup, timeout_s=timeout_s)

    def list_events(self, limit: int | None = None, next: str | None = None) -> views.EventList:
        """A page of events: ``{"events": [...], "next": token or None}``; pass ``next``
        back for the following page."""
        return self._call("GET", "/events" + _query(limit=limit, next=next), views.EventList)

    def list_signups(
        self,
        event_id: str,
        status: str | None = None,
        limit: int | None = None,
        next: str | None = None,
    ) -> views.SignupList:
        """A page of an event's signups (``status``: one of ``Status.ALL``, else
        all): ``{"signups": [...], "next": token or None}``."""
        query = _query(status=status, limit=limit, next=next)
        return self._call("GET", f"/events/{_segment(event_id)}/signups{query}", views.SignupList)

    def wait(
        self,
        event_id: str,
        signup_id: str,
        timeout_s: float = 30.0,
        initial_delay_s: float = 0.05,
        max_delay_s: float = 2.0,
        statuses: Collection[str] | None = None,
    ) -> views.Signup:
        """Wait until the signup is decided; return it.

        With ``statuses``, wait until its status is one of them (for instance ACCEPTED
        after a confirm); a final status that is not (REJECTED, CANCELLED, EXPIRED: it
        will never change again) is returned at once too, so check the status returned.
        Without, any decision will do (any status but PENDING).

        Each request asks the API to wait (``.../decision?wait=``, up to 10 s and never
        past the deadline), so a signup decided within 10 s costs one request. Between
        requests that fail transiently (429, 5xx, connection errors) it pauses with
        exponential backoff and full jitter (uniform in [0, delay], delay doubling up to
        ``max_delay_s``) and honours Retry-After. Raises ``WaitTimeoutError`` once
        ``timeout_s`` has passed with no decision, ``ApiUnreachableError`` instead when its
        last request got no answer at all (nothing listening: not a slow decision), and
        ``ApiError`` at once for a permanent error such as 404.
        """
        deadline = self._clock() + timeout_s
        delay = initial_delay_s
        last: Any = None
        while True:
            pause_at_least = 0.0
            left = deadline - self._clock()
            wait_s = min(MAX_WAIT_S, left) if left >= _MIN_WAIT_S else None
            asked_at = self._clock()
            try:
                last = self.get(event_id, signup_id, wait_s)
                if _reached(last.get("status"), statuses):
                    return last
            except ApiError as exc:  # unreachable too: the server may be restarting
                if not exc.transient:
                    raise
                last = exc
                pause_at_least = exc.retry_after or 0.0
            remaining = deadline - self._clock()
            if remaining <= 0:
                if isinstance(last, ApiUnreachableError):
                    raise last  # not a signup that took too long: an API never reached
                raise WaitTimeoutError(event_id, signup_id, timeout_s, last)
            waited = wait_s is not None and self._clock() - asked_at >= 0.9 * wait_s
            if isinstance(last, views.Signup) and waited:
                continue  # the server held the request as asked: ask again at once
            # An error, or an answer sooner than asked (a server that does not wait):
            # pause first, never past the deadline (the last request happens at it).
            pause = max(random.uniform(0, delay), pause_at_least)
            self._sleep(min(pause, remaining))
            delay = min(max_delay_s, delay * 2)

    # -- plumbing ---------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        view: type[V],
        body: Any = None,
        timeout_s: float | None = None,
    ) -> V:
        url = self.api_url + path
        data = None if body is None else _dumps(body).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._sign:
            headers = self._signed_headers(method, url, data, headers)
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            timeout = self.timeout_s if timeout_s is None else timeout_s
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
                try:
                    document = _document(raw)
                except ValueError:
                    raise _not_turnstile(url, response.status, response.headers, raw) from None
                try:
                    return view.model_validate(document)
                except ValidationError as exc:
                    what = f"not a turnstile {view.__name__} ({_first_problem(exc)})"
                    raise _not_turnstile(
                        url, response.status, response.headers, raw, what
                    ) from None
        except urllib.error.HTTPError as exc:
            raise _api_error(url, exc) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            # No HTTP answer at all (an HTTPError above is one): refused, reset, timed out.
            reason = getattr(exc, "reason", None) or exc
            reason = getattr(reason, "strerror", None) or reason
            raise ApiUnreachableError(url, reason) from None

    def _signed_headers(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str]
    ) -> dict[str, str]:
        """``headers`` plus SigV4's Authorization, X-Amz-Date and session token."""
        session = self._boto_session()
        credentials = session.get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials found to sign turnstile API requests")
        region = region_of_execute_api(url) or session.region_name
        if not region:
            raise RuntimeError("no AWS region for signing: set one or use an execute-api URL")
        request = AWSRequest(method=method, url=url, data=data or b"", headers=dict(headers))
        SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
        return dict(request.headers.items())

    def _boto_session(self) -> Any:
        if self._session is None:
            self._session = boto3.Session()
        return self._session


#: Statuses no transition leaves (docs/lifecycle.md, §3).
FINAL_STATUSES = Status.FINAL
_reached = Status.reached


def _query(**parameters: Any) -> str:
    """``?a=1&b=2`` of the parameters that are set, or nothing."""
    given = {k: str(v) for k, v in parameters.items() if v is not None}
    return "?" + urlencode(given) if given else ""


def _document(raw: bytes) -> Any:
    return json.loads(raw) if raw else {}


def _first_problem(exc: ValidationError) -> str:
    """The first way an answer is not its view: ``capacity: Field required``."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ())) or "the document"
    return f"{where}: {error.get('msg', 'not valid')}"


def _retry_after(headers: Any) -> float | None:
    header = headers.get("Retry-After") if headers else None
    if header:
        try:
            return float(header)
        except ValueError:
            return None
    return None


def _not_turnstile(
    url: str, status: int, headers: Any, raw: bytes, what: str = "not JSON"
) -> NotTurnstileApiError:
    content_type = (headers.get("Content-Type") if headers else None) or ""
    text = raw.decode("utf-8", "replace")
    return NotTurnstileApiError(url, status, content_type, text, _retry_after(headers), what)


def _api_error(url: str, exc: urllib.error.HTTPError) -> ApiError:
    raw = exc.read()
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:  # the API's errors are JSON: whatever answered is not the API
        return _not_turnstile(url, exc.code, exc.headers, raw)
    if not isinstance(body, dict):
        body = {"message": str(body)}
    if "__type" in body:  # an AWS service's error (the local AWS endpoint's port, say)
        return _not_turnstile(url, exc.code, exc.headers, raw)
    return ApiError(
        status=exc.code,
        code=str(body.get("error") or body.get("code") or "http_error"),
        message=str(body.get("message") or exc.reason),
        retry_after=_retry_after(exc.headers),
        body=body,
    )
