"""A task module that imports in the supervisor but not in its worker processes (an environment the
children differ in): ``tests/django/test_runworker_processes.py``."""

import os

if os.environ.get("QUEUECORE_SUPERVISOR_PID"):
    raise ImportError("this module cannot be imported in a worker process (a test's broken dependency)")
