"""Talking to model hubs: the connection a hub is reached through (endpoint, proxy, CA), resolution
of a Hugging Face revision to a commit and a manifest with ``huggingface_hub``, token checks,
access revalidation, and the classification of every failure into the spec's reasons.

Shared by the worker's ModelArtifact controller and the model-manager node plugin, so both compute a
manifest the same way. Imports only :mod:`api` (and ``huggingface_hub``/``httpx2``). No function
here logs, and no message it builds carries a token, an ``Authorization`` header or a signed URL.
"""
