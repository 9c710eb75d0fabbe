"""KV cache (kv-cache spec §5): the backend, pool and binding controllers over pure renderers and
status derivations beside them, and the Mooncake master's admin API they read and write."""
