"""The frontier core: one host's scheduler, `HostFrontier` (host.py), and its parts.

The records both sides of the crawl speak (URL states, leases, fetch results) live in
udfs/core/records.py; they are re-exported here for the frontier's callers.
"""

from udfs.core.frontier.config import GAUGES, RECENT_OUTCOMES, FrontierConfig
from udfs.core.frontier.host import HostFrontier
from udfs.core.records import (
    HOST_TROUBLE,
    RETRYABLE,
    URL_FIELD_NAMES,
    URL_LAYOUT,
    URL_LAYOUTS,
    Acceptance,
    Admission,
    CompletionResult,
    FetchResult,
    FrontierObserver,
    Kind,
    Lease,
    Outcome,
    UrlState,
    UrlStatus,
    url_from_saved,
    url_to_saved,
)

__all__ = [
    "GAUGES", "HOST_TROUBLE", "RECENT_OUTCOMES", "RETRYABLE", "URL_FIELD_NAMES", "URL_LAYOUT",
    "URL_LAYOUTS", "Acceptance", "Admission", "CompletionResult", "FetchResult",
    "FrontierConfig", "FrontierObserver", "HostFrontier", "Kind", "Lease", "Outcome",
    "UrlState", "UrlStatus", "url_from_saved", "url_to_saved",
]
