"""The ``InstanceTypeFlavor`` catalog is read-only to everyone but the worker (devices spec §2.3).

The reference serves the catalog as a get/list/watch-only resource; here it is a CRD the worker
writes from the pools (``controllers.pools.catalog``), so this webhook takes away the verbs a
read-only resource lacks.  The worker's own writes skip it (a matchCondition on its identity), so
every CREATE, UPDATE and DELETE that reaches it is refused, naming what to do instead.
"""

from __future__ import annotations

from webhooks.decision import Decision, refuse
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

_VERBS = {"CREATE": "created", "UPDATE": "edited", "DELETE": "deleted"}


async def guard(request: AdmissionRequest, lookups: Lookups) -> Decision:
    done = _VERBS.get(request.operation, "changed")
    return refuse(
        405,
        "MethodNotAllowed",
        f"InstanceTypeFlavors are a read-only catalog the worker keeps from the pools' ResourceFlavors "
        f"and cannot be {done} by hand; author an InstanceType against an entry instead "
        "(kubectl get instancetypeflavors)",
    )
