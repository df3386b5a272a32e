"""The jobs the functions run: the stream processor (load an event, one engine step per chunk,
commit, materialize), the sweeper (re-emit what was not decided) and the due-holds wake-ups.
They work through the storage layer's ports.
"""
