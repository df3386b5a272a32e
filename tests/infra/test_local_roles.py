"""The roles ``turnstile local`` enforces are the deployed ones, to the byte."""

from __future__ import annotations

from turnstile_cdk.local_roles import REGENERATE, roles_text
from turnstile_tools.local.roles import ROLES_FILE, LocalRoles

from .conftest import DEFAULT_STACK, Synthesized


def test_the_roles_file_is_a_fresh_synthesis(synthesized: Synthesized):
    fresh = roles_text(synthesized.template_json(DEFAULT_STACK))
    assert ROLES_FILE.read_text() == fresh, (
        f"{ROLES_FILE} differs from the synthesized stack's roles: run `{REGENERATE}` and "
        "commit the file"
    )


def test_every_function_role_is_enforced_and_evaluable(synthesized: Synthesized):
    # Every deployed function has its policy in the file, and the local model can
    # evaluate each statement (an unknown operator or key would fail here, not pass).
    roles = LocalRoles.load()
    functions = {
        resource["Properties"]["Handler"]
        for resource in synthesized.template_json(DEFAULT_STACK)["Resources"].values()
        if resource["Type"] == "AWS::Lambda::Function"
        and str(resource["Properties"].get("Handler", "")).startswith("turnstile.")
    }
    assert {spec["handler"] for spec in roles.document["roles"].values()} == functions
    assert set(roles.authorizer().policies) == set(roles.names)
