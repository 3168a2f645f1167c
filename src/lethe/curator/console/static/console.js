// lethe console: the only script. Reloads a request page while the request is pending (every 2 s), so that its
// certificate appears without a manual refresh. The page works the same without it ("Refresh" link).
(function () {
  "use strict";
  var el = document.querySelector("[data-refresh]");
  if (!el) { return; }
  var seconds = Math.max(1, parseInt(el.getAttribute("data-refresh"), 10) || 2);
  window.setTimeout(function () { window.location.reload(); }, seconds * 1000);
}());
