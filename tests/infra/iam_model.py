"""A model of how IAM authorizes DynamoDB requests, to run turnstile's code under the
synthesized roles: moto enforces no IAM, so this is how the tests know that each role's
narrowed statements still let its code do its job, and nothing beyond it.

It follows the DynamoDB developer guide's "Using IAM policy conditions for fine-grained
access control": a request is one authorization per table (per item in a transaction, by
the action that item performs: ``Put`` is PutItem, ``ConditionCheck`` ConditionCheckItem);
``dynamodb:LeadingKeys`` are the partition key values it touches; ``dynamodb:Attributes``
every attribute it names (keys, the item's own for a put, those in any expression, read
or written); a read without a projection names every attribute; ``dynamodb:Select`` is
the Query's or Scan's ``Select`` (absent when it states none). Only the condition
operators turnstile uses are modelled: anything else fails loudly rather than allow.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk.assertions import Template
from botocore.exceptions import ClientError

from turnstile.contract import ALL_TABLES

from .conftest import function_by_handler, render

__all__ = ["ALL_ATTRIBUTES", "CheckedClient", "Request", "RoleModel", "requests_of"]

#: What a read without a projection names: every attribute (no allow list holds it).
ALL_ATTRIBUTES = "<every attribute>"

_WORD = re.compile(r"(?<![#:\w])([A-Za-z_][A-Za-z0-9_]*)")
_NAME = re.compile(r"#\w+")
#: Expression keywords and functions: never attribute names.
_GRAMMAR = {
    "AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE",
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
_PARTITION_KEYS = {spec.default_name: spec.partition_key for spec in ALL_TABLES}
#: A Query of an index names the index's partition key: (table, index) -> its name.
_INDEX_PARTITION_KEYS = {
    (spec.default_name, index.name): index.partition_key
    for spec in ALL_TABLES
    for index in spec.indexes
}
_RESOURCES = {spec.default_name: f"${{{spec.logical_id}.Arn}}" for spec in ALL_TABLES}


@dataclass(frozen=True)
class Request:
    """One authorization: an action on a table, with what the conditions look at."""

    action: str
    table: str
    leading_keys: frozenset[str]
    attributes: frozenset[str]
    return_values: str | None = None
    #: A Query or Scan of an index is authorized on the index's ARN, not the table's.
    index: str | None = None
    select: str | None = None

    @property
    def resource(self) -> str:
        table = _RESOURCES[self.table]
        return f"{table}/index/{self.index}" if self.index else table


def _expression_names(spec: Mapping[str, Any]) -> set[str]:
    names = dict(spec.get("ExpressionAttributeNames") or {})
    found: set[str] = set()
    for field in _EXPRESSIONS:
        text = spec.get(field)
        if not text:
            continue
        found |= {names[token] for token in _NAME.findall(text)}
        found |= {w for w in _WORD.findall(_NAME.sub(" ", text)) if w not in _GRAMMAR}
    return found


def _leading(table: str, item_or_key: Mapping[str, Any]) -> str:
    return str(next(iter(item_or_key[_PARTITION_KEYS[table]].values())))


def _single(action: str, table: str, spec: Mapping[str, Any], item_key: str) -> Request:
    item = spec[item_key]
    names = set(item) | _expression_names(spec)
    read_all = action in ("dynamodb:GetItem",) and not spec.get("ProjectionExpression")
    return Request(
        action=action,
        table=table,
        leading_keys=frozenset({_leading(table, item)}),
        attributes=frozenset({ALL_ATTRIBUTES} if read_all else names),
        return_values=spec.get("ReturnValues", "NONE") if action != "dynamodb:GetItem" else None,
    )


def _read_attributes(spec: Mapping[str, Any]) -> frozenset[str]:
    """What a Query or Scan names: every attribute without a projection."""
    if not spec.get("ProjectionExpression"):
        return frozenset({ALL_ATTRIBUTES})
    return frozenset(_expression_names(spec))


def requests_of(operation: str, kwargs: Mapping[str, Any]) -> list[Request]:
    """The authorizations one client call needs."""
    if operation in ("get_item", "put_item", "update_item", "delete_item"):
        action = "dynamodb:" + "".join(p.title() for p in operation.split("_"))
        item_key = "Item" if operation == "put_item" else "Key"
        return [_single(action, kwargs["TableName"], kwargs, item_key)]
    if operation == "transact_write_items":
        kinds = {
            "Put": ("dynamodb:PutItem", "Item"),
            "Update": ("dynamodb:UpdateItem", "Key"),
            "Delete": ("dynamodb:DeleteItem", "Key"),
            "ConditionCheck": ("dynamodb:ConditionCheckItem", "Key"),
        }
        requests = []
        for entry in kwargs["TransactItems"]:
            ((kind, spec),) = entry.items()
            action, item_key = kinds[kind]
            requests.append(_single(action, spec["TableName"], spec, item_key))
        return requests
    if operation == "batch_get_item":
        return [
            Request(
                "dynamodb:BatchGetItem",
                table,
                frozenset(_leading(table, key) for key in spec["Keys"]),
                frozenset({ALL_ATTRIBUTES}),
            )
            for table, spec in kwargs["RequestItems"].items()
        ]
    if operation == "batch_write_item":
        requests = []
        for table, entries in kwargs["RequestItems"].items():
            items = [
                e["PutRequest"]["Item"] if "PutRequest" in e else e["DeleteRequest"]["Key"]
                for e in entries
            ]
            requests.append(
                Request(
                    "dynamodb:BatchWriteItem",
                    table,
                    frozenset(_leading(table, i) for i in items),
                    frozenset(name for i in items for name in i),
                )
            )
        return requests
    if operation == "query":
        table = kwargs["TableName"]
        names = dict(kwargs.get("ExpressionAttributeNames") or {})
        index = kwargs.get("IndexName")
        pk = _INDEX_PARTITION_KEYS[table, index] if index else _PARTITION_KEYS[table]
        placeholder = next(p for p, n in names.items() if n == pk)
        value = re.search(rf"{placeholder}\s*=\s*(:\w+)", kwargs["KeyConditionExpression"])
        assert value is not None, kwargs["KeyConditionExpression"]
        leading = next(iter(kwargs["ExpressionAttributeValues"][value.group(1)].values()))
        return [
            Request(
                "dynamodb:Query",
                table,
                frozenset({str(leading)}),
                _read_attributes(kwargs),
                index=kwargs.get("IndexName"),
                select=kwargs.get("Select"),
            )
        ]
    if operation == "scan":
        return [
            Request(
                "dynamodb:Scan",
                kwargs["TableName"],
                frozenset(),
                _read_attributes(kwargs),
                index=kwargs.get("IndexName"),
                select=kwargs.get("Select"),
            )
        ]
    raise AssertionError(f"the IAM model does not know {operation}")


def _values(request: Request, key: str) -> set[str] | str | None:
    if key == "dynamodb:LeadingKeys":
        return set(request.leading_keys)
    if key == "dynamodb:Attributes":
        return set(request.attributes)
    if key == "dynamodb:ReturnValues":
        return request.return_values
    if key == "dynamodb:Select":
        return request.select
    raise AssertionError(f"the IAM model does not know the condition key {key}")


def _holds(operator: str, tests: Mapping[str, Any], request: Request) -> bool:
    for key, expected in tests.items():
        wanted = [expected] if isinstance(expected, str) else list(expected)
        value = _values(request, key)
        if operator == "ForAllValues:StringLike":
            assert isinstance(value, set)
            if not all(any(fnmatch.fnmatchcase(v, p) for p in wanted) for v in value):
                return False
        elif operator == "ForAllValues:StringEquals":
            assert isinstance(value, set)
            if not value <= set(wanted):
                return False
        elif operator == "StringEqualsIfExists":
            if value is not None and value not in wanted:
                return False
        elif operator == "StringEquals":
            if value is None or value not in wanted:
                return False
        elif operator == "Null":
            present = bool(value)
            if wanted != [("false" if present else "true")]:
                return False
        else:
            raise AssertionError(f"the IAM model does not know the operator {operator}")
    return True


@dataclass(frozen=True)
class _Statement:
    actions: frozenset[str]
    resources: frozenset[str]
    conditions: Mapping[str, Mapping[str, Any]]

    def allows(self, request: Request) -> bool:
        if request.action not in self.actions:
            return False
        if not any(fnmatch.fnmatchcase(request.resource, r) for r in self.resources):
            return False
        return all(_holds(op, tests, request) for op, tests in self.conditions.items())


class RoleModel:
    """A function role's statements from the synthesized template."""

    def __init__(self, template: Template, handler: str) -> None:
        _, function = function_by_handler(template, handler)
        role = {"Ref": function["Properties"]["Role"]["Fn::GetAtt"][0]}
        self.statements: list[_Statement] = []
        for policy in template.find_resources("AWS::IAM::Policy").values():
            if role not in policy["Properties"].get("Roles", []):
                continue
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                assert statement["Effect"] == "Allow"
                actions = statement["Action"]
                resources = statement["Resource"]
                self.statements.append(
                    _Statement(
                        frozenset([actions] if isinstance(actions, str) else actions),
                        frozenset(
                            str(render(r))
                            for r in (resources if isinstance(resources, list) else [resources])
                        ),
                        statement.get("Condition", {}),
                    )
                )

    def allows(self, request: Request) -> bool:
        return any(s.allows(request) for s in self.statements)

    def denied(self, requests: Iterable[Request]) -> list[Request]:
        return [r for r in requests if not self.allows(r)]


class CheckedClient:
    """A boto3 DynamoDB client that refuses, as AWS would, what ``role`` does not allow
    (``AccessDeniedException``) and records every authorization it granted."""

    def __init__(self, client: Any, role: RoleModel) -> None:
        self._client = client
        self.role = role
        self.allowed: list[Request] = []
        self.denied: list[Request] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_") or name in ("describe_table",):
            return attr

        def call(**kwargs: Any) -> Any:
            requests = requests_of(name, kwargs)
            refused = self.role.denied(requests)
            if refused:
                self.denied += refused
                raise ClientError(
                    {
                        "Error": {
                            "Code": "AccessDeniedException",
                            "Message": f"not authorized: {refused[0]}",
                        }
                    },
                    name,
                )
            self.allowed += requests
            return attr(**kwargs)

        return call
