"""HTTP plumbing the app factory installs: the error responses, the body limit, the request middleware."""
