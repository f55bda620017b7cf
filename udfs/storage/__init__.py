"""Where fetched bytes go: content-addressed bodies, object store clients, WARC files."""
