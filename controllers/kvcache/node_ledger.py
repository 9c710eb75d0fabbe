"""The per-node ledgers the tier keeps in a ConfigMap it owns (the survey's and the cleanup's):
one JSON object of node name → entry under ``nodes.json``, written canonically so an unchanged
ledger is an unchanged ConfigMap."""

from __future__ import annotations

import json
from typing import Any

from api.objects import Obj

LEDGER_KEY = "nodes.json"


def load(config_map: Obj | None) -> dict[str, dict[str, Any]]:
    """The ledger a ConfigMap holds; empty for none, garbage or a wrong shape."""
    data = (config_map or {}).get("data")
    text = data.get(LEDGER_KEY) if isinstance(data, dict) else None
    try:
        found = json.loads(str(text or "{}"))
    except ValueError:
        return {}
    return (
        {str(k): dict(v) for k, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}
    )


def dump(ledger: dict[str, dict[str, Any]]) -> str:
    return json.dumps(ledger, sort_keys=True, separators=(",", ":"))
