"""turnstile's AWS infrastructure: one stack composed of one construct per integration.

Every construct's class is named ``...Construct`` (``TurnstileStack`` is the stack): the bare
names (``StreamProcessor``, ``Sweeper``) are the runtime classes in ``turnstile`` that the
constructs deploy. The function constructs share one ``FunctionConstructProps``.
"""

from .api import ApiAuth, ApiConstruct, ApiThrottling, CallerRole
from .application import add_turnstile_stack, create_app, enable_nag
from .due_holds import DueHoldsConstruct
from .event_source import event_source_mapping_properties
from .functions import FunctionCommons, FunctionConstruct, FunctionConstructProps
from .monitoring import MonitoringConstruct
from .settings import ContextKey, TurnstileSettings
from .stack import TurnstileStack
from .stream_processor import StreamProcessorConstruct
from .sweeper import SweeperConstruct
from .tables import TablesConstruct

__all__ = [
    "ApiAuth",
    "ApiConstruct",
    "ApiThrottling",
    "CallerRole",
    "ContextKey",
    "DueHoldsConstruct",
    "FunctionCommons",
    "FunctionConstruct",
    "FunctionConstructProps",
    "MonitoringConstruct",
    "StreamProcessorConstruct",
    "SweeperConstruct",
    "TablesConstruct",
    "TurnstileSettings",
    "TurnstileStack",
    "add_turnstile_stack",
    "create_app",
    "enable_nag",
    "event_source_mapping_properties",
]
