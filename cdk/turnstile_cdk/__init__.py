"""turnstile's AWS infrastructure: one stack composed of one construct per integration."""

from .api import ApiAuth, ApiThrottling, CallerRole, TurnstileApi
from .application import add_turnstile_stack, create_app, enable_nag
from .event_source import event_source_mapping_properties
from .functions import FunctionCommons, TurnstileFunction
from .monitoring import Monitoring
from .settings import ContextKey, TurnstileSettings
from .stack import TurnstileStack
from .stream_processor import StreamProcessor
from .sweeper import Sweeper
from .tables import TurnstileTables

__all__ = [
    "ApiAuth",
    "ApiThrottling",
    "CallerRole",
    "ContextKey",
    "FunctionCommons",
    "Monitoring",
    "StreamProcessor",
    "Sweeper",
    "TurnstileApi",
    "TurnstileFunction",
    "TurnstileSettings",
    "TurnstileStack",
    "TurnstileTables",
    "add_turnstile_stack",
    "create_app",
    "enable_nag",
    "event_source_mapping_properties",
]
