"""The pure engine: the domain's values and input rules (``domain``), the one engine that
decides (``lifecycle.step``: first decisions, holds, confirmations, cancellations, the
waitlist) and the lineup it keeps on the event. No I/O: it takes values and returns values;
it imports only ``turnstile.base``.
"""
