/* queuecore dashboard: keyboard shortcuts (? lists them) and the refresh interval the operator chooses
   (remembered in this browser). No eval, no inline handler: it runs under the dashboard's strict CSP.

   Shortcuts, ignored while typing in a field or with Ctrl/Alt/Meta held:
     ?        show or hide this list          /        focus the search box
     l        pause or resume live refresh    [ / ]    previous / next page of a task list
     g then q/s/f/p/r/a   go to Queues, Servers, Failures, Periodic, Redis, Audit log */
(function () {
  "use strict";
  var INTERVAL_KEY = "qc-poll-interval";
  var PAGES = { q: "overview", s: "servers", f: "failures", p: "periodic", r: "redis", a: "audit" };
  var pendingG = 0;

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  function go(name) {
    var link = document.querySelector('[data-qc-nav="' + name + '"]');
    if (link) { link.click(); }
  }

  function toggleHelp() {
    var dialog = document.getElementById("qc-shortcuts");
    if (!dialog || typeof dialog.showModal !== "function") { return; }
    if (dialog.open) { dialog.close(); } else { dialog.showModal(); }
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.altKey || event.metaKey || typing(event.target)) { return; }
    var key = event.key;
    if (pendingG && Date.now() - pendingG < 1500 && PAGES[key]) {
      pendingG = 0;
      event.preventDefault();
      go(PAGES[key]);
      return;
    }
    pendingG = 0;
    if (key === "?") { event.preventDefault(); toggleHelp(); }
    else if (key === "/") {
      var search = document.querySelector('input[type="search"]');
      if (search) { event.preventDefault(); search.focus(); search.select(); }
    } else if (key === "l") {
      var live = document.querySelector("[data-qc-live-toggle]");
      if (live) { event.preventDefault(); live.click(); }
    } else if (key === "[" || key === "]") {
      var page = document.querySelector(key === "]" ? 'a[rel="next"]' : 'a[rel="prev"]');
      if (page) { event.preventDefault(); page.click(); }
    } else if (key === "g") { pendingG = Date.now(); }
  });

  document.addEventListener("click", function (event) {
    var opener = event.target.closest ? event.target.closest("[data-qc-shortcuts-open]") : null;
    if (opener) { event.preventDefault(); toggleHelp(); }
    var closer = event.target.closest ? event.target.closest("[data-qc-shortcuts-close]") : null;
    if (closer) { event.preventDefault(); toggleHelp(); }
  });

  // -- the refresh interval ----------------------------------------------------------------------
  function storedInterval() {
    try { return parseFloat(window.localStorage.getItem(INTERVAL_KEY)) || 0; } catch (e) { return 0; }
  }

  function applyInterval(seconds) {
    window.qcPollOverride = seconds > 0 ? seconds : null;  // dashboard.js polls at this pace when set
    document.querySelectorAll("select[data-qc-interval]").forEach(function (select) {
      select.value = seconds > 0 ? String(seconds) : "";
    });
  }

  document.addEventListener("change", function (event) {
    var select = event.target;
    if (!select.matches || !select.matches("select[data-qc-interval]")) { return; }
    var seconds = parseFloat(select.value) || 0;
    try { window.localStorage.setItem(INTERVAL_KEY, seconds > 0 ? String(seconds) : ""); } catch (e) { /* private mode */ }
    applyInterval(seconds);
  });

  applyInterval(storedInterval());
  document.addEventListener("DOMContentLoaded", function () { applyInterval(storedInterval()); });
})();
