"""The worker-gateway's fleet dashboard: a live, read-only web page of every subscribed cluster's
pools, cards, deployments and instances (``--dashboard-address``; docs/dashboard.md).

:mod:`.model` folds the documents purely, :mod:`.history` keeps the sampled history, :mod:`.service`
watches and tells the page, :mod:`.app` serves it; the page itself is ``static/``.
"""
