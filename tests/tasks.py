"""Tasks autodiscovered by the Django app in the test suite."""

from queuecore import task


@task(name="tests.autodiscovered")
def autodiscovered(value: int = 0) -> int:
    return value
