"""The shape every Kubernetes object takes in this code: decoded JSON, a ``dict`` keyed by field name."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
