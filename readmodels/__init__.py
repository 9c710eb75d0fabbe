"""Read models of stored objects, shared by the webhooks that admit them and the controllers that
render from them: one parse of an object, so both judge and build the same thing.  Built on api/
and fastpath/ only."""
