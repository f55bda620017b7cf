"""Convert the WHATWG URL test data (urltestdata.json) into tests/unit/data/whatwg_http_urls.json.

Usage: python tests/tools/convert_whatwg_urls.py path/to/urltestdata.json

The source is web-platform-tests' url/resources/urltestdata.json (also vendored
by ada-url/ada under tests/wpt/). We keep the cases that concern http(s):
those whose expected result is an http(s) URL (the parsed components we keep
after normalization), those that must fail to parse against an http(s) base or
without a base, and those that parse to another scheme (which we reject).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "unit" / "data" / "whatwg_http_urls.json"


def convert(cases: list) -> list[dict]:
    out = []
    for case in cases:
        if not isinstance(case, dict) or "input" not in case:
            continue  # comment strings
        base = case.get("base")
        if base is not None and not base.startswith(("http:", "https:")):
            continue
        if case.get("failure"):
            out.append({"input": case["input"], "base": base, "expect": None, "kind": "failure"})
        elif case["protocol"] in ("http:", "https:"):
            href = case["href"].split("#", 1)[0]
            out.append({"input": case["input"], "base": base, "kind": "http", "expect": {
                "scheme": case["protocol"][:-1], "host": case["host"],
                "path": case["pathname"],
                "query": case["search"] or ("?" if href.endswith("?") else ""),
            }})
        else:
            out.append({"input": case["input"], "base": base, "expect": None,
                        "kind": f"other scheme {case['protocol']}"})
    return out


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    converted = convert(cases)
    lines = ",\n".join(json.dumps(c, ensure_ascii=False) for c in converted)
    OUT.write_text(f"[\n{lines}\n]\n", encoding="utf-8")
    kinds: dict[str, int] = {}
    for c in converted:
        kinds[c["kind"].split()[0]] = kinds.get(c["kind"].split()[0], 0) + 1
    print(f"{len(converted)} cases -> {OUT} {kinds}")


if __name__ == "__main__":
    main()
