"""The pure engine: the rules every input is held to (``rules``), the one engine that
decides (``lifecycle``: its values, one ``Event``, one ``Command``, one ``Transition``, and
``lifecycle.step``: first decisions, holds, confirmations, cancellations, the waitlist) and
the lineup it keeps on the event (``lineup``). No I/O: it takes values and returns values,
never DynamoDB items; it imports only ``turnstile.base``.
"""
