"""Forms of the dashboard: the task list filter and the actions on selected tasks."""

from __future__ import annotations

from typing import Any

from django import forms

from queuecore.core.bulkjobs import StateCount
from queuecore.core.errors import ConfigurationError, PageNotFound
from queuecore.core.inspector import MAX_PAGE, ORDERS
from queuecore.core.keys import validate_task_id
from queuecore.core.states import TASK_ACTIONS, actions_for, bulk_actions_for

MAX_SELECTED = 1000
MAX_COUNTED = 10**15  # a count or unix ms time a page sends back
# Characters of a payload form's text (the enqueue form, a task's edit; their textareas' maxlength): the
# payload limit is checked in bytes after. Under Django's 2.5 MB DATA_UPLOAD_MAX_MEMORY_SIZE.
PAYLOAD_TEXT_MAX = 1_100_000

# The words for each action (which action fits which state is ``queuecore.core.states``).
ACTION_LABELS = {"run": "Run now", "archive": "Archive", "delete": "Delete", "cancel": "Cancel"}
ACTION_DONE = {"run": "moved to pending", "archive": "archived", "delete": "deleted", "cancel": "asked to stop"}


class TaskFilterForm(forms.Form):
    """``?type=&search=&page=&sort=`` of a task list (``sort``: ``newest`` or ``oldest`` first; none or
    anything else: the state's default order)."""

    type = forms.CharField(required=False, max_length=200, strip=True)
    search = forms.CharField(required=False, max_length=2000, strip=True)  # room for a pasted payload
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)
    sort = forms.ChoiceField(required=False, choices=[("", ""), *((o, o) for o in ORDERS)])

    def values(self) -> tuple[str | None, str | None, int]:
        """``(type, search, page)``, with a default for a page that is not one (a bad page keeps the
        filter). A type or search that is not valid (too long) is a ``ConfigurationError``: dropped,
        the list (and an action on "all") would take every task of the state."""
        self.is_valid()
        for name in ("type", "search"):
            if name in self.errors:
                limit = self.fields[name].max_length
                raise ConfigurationError(f"the {name} is too long: at most {limit:,} characters")
        data = self.cleaned_data
        return data.get("type") or None, data.get("search") or None, data.get("page") or 1

    def order(self) -> str | None:
        """``"newest"`` or ``"oldest"`` when asked for, else None (the state's default)."""
        self.is_valid()
        return self.cleaned_data.get("sort") or None

    def checked_page(self) -> int:
        """The page asked for, 1 when none was; ``PageNotFound`` for anything that is not a page number
        (``abc``, 0, a 30-digit number)."""
        self.is_valid()
        if "page" in self.errors:
            raw = str(self.data.get("page", ""))
            shown = raw if len(raw) <= 20 else f"{raw[:20]}…"
            raise PageNotFound(f"no such page: {shown!r} (pages are numbered from 1 to at most {MAX_PAGE:,})")
        return self.cleaned_data.get("page") or 1


class TaskActionForm(forms.Form):
    """An action on the selected task ids (``task_id``, repeated), or on every task in the state (``all``):
    then at most the ``counted`` tasks the confirmation showed, of those in the state at ``counted_at``
    (unix ms), when the page sent them."""

    action = forms.ChoiceField(choices=[(a, a) for a in TASK_ACTIONS])
    all = forms.BooleanField(required=False)
    counted = forms.IntegerField(required=False, min_value=0, max_value=MAX_COUNTED)
    counted_at = forms.IntegerField(required=False, min_value=0, max_value=MAX_COUNTED)

    def __init__(self, *args: Any, state: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state = state

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        ids = self.data.getlist("task_id") if hasattr(self.data, "getlist") else list(self.data.get("task_id", []))
        try:
            data["task_ids"] = [validate_task_id(i) for i in ids]
        except ConfigurationError:
            raise forms.ValidationError("Invalid task id.") from None
        if len(ids) > MAX_SELECTED:
            raise forms.ValidationError(f"Select at most {MAX_SELECTED:,} tasks, or act on all of them.")
        action = data.get("action")
        fitting = bulk_actions_for(self.state) if data.get("all") else actions_for(self.state)
        if action and action not in fitting:
            raise forms.ValidationError(f"{ACTION_LABELS[action]} does not apply to {self.state} tasks.")
        if not data.get("all") and not ids:
            raise forms.ValidationError("Select tasks first, or tick “all”.")
        return data

    def confirmed(self, queue: str) -> StateCount | None:
        """The count the operator confirmed, as the page showed it (None when the page sent none)."""
        counted, at = self.cleaned_data.get("counted"), self.cleaned_data.get("counted_at")
        return None if counted is None or at is None else StateCount(queue, self.state, counted, at / 1000)
