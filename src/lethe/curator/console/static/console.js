// lethe console: the only script. Reloads a request page while the request is pending (every 2 s), so that its
// certificate appears without a manual refresh. The page works the same without it ("Refresh" link). On the
// Verify page, reads a chosen certificate file into the text area (nothing leaves the browser until "Verify").
(function () {
  "use strict";
  var file = document.getElementById("cert-file");
  var text = document.getElementById("cert-text");
  if (file && text && window.FileReader) {
    file.addEventListener("change", function () {
      if (!file.files || !file.files[0]) { return; }
      var reader = new FileReader();
      reader.onload = function () { text.value = String(reader.result); };
      reader.readAsText(file.files[0]);
    });
  }
  var el = document.querySelector("[data-refresh]");
  if (!el) { return; }
  var seconds = Math.max(1, parseInt(el.getAttribute("data-refresh"), 10) || 2);
  window.setTimeout(function () { window.location.reload(); }, seconds * 1000);
}());
