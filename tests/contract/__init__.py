"""Contract tests: the same cases against an in-memory fake and the real adapter."""
