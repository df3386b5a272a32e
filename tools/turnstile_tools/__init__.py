"""The operator's and developer's side of turnstile, never in the Lambda asset: the
``turnstile`` command (``cli``, ``output``), the local stack (``local``), the audit, the
redrive, the Python client of the HTTP API, and reading a deployed stack's outputs. It
imports the runtime package ``turnstile``; nothing in ``turnstile`` imports it.
"""
