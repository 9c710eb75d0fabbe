"""KV-cache admission (kv-cache spec §3): the three kinds' validating rules, the Pod injection
(mutating, CREATE) with its launch-shape analysis, and the frozen-keys guard on Pod UPDATE.

Every module is a set of pure decision functions over plain dicts plus one async handler that
does the lookups; wrong-typed input is refused with its field path, never raised.
"""
