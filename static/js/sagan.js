// Sagan's small page script: no framework, no inline handlers (the CSP forbids them).
(function () {
  "use strict";

  // Polling pauses in hidden tabs: cancel poll requests while the tab is not visible,
  // and catch up once when it becomes visible again.
  document.addEventListener("htmx:confirm", function (event) {
    var trigger = event.detail.triggerEvent;
    if (document.hidden && trigger && trigger.type === "every") { event.preventDefault(); }
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && window.htmx) { htmx.trigger(document.body, "pipeline-changed"); }
  });

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

  // Light / dark theme: follows the system until the owner picks one.
  var stored = localStorage.getItem("sagan-theme");
  if (stored) { document.documentElement.dataset.theme = stored; }
  document.addEventListener("click", function (event) {
    if (!event.target.closest("[data-theme-toggle]")) { return; }
    var dark = document.documentElement.dataset.theme
      ? document.documentElement.dataset.theme === "dark"
      : window.matchMedia("(prefers-color-scheme: dark)").matches;
    var next = dark ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    localStorage.setItem("sagan-theme", next);
  });

  // Drag and drop on the board (desktop). Dropping a card on a column submits the card's
  // own "Move to…" form with the first allowed status of that column; the server decides.
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
    if (!move || !form) {
      // Ask the server anyway with the column's name so the refusal is explained on the card.
      if (form) {
        form.querySelector("select[name=to]").insertAdjacentHTML("beforeend", "<option></option>");
        var select = form.querySelector("select[name=to]");
        select.lastElementChild.value = column.dataset.firstStatus || target;
        select.value = select.lastElementChild.value;
        htmx.trigger(form, "submit");
      }
      return;
    }
    form.querySelector("select[name=to]").value = move.to;
    if (move.note) {
      // Moves that need a reason open the card's form instead of guessing one.
      details.open = true;
      form.querySelector("input[name=note]").focus();
      return;
    }
    htmx.trigger(form, "submit");
  });
})();
