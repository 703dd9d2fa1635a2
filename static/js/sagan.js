// Sagan's small page script: no framework, no inline handlers (the CSP forbids them).
(function () {
  "use strict";

  // --- Polling: hold back, don't lose -------------------------------------------------
  // Elements marked `data-poll` refresh themselves with a GET (the board every few
  // seconds). A poll is held back while the tab is hidden (SPEC §9.3), and while a card's
  // "Move to…" menu is open, because the refreshed board would close the menu under the
  // owner's thumb and drop the note being typed. A held-back poll runs once as soon as
  // the reason is gone. Polls are recognised by the element, not the trigger: htmx 2
  // passes the element itself, not an event, as the trigger of `every` polls.
  var heldPolls = new Map();

  // The experiment page's poll (data-poll-page) replaces panels that hold forms, so it
  // also waits while the owner is typing in one, has changed a form without sending it,
  // or has an editor open (the clean result, a pasted plan, an override, a record edit).
  var EDITING = "details.move[open], details.edit[open], details.paste-plan[open], details.override[open], form[data-dirty]";

  function pollMustWait(elt) {
    if (document.hidden || !!elt.querySelector("details.move[open]")) { return true; }
    if (!elt.hasAttribute("data-poll-page")) { return false; }
    var active = document.activeElement;
    var typing = active && elt.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
    return typing || !!elt.querySelector(EDITING);
  }

  document.addEventListener("input", function (event) {
    var form = event.target.form;
    if (form && form.closest("[data-poll-page]")) { form.setAttribute("data-dirty", ""); }
  });

  document.addEventListener("htmx:confirm", function (event) {
    var elt = event.detail.elt;
    if (event.detail.verb !== "get" || !elt.hasAttribute("data-poll") || !pollMustWait(elt)) { return; }
    event.preventDefault();
    heldPolls.set(elt, event.detail.issueRequest);
  });

  function releasePolls() {
    heldPolls.forEach(function (issueRequest, elt) {
      if (!document.body.contains(elt)) { heldPolls.delete(elt); return; }
      if (pollMustWait(elt)) { return; }
      heldPolls.delete(elt);
      issueRequest(true);  // true: skip htmx:confirm, we just decided
    });
  }
  document.addEventListener("visibilitychange", releasePolls);
  // Leaving a field lets a held poll run (a tick later: focus may just be moving to the
  // next field of the same form).
  document.addEventListener("focusout", function () { setTimeout(releasePolls, 0); });
  // `toggle` does not bubble; listening in the capture phase sees every <details>.
  document.addEventListener("toggle", function (event) {
    if (!event.target.open) { releasePolls(); }
  }, true);

  // --- Folded sections: deep links, and the owner's choice kept across a refresh ------
  // The experiment page folds its sections into <details data-fold>. A link to anything
  // inside one (#plan, #pods, #fold-runs) opens it; a section the owner opened or closed
  // stays so when the live poll brings the panels afresh.
  var foldChoice = {};

  function openTarget() {
    if (!location.hash) { return; }
    var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (!target) { return; }
    for (var node = target; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") { node.open = true; }
    }
    target.scrollIntoView();
  }
  document.addEventListener("DOMContentLoaded", openTarget);
  window.addEventListener("hashchange", openTarget);

  // Recorded from the click on the summary (keyboard activation clicks too), not from
  // `toggle`, which also fires for sections the server rendered open.
  document.addEventListener("click", function (event) {
    var summary = event.target.closest && event.target.closest("details[data-fold] > summary");
    if (summary && summary.parentElement.id) { foldChoice[summary.parentElement.id] = !summary.parentElement.open; }
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var root = event.detail.elt;
    if (!root || !root.querySelectorAll) { return; }
    root.querySelectorAll("details[data-fold]").forEach(function (fold) {
      if (Object.prototype.hasOwnProperty.call(foldChoice, fold.id)) { fold.open = foldChoice[fold.id]; }
    });
  });

  // --- Failed requests: say so --------------------------------------------------------
  // htmx swaps no 4xx/5xx answer, so a refused or failed click would otherwise look like
  // nothing happened. The server puts its sentence in X-Sagan-Message (percent-encoded)
  // and its code in X-Sagan-Error (blueprints/errors.py); JSON bodies are read as a
  // fallback. One toast per distinct message; a network toast clears itself once a
  // request gets through again.
  var RELOAD_CODES = { csrf_failed: true, unauthorized: true, conflict: true };
  var FALLBACK = {
    403: "You are not allowed to do that.",
    404: "That no longer exists; it may have been deleted or renumbered.",
    409: "Someone changed this first. Reload to see the current state.",
    413: "That request is too large.",
    429: "Too many requests. Wait a moment and try again."
  };
  var NETWORK_MESSAGE = "Sagan could not be reached. Check your connection; the page keeps trying.";

  function messageFrom(xhr) {
    var header = xhr.getResponseHeader("X-Sagan-Message");
    if (header) {
      try { return decodeURIComponent(header); } catch (e) { return header; }
    }
    if ((xhr.getResponseHeader("Content-Type") || "").indexOf("json") !== -1) {
      try {
        var body = JSON.parse(xhr.responseText);
        if (body && typeof body.message === "string") { return body.message; }
      } catch (e) { /* not JSON after all */ }
    }
    if (FALLBACK[xhr.status]) { return FALLBACK[xhr.status]; }
    if (xhr.status >= 500) { return "Sagan had a problem answering (HTTP " + xhr.status + "). Try again in a moment."; }
    return "That did not work (HTTP " + xhr.status + ").";
  }

  function codeFrom(xhr) {
    return xhr.getResponseHeader("X-Sagan-Error") ||
      { 401: "unauthorized", 409: "conflict" }[xhr.status] || "error";
  }

  function showToast(message, options) {
    var region = document.getElementById("toasts");
    if (!region) { return null; }
    var existing = Array.prototype.find.call(region.children, function (t) { return t.dataset.message === message; });
    if (existing) { return existing; }
    var toast = document.createElement("div");
    toast.className = "toast toast-error";
    toast.dataset.message = message;
    if (options.kind) { toast.dataset.kind = options.kind; }
    var text = document.createElement("p");
    text.className = "toast-message";
    text.textContent = message;  // never HTML: the message may echo user input
    toast.appendChild(text);
    var actions = document.createElement("div");
    actions.className = "toast-actions";
    if (options.reload) {
      var reload = document.createElement("button");
      reload.type = "button";
      reload.className = "primary";
      reload.dataset.toastReload = "";
      reload.textContent = "Reload";
      actions.appendChild(reload);
    }
    var dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.dataset.toastDismiss = "";
    dismiss.textContent = "Dismiss";
    actions.appendChild(dismiss);
    toast.appendChild(actions);
    region.appendChild(toast);
    return toast;
  }

  // An autosave (data-show-refusal) shows its refusal beside its field rather than as a
  // toast: the server answers the sentence with the error's status, and it is swapped in.
  // (detail.elt is the swap's target here; the element that asked is requestConfig.elt.)
  document.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    var source = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (status >= 400 && status < 500 && source && source.hasAttribute("data-show-refusal")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    showToast(messageFrom(xhr), { reload: !!RELOAD_CODES[codeFrom(xhr)] });
  });
  document.addEventListener("htmx:sendError", function () {
    showToast(NETWORK_MESSAGE, { kind: "network" });
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (!event.detail.successful) { return; }
    document.querySelectorAll("#toasts [data-kind=network]").forEach(function (t) { t.remove(); });
  });

  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-toast-reload]")) { window.location.reload(); return; }
    var dismiss = event.target.closest("[data-toast-dismiss]");
    if (dismiss) { dismiss.closest(".toast").remove(); }
  });

  // --- Small behaviours behind data attributes ----------------------------------------
  // Confirm before destructive actions: <form data-confirm="…">.
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) { event.preventDefault(); event.stopImmediatePropagation(); }
  }, true);

  document.addEventListener("change", function (event) {
    if (event.target.matches("select[data-autosubmit]")) { event.target.form.submit(); }
  });
  document.addEventListener("focusin", function (event) {
    if (event.target.matches("[data-select-all]")) { event.target.select(); }
  });

  // The plan template: <button data-use-template="id"> puts that element's text in the form's
  // plan box — asking first when the box already holds something, which it would replace.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-use-template]");
    if (!button) { return; }
    var source = document.getElementById(button.dataset.useTemplate);
    var box = button.closest(".paste-plan") && button.closest(".paste-plan").querySelector("[data-plan-box]");
    if (!source || !box) { return; }
    if (box.value.trim() && !window.confirm("Replace what is in the plan box with the template?")) { return; }
    box.value = source.textContent;
    box.focus();
    box.setSelectionRange(0, 0);
  });

  // Copy buttons: <button data-copy="#field">. The Clipboard API needs a secure context
  // (HTTPS or localhost); elsewhere the text is selected for a manual copy.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) { return; }
    var field = document.querySelector(button.dataset.copy);
    var status = document.getElementById("copy-status");
    if (!field) { return; }
    function say(text) { if (status) { status.textContent = text; } }
    field.focus();
    field.select();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(function () { say("Copied to the clipboard."); },
        function () { say("Selected: press Ctrl+C (⌘C) to copy."); });
    } else {
      say("Selected: press Ctrl+C (⌘C) to copy.");
    }
  });

  // Light / dark theme: follows the system until the owner picks one (static/js/theme.js
  // applies the choice before the first paint).
  document.addEventListener("click", function (event) {
    if (!event.target.closest("[data-theme-toggle]")) { return; }
    var root = document.documentElement;
    var dark = root.dataset.theme
      ? root.dataset.theme === "dark"
      : window.matchMedia("(prefers-color-scheme: dark)").matches;
    var next = dark ? "light" : "dark";
    root.dataset.theme = next;
    try { localStorage.setItem("sagan-theme", next); } catch (e) { /* not persisted */ }
  });

  // --- Drag and drop on the board (desktop) -------------------------------------------
  // Dropping a card on a column submits the card's own "Move to…" form with the first
  // allowed status of that column; the server decides.
  var dragged = null;
  document.addEventListener("dragstart", function (event) {
    var card = event.target.closest && event.target.closest(".card[draggable]");
    if (!card) { return; }
    dragged = card;
    card.classList.add("dragging");
    event.dataTransfer.effectAllowed = "move";
    event.dataTransfer.setData("text/plain", card.dataset.number);
  });
  document.addEventListener("dragend", function () {
    if (dragged) { dragged.classList.remove("dragging"); }
    dragged = null;
    document.querySelectorAll(".column.drop-ok").forEach(function (c) { c.classList.remove("drop-ok"); });
  });
  document.addEventListener("dragover", function (event) {
    var column = event.target.closest && event.target.closest(".column");
    if (!column || !dragged) { return; }
    event.preventDefault();
    column.classList.add("drop-ok");
  });
  document.addEventListener("dragleave", function (event) {
    var column = event.target.closest && event.target.closest(".column");
    if (column && !column.contains(event.relatedTarget)) { column.classList.remove("drop-ok"); }
  });
  document.addEventListener("drop", function (event) {
    var column = event.target.closest && event.target.closest(".column");
    if (!column || !dragged) { return; }
    event.preventDefault();
    var card = dragged;
    var target = column.dataset.column;
    if (target === card.closest(".column").dataset.column) { return; }
    var moves = (card.dataset.moves || "").split(",").filter(Boolean).map(function (m) {
      var parts = m.split(":");
      return { to: parts[0], note: parts[1] === "1", column: parts[2] };
    });
    var move = moves.find(function (m) { return m.column === target; });
    var details = card.querySelector("details.move");
    var form = card.querySelector("form.move-form");
    if (!form) { return; }
    var select = form.querySelector("select[name=to]");
    if (!move) {
      // Ask the server anyway with the column's status so the refusal is explained on the card.
      var option = document.createElement("option");
      option.value = column.dataset.firstStatus || target;
      option.textContent = option.value.replace(/_/g, " ");
      select.appendChild(option);
      select.value = option.value;
      htmx.trigger(form, "submit");
      return;
    }
    select.value = move.to;
    if (move.note) {
      // Moves that need a reason open the card's form instead of guessing one.
      details.open = true;
      form.querySelector("input[name=note]").focus();
      return;
    }
    htmx.trigger(form, "submit");
  });
})();

// --- Local times -----------------------------------------------------------------------
// Run events carry <time datetime="…UTC…" data-local>, rendered as UTC by the server (it
// does not know the owner's zone); here they switch to the browser's clock, on the first
// render and on every row a poll appends (htmx:load fires for each new element).
(function () {
  "use strict";
  function localTimes(root) {
    if (!root || !root.querySelectorAll) { return; }
    var today = new Date().toDateString();
    var found = Array.prototype.slice.call(root.querySelectorAll("time[data-local]"));
    if (root.matches && root.matches("time[data-local]")) { found.push(root); }
    found.forEach(function (node) {
      var when = new Date(node.getAttribute("datetime"));
      if (isNaN(when.getTime())) { return; }
      var clock = when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
      node.textContent = when.toDateString() === today
        ? clock : when.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + clock;
      node.title = when.toLocaleString();
      node.removeAttribute("data-local");
    });
  }
  document.addEventListener("htmx:load", function (event) { localTimes(event.detail.elt); });
  document.addEventListener("DOMContentLoaded", function () { localTimes(document); });
})();
