"""The functions' deployed roles in the in-process tests: a client that IAM would refuse.

The embedded endpoint enforces each function's role for everything that talks to it over
HTTP (``turnstile.local.server.RoleEnforcement``). Tests that run a function's code against
moto in-process give it a ``CheckedClient``: the same authorization
(``turnstile.local.iam``) over the same generated policies (``turnstile.local.roles``),
before the call reaches moto, and a record of what was allowed and refused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from turnstile.local.iam import Request
from turnstile.local.roles import LocalRoles

__all__ = ["CheckedClient", "roles_without", "table_of"]

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
            from turnstile.local.iam import requests_of

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
