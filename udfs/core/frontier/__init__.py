"""The frontier core: one host's scheduler, `HostFrontier` (host.py), and its parts.

The records both sides of the crawl speak (URL states, leases, fetch results) live in
udfs/core/records.py; they are re-exported here for the frontier's callers.
"""

from udfs.core.frontier.config import GAUGES, FrontierConfig
from udfs.core.frontier.host import HostFrontier
from udfs.core.records import (
    URL_FIELD_NAMES,
    URL_LAYOUT,
    URL_LAYOUTS,
    Acceptance,
    Admission,
    CompletionResult,
    FetchResult,
    Kind,
    Lease,
    Outcome,
    UrlState,
    UrlStatus,
    url_from_saved,
    url_to_saved,
)

__all__ = [
    "GAUGES", "URL_FIELD_NAMES", "URL_LAYOUT", "URL_LAYOUTS", "Acceptance", "Admission",
    "CompletionResult", "FetchResult", "FrontierConfig", "HostFrontier", "Kind", "Lease",
    "Outcome", "UrlState", "UrlStatus", "url_from_saved", "url_to_saved",
]
