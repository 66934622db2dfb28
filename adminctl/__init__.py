"""adminctl: the operator's command line for queuecore (click + rich).

Installed as the package ``queuecore_adminctl`` (the repository keeps it in ``adminctl/``), with
the ``adminctl`` console script; ``python -m queuecore_adminctl`` runs it too.

It talks to Redis only through ``queuecore.core`` (the ``Inspector`` for every read and operator
action, the ``Client`` for ``enqueue``) and never needs Django.
"""

__version__ = "0.1.0"
