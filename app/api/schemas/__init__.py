"""Request and response bodies of the HTTP API (every field described for /docs), one module per area."""
