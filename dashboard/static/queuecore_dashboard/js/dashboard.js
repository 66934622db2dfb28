/* queuecore dashboard: live refresh, task selection, confirmations, busy buttons, messages, offline banner.
   Everything works without this file (forms post and redirect); it only makes things nicer.

   It runs under a strict Content-Security-Policy (default-src 'self', no unsafe-eval, no unsafe-inline):
   no eval, no inline handler, no inline style. htmx is configured with allowEval = false (the
   htmx-config meta tag of layout.html), so polling is driven from here: every element with
   data-qc-poll="<seconds>" gets a "qc:poll" event that often (its hx-trigger listens for it) while the
   tab is visible, live refresh is on and the element holds nothing the operator is choosing. */
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

  // A panel where the operator ticks tasks, types a filter or chooses how long to pause a queue is
  // not refreshed under them (an action, or resuming live refresh, still refreshes it).
  function holds(el) {
    if (el.querySelector("input[data-qc-select]:checked, input[data-qc-select-all]:checked")) { return true; }
    if (el.querySelector('select[name="for"]:focus, input[type=search]:focus, input[type=text]:focus')) { return true; }
    return Array.prototype.some.call(el.querySelectorAll('select[name="for"]'), function (s) { return s.value !== ""; });
  }
  window.qcHasSelection = holds;  // kept for host scripts written against earlier versions

  // -- polling -----------------------------------------------------------------------------------
  var due = typeof WeakMap === "function" ? new WeakMap() : null;

  function tick() {
    window.qcPollTicks = (window.qcPollTicks || 0) + 1;  // observable: tests count ticks, not seconds
    if (!window.htmx || !due) { return; }
    var now = Date.now();
    document.querySelectorAll("[data-qc-poll]").forEach(function (el) {
      // the operator's chosen interval (shortcuts.js) wins over the page's
      var every = Math.max(0.5, window.qcPollOverride || parseFloat(el.getAttribute("data-qc-poll")) || 3) * 1000;
      var next = due.get(el);
      if (next === undefined) { due.set(el, now + every); return; }
      if (now < next) { return; }
      due.set(el, now + every);
      if (window.qcPaused || document.visibilityState !== "visible" || holds(el)) { return; }
      window.htmx.trigger(el, "qc:poll");
    });
  }

  function triggerType(detail) {
    var trigger = detail && (detail.triggeringEvent || (detail.requestConfig && detail.requestConfig.triggeringEvent));
    return trigger ? trigger.type : "";
  }
  function isPoll(detail) { return triggerType(detail) === "qc:poll"; }
  // A refresh the page asked for by itself: a poll, or every panel at once (live refresh resumed, an
  // action or a bulk job done).
  function isRefresh(detail) { var type = triggerType(detail); return type === "qc:poll" || type === "qc:refresh"; }

  // A refresh says which version of the fragment it shows (data-qc-hash, set by the server): an
  // unchanged fragment comes back as 204 No Content, which htmx leaves in place.
  document.addEventListener("htmx:configRequest", function (event) {
    if (!isRefresh(event.detail)) { return; }
    // whether the operator was already choosing in it when it was sent (beforeSwap compares)
    event.detail.qcHeldWhenSent = holds(event.detail.elt);
    if (!isPoll(event.detail)) { return; }
    event.detail.headers["X-QC-Refresh"] = "1";
    var hash = event.detail.elt.getAttribute("data-qc-hash");
    if (hash) { event.detail.headers["X-QC-Have"] = hash; }
  });

  // A refresh only replaces the very fragment that asked for it: if the operator has since moved
  // (a filter, another page of the list), the stale answer is dropped; so is one that was on its way
  // when the operator began choosing in it (a row ticked meanwhile), whether it was a poll or a refresh
  // of every panel. (One sent while the operator was choosing, after an action, still replaces it.)
  document.addEventListener("htmx:beforeSwap", function (event) {
    var config = event.detail.requestConfig;
    if (!isRefresh(config)) { return; }
    var elt = config.elt;
    if (!elt || !document.body.contains(elt) || elt.getAttribute("hx-get") !== config.path ||
        (holds(elt) && !config.qcHeldWhenSent)) {
      event.detail.shouldSwap = false;
    }
  });

  // -- selection ---------------------------------------------------------------------------------
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
      label.textContent = allOn ? (all.getAttribute("data-qc-all-label") || "All selected")
        : checked ? checked + " selected" : "None selected";
    }
    if (form.getAttribute("aria-busy") === "true") { return; }
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
    if (dismiss) { dismiss.closest(".qc-message, .qc-bulk-job").remove(); return; }
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

  // -- confirmations -----------------------------------------------------------------------------
  // The server writes the questions (with the queue, the state and, for "all", the count it will act
  // on) into data attributes: data-confirm (a fixed question), or data-qc-confirm-all and
  // data-qc-confirm-some ("{n}" stands for the number of ticked tasks) on bulk buttons.
  function confirmText(button, form) {
    if (!button) { return null; }
    var all = form && form.querySelector("input[data-qc-select-all]");
    if (all && all.checked && button.hasAttribute("data-qc-confirm-all")) {
      return button.getAttribute("data-qc-confirm-all");
    }
    if (button.hasAttribute("data-qc-confirm-some")) {
      var n = form ? form.querySelectorAll("input[data-qc-select]:checked").length : 1;
      return button.getAttribute("data-qc-confirm-some").replace("{n}", String(n))
        .replace("task(s)", n === 1 ? "task" : "tasks");
    }
    return button.getAttribute("data-confirm");
  }

  document.addEventListener("htmx:confirm", function (event) {
    var trigger = event.detail.triggeringEvent;
    var button = trigger && trigger.submitter;
    var text = confirmText(button, event.detail.elt.closest("form") || event.detail.elt);
    if (!text) { return; }
    event.preventDefault();
    if (window.confirm(text)) { event.detail.issueRequest(true); }
  });

  // Without htmx (it failed to load), still ask before a plain form post.
  document.addEventListener("submit", function (event) {
    if (window.htmx) { return; }
    var text = confirmText(event.submitter, event.target);
    if (text && !window.confirm(text)) { event.preventDefault(); }
  });

  // -- busy state --------------------------------------------------------------------------------
  // While an action runs, its form says so and its buttons cannot be clicked again.
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (isPoll(event.detail.requestConfig)) { return; }
    var elt = event.detail.elt;
    var config = event.detail.requestConfig;
    if (!elt || !config || config.verb !== "post") { return; }
    var buttons = elt.tagName === "FORM" ? elt.querySelectorAll("button, input[type=submit]")
      : elt.tagName === "BUTTON" ? [elt] : [];  // a row's button acting through a shared form (form=)
    if (!buttons.length) { return; }
    elt.setAttribute("aria-busy", "true");
    var submitter = config.triggeringEvent && config.triggeringEvent.submitter;
    (submitter || (elt.tagName === "BUTTON" ? elt : null) || { classList: { add: function () {} } }).classList.add("qc-busy");
    Array.prototype.forEach.call(buttons, function (button) {
      if (!button.disabled) { button.disabled = true; button.setAttribute("data-qc-was-enabled", ""); }
    });
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var elt = event.detail.elt;
    if (!elt || elt.getAttribute("aria-busy") !== "true") { return; }
    elt.removeAttribute("aria-busy");
    var buttons = elt.tagName === "BUTTON" ? [elt] : elt.querySelectorAll("[data-qc-was-enabled]");
    Array.prototype.forEach.call(buttons, function (button) {
      if (button.hasAttribute("data-qc-was-enabled")) { button.disabled = false; }
      button.removeAttribute("data-qc-was-enabled");
      button.classList.remove("qc-busy");
    });
    updateSelection(elt.matches("form[data-qc-task-form]") ? elt : null);
  });

  // -- messages ----------------------------------------------------------------------------------
  // A new message replaces the older ones about the same subject (a queue, a task, a list), so that
  // "paused" and "resumed" never stand side by side.
  function dedupeMessages() {
    var seen = {};
    document.querySelectorAll("#qc-messages .qc-message[data-qc-subject]").forEach(function (message) {
      var subject = message.getAttribute("data-qc-subject");
      if (!subject) { return; }
      if (seen[subject]) { message.remove(); } else { seen[subject] = true; }
    });
  }

  // -- tabs --------------------------------------------------------------------------------------
  // On a narrow screen the tab strip scrolls sideways: keep the selected tab in view.
  function revealCurrentTabs(root) {
    (root || document).querySelectorAll(".qc-tabs, .qc-nav").forEach(function (strip) {
      var current = strip.querySelector("[aria-current=page]");
      if (!current || strip.scrollWidth <= strip.clientWidth) { return; }
      var left = current.offsetLeft - strip.offsetLeft;
      var right = left + current.offsetWidth;
      if (left < strip.scrollLeft || right > strip.scrollLeft + strip.clientWidth) {
        strip.scrollLeft = Math.max(0, left - (strip.clientWidth - current.offsetWidth) / 2);
      }
    });
  }

  // -- offline banner ----------------------------------------------------------------------------
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
    if (elt && elt.querySelectorAll) {
      elt.querySelectorAll("form[data-qc-task-form]").forEach(updateSelection);
      revealCurrentTabs(elt.parentNode || document);
    }
    dedupeMessages();
  });
  document.addEventListener("htmx:oobAfterSwap", dedupeMessages);

  setPaused(stored());
  function ready() {
    setPaused(stored());
    document.querySelectorAll("form[data-qc-task-form]").forEach(updateSelection);
    revealCurrentTabs(document);
    dedupeMessages();
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", ready); } else { ready(); }
  window.setInterval(tick, 250);
})();
