"""WARC records as warcio's own writer writes them: the reference that
udfs/storage/warc.py's `build_records`, which writes them itself, is held to
(tests/unit/test_warc.py) and timed against (bench/bench_standards.py)."""

from __future__ import annotations

import io

from warcio.recordbuilder import RecordBuilder
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from udfs.storage.warc import (
    DEPTH_FIELD,
    PROFILE_IDENTICAL,
    PROFILE_NOT_MODIFIED,
    WARC_VERSION,
    Fetch,
    record_id,
    sha256_b32,
    warc_date,
)


def warcio_record(f: Fetch, rec_type: str,
                  refers_to: tuple[str, str, str] | None = None) -> bytes:
    """One record of `f` ("response", "revisit" or "request") as warcio's RecordBuilder
    and WARCWriter write it, from the fields build_records gives it (uncompressed).
    `refers_to`: a revisit's (record id, URI, date) of the response it repeats; None
    for a 304's revisit."""
    ex, builder = f.exchange, RecordBuilder(warc_version=WARC_VERSION)
    resp_id = record_id(f.lease_id, f.url_version, f.attempt, "response")
    common = {"WARC-Date": warc_date(f.fetched_at_ms)}
    if ex.ip:
        common["WARC-IP-Address"] = ex.ip
    extra = {DEPTH_FIELD: str(f.depth)} if f.depth is not None else {}

    def digest(http: StatusAndHeaders, payload: bytes = b"") -> str:
        http.compute_headers_buffer()
        return sha256_b32(http.headers_buff + payload)

    if rec_type == "request":
        http = StatusAndHeaders(f"{ex.method} {ex.target} {ex.version}", ex.request_headers,
                                protocol="", is_http_request=True)
        headers = {"WARC-Record-ID": record_id(f.lease_id, f.url_version, f.attempt,
                                               "request"), **common,
                   "WARC-Concurrent-To": resp_id, "WARC-Block-Digest": digest(http),
                   "WARC-Payload-Digest": sha256_b32(b"")}
        rec = builder.create_warc_record(f.url, "request", http_headers=http,
                                         warc_headers_dict=headers)
    else:
        response_headers = [("X-Archive-Orig-Transfer-Encoding", v)
                            if k.lower() == "transfer-encoding" else (k, v)
                            for k, v in ex.response_headers]
        http = StatusAndHeaders(f"{ex.status} {ex.reason}".strip(), response_headers,
                                protocol=ex.version)
        headers = {"WARC-Record-ID": resp_id, **common, **extra}
        if rec_type == "response":
            headers.update({"WARC-Payload-Digest": sha256_b32(ex.payload),
                            "WARC-Block-Digest": digest(http, ex.payload)})
            if ex.truncated:
                headers["WARC-Truncated"] = ex.truncated
            rec = builder.create_warc_record(f.url, "response",
                                             payload=io.BytesIO(ex.payload),
                                             length=len(ex.payload), http_headers=http,
                                             warc_headers_dict=headers)
        else:
            if refers_to is None:
                headers.update({"WARC-Profile": PROFILE_NOT_MODIFIED,
                                "WARC-Refers-To-Target-URI": f.url})
            else:
                headers.update({"WARC-Profile": PROFILE_IDENTICAL,
                                "WARC-Refers-To": refers_to[0],
                                "WARC-Refers-To-Target-URI": refers_to[1],
                                "WARC-Refers-To-Date": refers_to[2],
                                "WARC-Payload-Digest": sha256_b32(ex.payload)})
                if ex.truncated:
                    headers["WARC-Truncated"] = ex.truncated
            headers["WARC-Block-Digest"] = digest(http)
            rec = builder.create_warc_record(f.url, "revisit", http_headers=http,
                                             warc_headers_dict=headers)
    out = io.BytesIO()
    WARCWriter(out, gzip=False, warc_version=WARC_VERSION).write_record(rec)
    return out.getvalue()
