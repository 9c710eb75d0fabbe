# The compiled view of fastpath/degrees.py's imports: fastpath.argv's trie, token walk and
# integer reader.
from fastpath.argv cimport POSITIONAL, RESOLVED, Trie, int_value, spelled, value_class, walk
