// Runs before the first paint (loaded without defer): apply the owner's chosen theme so a
// dark-theme page never flashes light. The toggle itself lives in sagan.js.
(function () {
  "use strict";
  try {
    var theme = localStorage.getItem("sagan-theme");
    if (theme === "light" || theme === "dark") { document.documentElement.dataset.theme = theme; }
  } catch (e) { /* storage disabled: follow the system theme */ }
})();
