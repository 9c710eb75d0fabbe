"""A local model hub for tests, benchmarks and ``make dev``: the subset of the Hugging Face Hub API
the project calls, served from model repositories the tests write.

- :mod:`tests.hub.repos` writes repositories (files, commits, branches and tags, private and gated
  variants, readers by token) into a directory;
- :mod:`tests.hub.server` serves that directory over HTTP with a request log and fault injection;
- ``python -m tests.hub --root DIR --port N`` runs the server as its own process.

Nothing here reaches the internet, and no token is stored: repositories keep the SHA-256 of each
reader's token, the request log records whether a request was authorized, never with what.
"""
