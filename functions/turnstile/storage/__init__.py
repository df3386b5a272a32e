"""Storage: everything that knows DynamoDB. The calls and their retries (``dynamo``), the
mapping between the engine's values and items (``intake``: records read and made the
engine's commands; ``items``: decision items, the only place they are built; ``journal``:
what a commit stores), the event items (``events``), parked records of a failing event
(``parking``), signups and requests (``store``, ``requests``), organizers' lists
(``listing``), the sweeper's ledger (``ledger``), and the ports the jobs depend on
(``ports``). Imports the engine and the base.
"""
