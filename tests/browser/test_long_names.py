"""A queue name may be 200 characters with no space: pages wrap it instead of scrolling sideways
(dashboard probe: the task page 1,694 px wide, Task types 2,079 and Failures 2,085 in a 1,440 px window)."""

from __future__ import annotations

from typing import Any

import pytest

LONG = "q" * 200  # the longest name a queue may have


@pytest.mark.parametrize("width", [1440, 390])
def test_a_200_character_queue_name_never_makes_a_page_scroll_sideways(operator_page: Any, client: Any,
                                                                        width: int) -> None:
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    task_id = client.enqueue("browser.x", queue=LONG).id
    for path in (f"/queues/{LONG}/tasks/{task_id}/", f"/queues/{LONG}/types/", f"/queues/{LONG}/failures/"):
        response = page.goto(path)
        assert response is not None and response.status == 200, path
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], (path, widths)
