// Clean results live in sandboxed frames (templates/results/_frame.html); this sizes each
// frame to its content so the page scrolls, not the frame.
//
// Why the page can read the frame: the frame is sandbox="allow-same-origin" WITHOUT
// allow-scripts. A srcdoc frame whose sandbox lacks allow-same-origin gets an opaque
// origin, and its document cannot be read from here — so its height could not be known.
// Granting same-origin is safe only because no script can run inside the frame at all
// (no allow-scripts, a script-src 'none' policy, and the sanitizer removed every script
// and handler): the dangerous pair is allow-scripts + allow-same-origin, which would let
// the frame lift its own sandbox. We only read layout; nothing is written into the frame
// but the page's theme attribute and event listeners that live in this page's script.
(function () {
  "use strict";

  function fit(frame) {
    var doc;
    try { doc = frame.contentDocument; } catch (e) { return; }
    if (!doc || !doc.body) { return; }
    var height = Math.ceil(doc.body.getBoundingClientRect().height);
    if (height > 0) { frame.style.height = height + "px"; }
  }

  // The page's theme, passed on: the frame's stylesheet follows the system's dark mode by
  // itself, and an explicit choice (data-theme on this page) through the same attribute.
  function shareTheme(doc) {
    var theme = document.documentElement.dataset.theme;
    if (theme) { doc.documentElement.dataset.theme = theme; } else { delete doc.documentElement.dataset.theme; }
  }

  // A link to a part of the result (#figure) must not navigate the frame: a srcdoc frame
  // resolves "#figure" against this page's address, and loading that page inside the frame
  // is refused (frame-ancestors 'none'). Scroll this page to the part instead.
  function followFragmentLinks(frame, doc) {
    doc.addEventListener("click", function (event) {
      var link = event.target.closest && event.target.closest("a[href^='#']");
      if (!link) { return; }
      event.preventDefault();
      var id = decodeURIComponent(link.getAttribute("href").slice(1));
      var target = id ? doc.getElementById(id) : doc.body;
      if (!target) { return; }
      for (var node = target; node; node = node.parentElement) {
        if (node.tagName === "DETAILS") { node.open = true; }
      }
      var top = frame.getBoundingClientRect().top + target.getBoundingClientRect().top + window.pageYOffset;
      window.scrollTo({ top: Math.max(0, top - 16), behavior: "smooth" });
    });
  }

  function follow(frame) {
    var doc = frame.contentDocument;
    if (!doc || !doc.body) { return; }
    shareTheme(doc);
    if (!frame.dataset.linksFollowed) { frame.dataset.linksFollowed = "1"; followFragmentLinks(frame, doc); }
    fit(frame);
    // Opening the "Experimental design" block, late images and a narrower window all
    // change the height.
    doc.addEventListener("toggle", function () { fit(frame); }, true);
    Array.prototype.forEach.call(doc.images, function (img) {
      img.addEventListener("load", function () { fit(frame); });
    });
    if (window.ResizeObserver) {
      new ResizeObserver(function () { fit(frame); }).observe(doc.body);
    }
  }

  function watch(frame) {
    if (frame.dataset.frameWatched) { return; }
    frame.dataset.frameWatched = "1";
    frame.addEventListener("load", function () { follow(frame); });
    var doc = frame.contentDocument;
    if (doc && doc.readyState === "complete" && doc.body && doc.body.childNodes.length) { follow(frame); }
  }

  function scan(root) {
    if (!root || !root.querySelectorAll) { return; }
    if (root.matches && root.matches("iframe[data-result-frame]")) { watch(root); }
    Array.prototype.forEach.call(root.querySelectorAll("iframe[data-result-frame]"), watch);
  }

  scan(document);
  // The theme toggle changes data-theme on this page: the frames follow.
  new MutationObserver(function () {
    Array.prototype.forEach.call(document.querySelectorAll("iframe[data-result-frame]"), function (frame) {
      try { if (frame.contentDocument) { shareTheme(frame.contentDocument); } } catch (e) { /* not ours */ }
    });
  }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  document.addEventListener("htmx:load", function (event) { scan(event.detail.elt); });
  window.addEventListener("resize", function () {
    Array.prototype.forEach.call(document.querySelectorAll("iframe[data-result-frame]"), fit);
  });
})();
