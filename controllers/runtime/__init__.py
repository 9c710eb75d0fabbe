"""The controller runtime: REST access, informer caches, work queues, leader election."""
