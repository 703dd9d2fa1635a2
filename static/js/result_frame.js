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
// but event listeners that live in this page's script.
(function () {
  "use strict";

  function fit(frame) {
    var doc;
    try { doc = frame.contentDocument; } catch (e) { return; }
    if (!doc || !doc.body) { return; }
    var height = Math.ceil(doc.body.getBoundingClientRect().height);
    if (height > 0) { frame.style.height = height + "px"; }
  }

  function follow(frame) {
    var doc = frame.contentDocument;
    if (!doc || !doc.body) { return; }
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
  document.addEventListener("htmx:load", function (event) { scan(event.detail.elt); });
  window.addEventListener("resize", function () {
    Array.prototype.forEach.call(document.querySelectorAll("iframe[data-result-frame]"), fit);
  });
})();
