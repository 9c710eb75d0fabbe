"""The project's container images (images/build.py builds them)."""
