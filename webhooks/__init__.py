"""The admission webhook server: one pure decision function per admitted kind, behind Starlette.

``webhooks.review`` decodes AdmissionReview requests and encodes responses; ``webhooks.decision``
is what every handler returns; ``webhooks.lookups`` is how handlers read cluster objects;
``webhooks.patch`` builds RFC 6902 patches; ``webhooks.server`` serves them over TLS.
"""
