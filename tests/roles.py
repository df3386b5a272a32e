"""The functions' deployed roles in the in-process tests: a client that IAM would refuse.

The embedded endpoint enforces each function's role for everything that talks to it over
HTTP (``turnstile_tools.local.server.RoleEnforcement``). Tests that run a function's code against
moto in-process give it a ``CheckedClient``: the same authorization
(``turnstile_tools.local.iam``) over the same generated policies (``turnstile_tools.local.roles``),
before the call reaches moto, and a record of what was allowed and refused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import ClientError

from turnstile.base.contract import Function
from turnstile.storage.dynamo import Dynamo
from turnstile_tools.local.iam import Request
from turnstile_tools.local.roles import LocalRoles

__all__ = [
    "HANDLER_ROLES",
    "ActingClient",
    "CheckedClient",
    "as_user",
    "functions_under_roles",
    "roles_without",
    "table_of",
]

ACCOUNT = "123456789012"


def table_of(request: Request) -> str:
    """The table (or index's table) a request's resource names, '' for anything else."""
    _, _, rest = request.resource.partition(":table/")
    return rest.split("/")[0]


def roles_without(
    role: str, action: str, resource: str, roles: LocalRoles | None = None
) -> LocalRoles:
    """The roles with ``action`` taken out of every statement of ``role`` on ``resource``
    (a reference as the roles file writes it, ``${MainTable.Arn}``): a grant removed, to
    show the code needs it. Fails if no statement granted it."""
    document = copy.deepcopy(dict((roles or LocalRoles.load()).document))
    removed = False
    for statement in document["roles"][role]["statements"]:
        resources = statement["Resource"]
        if resource not in ([resources] if isinstance(resources, str) else resources):
            continue
        actions = statement["Action"]
        listed = [actions] if isinstance(actions, str) else list(actions)
        if action in listed:
            listed.remove(action)
            removed = True
            statement["Action"] = listed or ["none:Nothing"]
    assert removed, f"the {role} role has no {action} on {resource} to remove"
    return LocalRoles(document)


class CheckedClient:
    """A boto3 client whose calls are authorized as ``role``'s first: refused as AWS
    would refuse them (``AccessDeniedException``), else passed on. ``allowed`` and
    ``denied`` record every authorization."""

    def __init__(self, client: Any, role: str, roles: LocalRoles | None = None) -> None:
        self._client = client
        self.role = role
        self.roles = roles or LocalRoles.load()
        self.allowed: list[Request] = []
        self.denied: list[Request] = []
        self._service = client.meta.service_model.service_name
        self._region = client.meta.region_name or "us-east-1"
        self._actions: Mapping[str, str] = client.meta.method_to_api_mapping

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in self._actions:
            return attr
        return self._checked(name, attr)

    def _checked(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def checked(**kwargs: Any) -> Any:
            from turnstile_tools.local.iam import requests_of

            action = self._actions[name]
            policy = self.roles.authorizer().policies[self.role]
            requests = requests_of(self._service, action, kwargs, self._region, ACCOUNT)
            refused = [r for r in requests if not policy.allows(r)]
            if refused:
                self.denied += refused
                raise ClientError(
                    {
                        "Error": {
                            "Code": "AccessDeniedException",
                            "Message": f"User: arn:aws:sts::{ACCOUNT}:assumed-role/"
                            f"turnstile-{self.role}/local is not authorized to perform: "
                            f"{refused[0].action} on resource: {refused[0].resource}",
                        }
                    },
                    action,
                )
            self.allowed += requests
            return call(**kwargs)

        return checked


#: Each handler module and the role its function runs under when deployed.
HANDLER_ROLES = {
    "turnstile.handlers.stream": Function.PROCESSOR,
    "turnstile.handlers.api": Function.API,
    "turnstile.handlers.sweeper": Function.SWEEPER,
    "turnstile.handlers.due_holds": Function.DUE_HOLDS,
}


#: The roles acting now, innermost last: a function's code is running (process-wide, so
#: the threads a processor starts to write its items act as it does).
_ACTING: list[str] = []


class ActingClient(CheckedClient):
    """A client that is checked as the role acting now (``_ACTING``), and passes every
    call through untouched while no function's code runs: one store can serve a test's
    set-up and checks (every right) and the function under test (its role's)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client, Function.PROCESSOR)

    def _checked(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def acting(**kwargs: Any) -> Any:
            if not _ACTING or not _ACTING[-1]:
                return call(**kwargs)
            self.role = _ACTING[-1]
            return CheckedClient._checked(self, name, call)(**kwargs)

        return acting


@contextmanager
def as_user() -> Iterator[None]:
    """Inside a function's code (a test's hook that plays someone else: an organizer
    closing the event mid-commit), calls are a user's again, with every right."""
    _ACTING.append("")
    try:
        yield
    finally:
        _ACTING.pop()


def _acting_as(role: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def acting(*args: Any, **kwargs: Any) -> Any:
        _ACTING.append(role)
        try:
            return method(*args, **kwargs)
        finally:
            _ACTING.pop()

    return acting


@contextmanager
def functions_under_roles() -> Iterator[list[CheckedClient]]:
    """While inside, each function's code runs under its deployed role, however a test
    builds it: a store a Lambda handler builds for itself (``SignupStore()`` in
    ``turnstile.handlers.*``: a cold start) talks through a ``CheckedClient`` of its
    function's role, and the store given to a ``StreamProcessor`` or a ``Sweeper`` (and a
    sweeper's on-failure queue) through an ``ActingClient``, checked as the processor's or
    the sweeper's role while their code runs. Yields the clients made, to check what they
    were refused. The tests' own set-up and checks keep every right."""
    import importlib

    from turnstile.jobs.processor import StreamProcessor
    from turnstile.jobs.sweeper import Sweeper
    from turnstile.storage.dynamo import default_client
    from turnstile.storage.store import SignupStore

    clients: list[CheckedClient] = []
    modules = [importlib.import_module(name) for name in HANDLER_ROLES]

    def factory(role: str) -> Callable[..., SignupStore]:
        def build(client: Any = None, *args: Any, **kwargs: Any) -> SignupStore:
            if client is None:
                client = CheckedClient(default_client(), role)
                clients.append(client)
            return SignupStore(client, *args, **kwargs)

        return build

    def acting_client(init: Callable[..., None]) -> Callable[..., None]:
        def wrapping_init(self: Any, store: Any, *args: Any, **kwargs: Any) -> None:
            dynamo = getattr(store, "dynamo", None)
            if isinstance(dynamo, Dynamo) and not isinstance(dynamo.client, CheckedClient):
                dynamo.client = ActingClient(dynamo.client)
                clients.append(dynamo.client)
            init(self, store, *args, **kwargs)
            # A sweeper's reads of the on-failure queue act as it does too.
            failures = getattr(self, "failures", None)
            sqs = getattr(failures, "sqs", None)
            if sqs is not None and not isinstance(sqs, CheckedClient):
                failures.sqs = ActingClient(sqs)
                clients.append(failures.sqs)

        return wrapping_init

    patched: list[tuple[Any, str, Any]] = [
        (StreamProcessor, "__init__", acting_client(StreamProcessor.__init__)),
        (Sweeper, "__init__", acting_client(Sweeper.__init__)),
        *[
            (cls, name, _acting_as(role, getattr(cls, name)))
            for cls, role, names in (
                (StreamProcessor, Function.PROCESSOR, ("process", "release")),
                (Sweeper, Function.SWEEPER, ("sweep", "replay_failed")),
            )
            for name in names
        ],
        *[
            (module, "SignupStore", factory(HANDLER_ROLES[module.__name__]))
            for module in modules
        ],
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patched]
    for owner, name, replacement in patched:
        setattr(owner, name, replacement)
    try:
        yield clients
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
