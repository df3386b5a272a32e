"""``LocalLambdaContext``: the context object the local stack hands the handlers it invokes."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["API_ACCOUNT_ID", "PROCESSOR_ACCOUNT_ID", "LocalLambdaContext"]

#: The account in the local stream processor's ARN (and so in on-failure messages).
PROCESSOR_ACCOUNT_ID = "123456789012"
#: The account in the local API function's ARN and in the API's request context.
API_ACCOUNT_ID = "000000000000"


@dataclass
class LocalLambdaContext:
    """The parts of Lambda's context object that Powertools and handlers read.

    The defaults describe the stream processor, which the local poller invokes;
    ``LocalLambdaContext.api()`` describes the API function, which the local API server
    invokes. The time left counts down from the object's creation.
    """

    function_name: str = "turnstile-stream-processor"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    timeout_s: float = 60
    #: Default: a new UUID.
    aws_request_id: str = ""
    #: Default: ``/aws/lambda/<function_name>``.
    log_group_name: str = ""
    log_stream_name: str = "local"
    account_id: str = PROCESSOR_ACCOUNT_ID

    def __post_init__(self) -> None:
        self.aws_request_id = self.aws_request_id or str(uuid.uuid4())
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"
        self._deadline = time.monotonic() + self.timeout_s

    @classmethod
    def api(cls, **changes: Any) -> LocalLambdaContext:
        """The local API function's context (``changes``: fields set otherwise)."""
        return cls(
            **{
                "function_name": "turnstile-api-local",
                "memory_limit_in_mb": 128,
                "timeout_s": 30.0,
                "account_id": API_ACCOUNT_ID,
                **changes,
            }
        )

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:{self.account_id}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
