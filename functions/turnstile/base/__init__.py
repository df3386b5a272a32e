"""The vocabulary every layer shares: the data contract (table and attribute names, statuses,
reasons, limits, the stream's filter), the typed errors, the clock, item sizes, JSON of
DynamoDB values and the rules of personal data. No I/O, and nothing of turnstile but itself.
"""
