/* queuecore dashboard: live-refresh toggle, task selection, confirmations, messages, offline banner.
   Everything works without this file (forms post and redirect); it only makes things nicer. */
(function () {
  "use strict";
  var KEY = "qc-live-paused";

  function stored() {
    try { return window.localStorage.getItem(KEY) === "1"; } catch (e) { return false; }
  }

  function setPaused(paused) {
    window.qcPaused = paused;
    try { window.localStorage.setItem(KEY, paused ? "1" : "0"); } catch (e) { /* private mode */ }
    document.querySelectorAll("[data-qc-live-toggle]").forEach(function (button) {
      button.setAttribute("aria-pressed", paused ? "false" : "true");
      var label = button.querySelector(".qc-live-label");
      if (label) { label.textContent = paused ? "Paused" : "Live"; }
      button.title = paused ? "Automatic refresh is paused: click to resume" : "Refreshing every few seconds: click to pause";
    });
  }

  // Polling partials ask this (in their hx-trigger filter) before refreshing a table the user is selecting in.
  window.qcHasSelection = function (el) {
    return !!el.querySelector("input[data-qc-select]:checked, input[data-qc-select-all]:checked");
  };

  // ... and this before refreshing a panel where the user is choosing how long to pause a queue.
  window.qcChoosing = function (el) {
    return !!el.querySelector('select[name="for"]:focus') ||
      Array.prototype.some.call(el.querySelectorAll('select[name="for"]'), function (s) { return s.value !== ""; });
  };

  function updateSelection(form) {
    if (!form) { return; }
    var boxes = form.querySelectorAll("input[data-qc-select]");
    var checked = form.querySelectorAll("input[data-qc-select]:checked").length;
    var all = form.querySelector("input[data-qc-select-all]");
    var allOn = all && all.checked;
    var pageBox = form.querySelector("input[data-qc-select-page]");
    if (pageBox) {
      pageBox.checked = boxes.length > 0 && checked === boxes.length;
      pageBox.indeterminate = checked > 0 && checked < boxes.length;
    }
    var label = form.querySelector("[data-qc-selected]");
    if (label) {
      label.textContent = allOn ? "All " + (all.parentNode.textContent.trim().replace(/^All\s*/, "")) + " selected"
        : checked ? checked + " selected" : "None selected";
    }
    form.querySelectorAll("[data-qc-needs-selection]").forEach(function (button) {
      button.disabled = !(allOn || checked);
    });
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches("input[data-qc-select-page]")) {
      target.closest("form").querySelectorAll("input[data-qc-select]").forEach(function (box) { box.checked = target.checked; });
    }
    if (target.matches("input[data-qc-select], input[data-qc-select-page], input[data-qc-select-all]")) {
      updateSelection(target.closest("form"));
    }
  });

  document.addEventListener("click", function (event) {
    var toggle = event.target.closest("[data-qc-live-toggle]");
    if (toggle) {
      setPaused(!window.qcPaused);
      if (!window.qcPaused && window.htmx) { window.htmx.trigger(document.body, "qc:refresh"); }
      return;
    }
    var dismiss = event.target.closest("[data-qc-dismiss]");
    if (dismiss) { dismiss.closest(".qc-message").remove(); return; }
    var copy = event.target.closest("[data-qc-copy]");
    if (copy && navigator.clipboard) {
      var source = document.querySelector(copy.getAttribute("data-qc-copy"));
      if (source) {
        navigator.clipboard.writeText(source.textContent).then(function () {
          copy.textContent = "Copied";
          setTimeout(function () { copy.textContent = "Copy"; }, 1500);
        });
      }
    }
  });

  function confirmText(button, form) {
    if (!button || !button.hasAttribute("data-confirm")) { return null; }
    var text = button.getAttribute("data-confirm");
    if (text && text !== "1") { return text; }
    var verb = button.getAttribute("data-qc-action-label") || button.textContent.trim();
    var all = form && form.querySelector("input[data-qc-select-all]");
    if (all && all.checked) { return verb + " every task in this state?"; }
    var n = form ? form.querySelectorAll("input[data-qc-select]:checked").length : 1;
    return verb + " " + n + " task" + (n === 1 ? "" : "s") + "?";
  }

  // With htmx: ask before destructive requests (the submit button carries data-confirm).
  document.addEventListener("htmx:confirm", function (event) {
    var trigger = event.detail.triggeringEvent;
    var button = trigger && trigger.submitter;
    var text = confirmText(button, event.detail.elt.closest("form") || event.detail.elt);
    if (!text) { return; }
    event.preventDefault();
    if (window.confirm(text)) { event.detail.issueRequest(true); }
  });

  // Offline banner: shown while polls fail, hidden at the next success.
  function banner(text) {
    var el = document.getElementById("qc-offline");
    if (!el) { return; }
    if (text) { el.textContent = text; el.hidden = false; } else { el.hidden = true; }
  }
  document.addEventListener("htmx:sendError", function () {
    banner("The dashboard server does not answer. Retrying…");
  });
  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr.status;
    var said = event.detail.xhr.getResponseHeader("X-Qc-Error");  // what went wrong, from the server
    banner(said ? said
      : status === 503 ? "Redis is unreachable. The figures below are stale; retrying…"
      : status === 403 ? "You are not allowed to do that."
      : status === 404 ? "Not found: it may have been deleted meanwhile."
      : "The request failed (HTTP " + status + ").");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) { banner(null); }
  });
  document.addEventListener("htmx:load", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.querySelectorAll) { elt.querySelectorAll("form[data-qc-task-form]").forEach(updateSelection); }
  });

  setPaused(stored());
  document.addEventListener("DOMContentLoaded", function () {
    setPaused(stored());
    document.querySelectorAll("form[data-qc-task-form]").forEach(updateSelection);
  });
})();
