// The saved-views menu: "Copy link" copies a view's share link (the link stays selectable in
// its read-only field without script). No inline script anywhere (CSP script-src 'self').
(function () {
  "use strict";

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy-from]");
    if (!button) return;
    var field = document.getElementById(button.getAttribute("data-copy-from"));
    if (!field) return;
    field.select();
    var done = function () { button.textContent = "Copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(done, function () {
        button.textContent = "Select and copy";
      });
    } else {
      button.textContent = "Selected: press Ctrl+C";
    }
  });
})();
