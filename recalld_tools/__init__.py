"""recalld's client-side tools: evaluation, benchmarks and uploads, talking to a server over HTTP."""
