"""The pure core of queuecore: the Redis data model, client, worker and inspector.

Nothing under this package imports Django (``tests/core/test_purity.py`` enforces it).
"""
