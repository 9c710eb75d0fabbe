"""The webhook server's certificates: a CA, a serving certificate signed by it, rotation before
expiry, and the CA bundle the webhook configurations carry."""
