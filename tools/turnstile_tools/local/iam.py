"""IAM's answer to one request, for the local stack: every function runs under its role.

AWS authorizes each request a function makes against the function's role; moto authorizes
nothing. The embedded endpoint (``turnstile_tools.local.server``) asks ``Authorizer`` about every
request signed with a function's local credentials (``turnstile_tools.local.roles``) and answers
``AccessDeniedException`` where AWS would, before moto sees the request. So a grant the
code needs and the stack lacks fails locally, in the first test that needs it.

What is modelled, from the IAM and DynamoDB documentation ("Using IAM policy conditions
for fine-grained access control"):

* A request is one authorization per table (``BatchGetItem``, ``BatchWriteItem``) or per
  item of a transaction, by the action that item performs (``Put`` is PutItem,
  ``ConditionCheck`` ConditionCheckItem): IAM has no TransactWriteItems action.
* ``dynamodb:LeadingKeys`` is the set of partition key values a request touches (an index
  Query: the index's); a Scan has none. ``dynamodb:Attributes`` is every top-level
  attribute a request names: keys, a put item's own, those in any expression (read or
  written); a read without a projection names every attribute, which no allow list holds.
  ``dynamodb:ReturnValues`` and ``dynamodb:Select`` are the request's parameters, absent
  when it states none.
* A statement allows when its action, resource and every condition match; an explicit
  Deny wins; nothing else is allowed. Streams requests are authorized on the stream's
  ARN, SQS requests on the queue's.

Only the condition operators turnstile's stack uses are known: a policy with any other is
refused when it is loaded, never half-evaluated.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnstile.base.contract import ALL_TABLES

__all__ = [
    "ALL_ATTRIBUTES",
    "Authorizer",
    "Denial",
    "Policy",
    "PolicyError",
    "Request",
    "requests_of",
]

#: What a read without a projection names: every attribute (no allow list holds it).
ALL_ATTRIBUTES = "<every attribute>"

#: Top-level names in an expression: a ``#placeholder`` or a bare word, not a nested part
#: (after ``.``), a value (``:v``) or the tail of another token.
_TOKEN = re.compile(r"(?<![\w.#:])(#\w+|[A-Za-z_][A-Za-z0-9_]*)")
_KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE"}
_FUNCTIONS = {
    "attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains",
    "size", "if_not_exists", "list_append",
}  # fmt: skip
_EXPRESSIONS = (
    "UpdateExpression",
    "ConditionExpression",
    "KeyConditionExpression",
    "FilterExpression",
    "ProjectionExpression",
)
_READS = {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan"}
_TRANSACT_WRITE = {
    "Put": ("dynamodb:PutItem", "Item"),
    "Update": ("dynamodb:UpdateItem", "Key"),
    "Delete": ("dynamodb:DeleteItem", "Key"),
    "ConditionCheck": ("dynamodb:ConditionCheckItem", "Key"),
}


class PolicyError(ValueError):
    """A policy this model cannot evaluate exactly (an unknown operator or element)."""


@dataclass(frozen=True)
class Request:
    """One authorization: an action on a resource, and the condition keys IAM sees.

    ``None`` for a key means the request has no value for it (a Scan's leading keys).
    """

    action: str
    resource: str
    leading_keys: frozenset[str] | None = None
    attributes: frozenset[str] | None = None
    return_values: str | None = None
    select: str | None = None

    def context(self, key: str) -> frozenset[str] | str | None:
        """The request's value for a condition key."""
        values: dict[str, frozenset[str] | str | None] = {
            "dynamodb:LeadingKeys": self.leading_keys,
            "dynamodb:Attributes": self.attributes,
            "dynamodb:ReturnValues": self.return_values,
            "dynamodb:Select": self.select,
        }
        if key not in values:
            raise PolicyError(f"the local IAM model does not know the condition key {key}")
        return values[key]

    def describe(self) -> str:
        """The request as a denial names it: action, resource, and what the conditions saw."""
        parts = [f"{self.action} on {self.resource}"]
        if self.leading_keys:
            parts.append("keys " + ", ".join(sorted(self.leading_keys)[:5]))
        if self.attributes:
            parts.append("attributes " + ", ".join(sorted(self.attributes)))
        return " (".join(parts[:1]) + (f" ({'; '.join(parts[1:])})" if parts[1:] else "")


# -- reading a request -------------------------------------------------------------------


def _names(params: Mapping[str, Any]) -> set[str]:
    """The top-level attribute names the request's expressions name."""
    placeholders = dict(params.get("ExpressionAttributeNames") or {})
    found: set[str] = set()
    for field in _EXPRESSIONS:
        text = params.get(field)
        if not isinstance(text, str):
            continue
        for token in _TOKEN.findall(text):
            if token.startswith("#"):
                found.add(str(placeholders.get(token, token)))
            elif token.upper() not in _KEYWORDS and token not in _FUNCTIONS:
                found.add(token)
    return found


class _Tables:
    """ARNs and partition keys of the tables a request names."""

    def __init__(self, region: str, account: str) -> None:
        self.region, self.account = region, account
        self._partition_keys = {spec.name: spec.partition_key for spec in ALL_TABLES}
        self._index_keys = {
            (spec.name, index.name): index.partition_key
            for spec in ALL_TABLES
            for index in spec.indexes
        }

    def arn(self, table: str, index: str | None = None) -> str:
        arn = f"arn:aws:dynamodb:{self.region}:{self.account}:table/{table}"
        return f"{arn}/index/{index}" if index else arn

    def partition_key(self, table: str, index: str | None = None) -> str | None:
        if index:
            return self._index_keys.get((table, index))
        return self._partition_keys.get(table)

    def leading(self, table: str, item: Mapping[str, Any]) -> str:
        """The partition key value of an item or key (text of its typed value)."""
        key = self.partition_key(table)
        typed = item.get(key) if key else None
        if isinstance(typed, Mapping) and typed:
            return str(next(iter(typed.values())))
        return ""


def _single(
    tables: _Tables, action: str, params: Mapping[str, Any], item_key: str
) -> Request:
    table = str(params.get("TableName", ""))
    item = params.get(item_key) or {}
    names = set(item) | _names(params)
    if action == "dynamodb:GetItem" and not params.get("ProjectionExpression"):
        names = {ALL_ATTRIBUTES}
    returns = params.get("ReturnValues") if action not in _READS else None
    return Request(
        action=action,
        resource=tables.arn(table),
        leading_keys=frozenset({tables.leading(table, item)}),
        attributes=frozenset(names),
        return_values=returns,
    )


def _read_attributes(params: Mapping[str, Any]) -> frozenset[str]:
    """What a Query or Scan names: every attribute without a projection."""
    if not params.get("ProjectionExpression"):
        return frozenset({ALL_ATTRIBUTES})
    return frozenset(_names(params))


def _query(tables: _Tables, params: Mapping[str, Any]) -> Request:
    table, index = str(params.get("TableName", "")), params.get("IndexName")
    key = tables.partition_key(table, index)
    placeholders = dict(params.get("ExpressionAttributeNames") or {})
    text = str(params.get("KeyConditionExpression") or "")
    leading: set[str] = set()
    for placeholder in [p for p, n in placeholders.items() if n == key] + [key or ""]:
        if not placeholder:
            continue
        match = re.search(rf"(?<![\w#]){re.escape(placeholder)}\s*=\s*(:\w+)", text)
        if match:
            typed = (params.get("ExpressionAttributeValues") or {}).get(match.group(1)) or {}
            leading |= {str(v) for v in typed.values()}
            break
    return Request(
        action="dynamodb:Query",
        resource=tables.arn(table, index),
        leading_keys=frozenset(leading) or None,
        attributes=_read_attributes(params),
        select=params.get("Select"),
    )


def _dynamodb(tables: _Tables, action: str, params: Mapping[str, Any]) -> list[Request]:
    iam_action = f"dynamodb:{action}"
    if action in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        return [_single(tables, iam_action, params, "Item" if action == "PutItem" else "Key")]
    if action == "TransactWriteItems":
        out = []
        for entry in params.get("TransactItems") or []:
            ((kind, spec),) = entry.items()
            item_action, item_key = _TRANSACT_WRITE[kind]
            out.append(_single(tables, item_action, spec, item_key))
        return out
    if action == "TransactGetItems":
        return [
            _single(tables, "dynamodb:GetItem", entry["Get"], "Key")
            for entry in params.get("TransactItems") or []
        ]
    if action == "BatchGetItem":
        return [
            Request(
                iam_action,
                tables.arn(table),
                frozenset(tables.leading(table, key) for key in spec.get("Keys") or []),
                _read_attributes(spec),
            )
            for table, spec in (params.get("RequestItems") or {}).items()
        ]
    if action == "BatchWriteItem":
        out = []
        for table, entries in (params.get("RequestItems") or {}).items():
            items = [
                e["PutRequest"]["Item"] if "PutRequest" in e else e["DeleteRequest"]["Key"]
                for e in entries
            ]
            out.append(
                Request(
                    iam_action,
                    tables.arn(table),
                    frozenset(tables.leading(table, i) for i in items),
                    frozenset(name for i in items for name in i),
                )
            )
        return out
    if action == "Query":
        return [_query(tables, params)]
    if action == "Scan":
        index = params.get("IndexName")
        return [
            Request(
                iam_action,
                tables.arn(str(params.get("TableName", "")), index),
                attributes=_read_attributes(params),
                select=params.get("Select"),
            )
        ]
    table = params.get("TableName")
    return [Request(iam_action, tables.arn(str(table)) if table else "*")]


def _streams(action: str, params: Mapping[str, Any]) -> list[Request]:
    # An iterator names its stream: moto's is "<stream ARN>|1|<token>", AWS's starts with
    # the ARN too; GetRecords is authorized on that stream.
    arn = params.get("StreamArn") or str(params.get("ShardIterator") or "").split("|")[0]
    return [Request(f"dynamodb:{action}", str(arn) if arn else "*")]


#: SQS authorizes a batch action as its single one (there is no ``sqs:DeleteMessageBatch``).
_SQS_BATCH_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def _sqs(tables: _Tables, action: str, params: Mapping[str, Any]) -> list[Request]:
    action = _SQS_BATCH_ACTIONS.get(action, action)
    url = params.get("QueueUrl")
    if url:
        path = urllib.parse.urlparse(str(url)).path.strip("/").split("/")
        account, name = (path[-2], path[-1]) if len(path) >= 2 else (tables.account, path[-1])
    elif params.get("QueueName"):
        account, name = tables.account, str(params["QueueName"])
    else:
        return [Request(f"sqs:{action}", "*")]
    return [Request(f"sqs:{action}", f"arn:aws:sqs:{tables.region}:{account}:{name}")]


def requests_of(
    service: str, action: str, params: Mapping[str, Any], region: str, account: str
) -> list[Request]:
    """The authorizations one API call needs. ``service``: ``dynamodb``,
    ``dynamodbstreams`` or ``sqs``; ``action`` and ``params`` as on the wire (and as
    boto3's keyword arguments)."""
    tables = _Tables(region, account)
    if service == "dynamodb":
        return _dynamodb(tables, action, params)
    if service == "dynamodbstreams":
        return _streams(action, params)
    if service == "sqs":
        return _sqs(tables, action, params)
    return [Request(f"{service}:{action}", "*")]


# -- policies ----------------------------------------------------------------------------


def _pattern(text: str) -> re.Pattern[str]:
    """An IAM wildcard (``*`` any run, ``?`` one character) as a regular expression."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)
    return re.compile("".join(parts))


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _matches(patterns: Sequence[re.Pattern[str]], value: str) -> bool:
    return any(p.fullmatch(value) for p in patterns)


def _holds(operator: str, key: str, wanted: list[str], request: Request) -> bool:
    value = request.context(key)
    values = set(value) if isinstance(value, frozenset) else ({value} if value else set())
    present = bool(values)
    if operator == "Null":
        return wanted == ["true" if not present else "false"]
    base, if_exists, _ = operator.partition("IfExists")
    qualifier, _, base = base.rpartition(":")
    like = base == "StringLike"
    if base not in ("StringEquals", "StringLike") or (if_exists and qualifier):
        raise PolicyError(f"the local IAM model does not know the operator {operator}")

    def matches(v: str) -> bool:
        return _matches([_pattern(w) for w in wanted], v) if like else v in wanted

    if qualifier == "ForAllValues":
        return all(matches(v) for v in values)
    if qualifier == "ForAnyValue":
        return any(matches(v) for v in values)
    if qualifier:
        raise PolicyError(f"the local IAM model does not know the operator {operator}")
    if not present:
        return bool(if_exists)
    if isinstance(value, frozenset):
        raise PolicyError(f"{operator} on the multivalued key {key}: use ForAllValues")
    return matches(str(value))


@dataclass(frozen=True)
class _Statement:
    allow: bool
    actions: tuple[re.Pattern[str], ...]
    resources: tuple[re.Pattern[str], ...]
    conditions: tuple[tuple[str, str, tuple[str, ...]], ...]

    def applies(self, request: Request) -> bool:
        return (
            _matches(self.actions, request.action)
            and _matches(self.resources, request.resource)
            and all(_holds(op, key, list(w), request) for op, key, w in self.conditions)
        )


class Policy:
    """A role's identity policy: its statements, with resources as ARN patterns."""

    def __init__(self, statements: Iterable[Mapping[str, Any]]) -> None:
        self.statements: list[_Statement] = []
        for statement in statements:
            unknown = set(statement) - {"Sid", "Effect", "Action", "Resource", "Condition"}
            if unknown:
                raise PolicyError(f"the local IAM model does not know {sorted(unknown)}")
            conditions = tuple(
                (operator, key, tuple(_listed(wanted)))
                for operator, tests in (statement.get("Condition") or {}).items()
                for key, wanted in tests.items()
            )
            for operator, key, wanted in conditions:  # evaluate once: unknowns fail here
                _holds(operator, key, list(wanted), Request("", ""))
            self.statements.append(
                _Statement(
                    allow=statement["Effect"] == "Allow",
                    actions=tuple(_pattern(a) for a in _listed(statement["Action"])),
                    resources=tuple(_pattern(r) for r in _listed(statement["Resource"])),
                    conditions=conditions,
                )
            )

    def allows(self, request: Request) -> bool:
        applying = [s for s in self.statements if s.applies(request)]
        return any(s.allow for s in applying) and not any(not s.allow for s in applying)


@dataclass(frozen=True)
class Denial:
    """A request a role was refused: who, what, and the message AWS would answer with."""

    role: str
    request: Request
    account: str = "123456789012"

    @property
    def principal(self) -> str:
        return f"arn:aws:sts::{self.account}:assumed-role/turnstile-{self.role}/local"

    @property
    def message(self) -> str:
        return (
            f"User: {self.principal} is not authorized to perform: {self.request.action} on "
            f"resource: {self.request.resource} because no identity-based policy allows the "
            f"{self.request.action} action"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "denied": self.request.describe(), "message": self.message}


class Authorizer:
    """Answers, for each request signed by a role's key, whether its role allows it."""

    def __init__(self, policies: Mapping[str, Policy]) -> None:
        self.policies = dict(policies)

    def check(
        self, role: str, service: str, action: str, params: Mapping[str, Any], region: str,
        account: str,
    ) -> Denial | None:
        """The first authorization ``role`` lacks for the call, or None when all hold."""
        policy = self.policies[role]
        for request in requests_of(service, action, params, region, account):
            if not policy.allows(request):
                return Denial(role, request, account)
        return None


def body_params(content_type: str, body: bytes) -> tuple[str | None, dict[str, Any]]:
    """The action and parameters of a request body: JSON (the action is in the
    ``X-Amz-Target`` header: None here) or an AWS query-protocol form."""
    if not body:
        return None, {}
    if "x-www-form-urlencoded" in content_type:
        form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
        return form.pop("Action", None), form
    loaded = json.loads(body)
    return None, loaded if isinstance(loaded, dict) else {}
