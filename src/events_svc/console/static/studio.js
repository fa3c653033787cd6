// Progressive enhancement only: every page works without this file.
// 1. A running import or operation (an element with data-poll) refreshes its progress
//    every 2 s by fetching its own page and swapping that element, until it settles.
// 2. The error summary takes the focus, so a keyboard or screen-reader user lands on it.
(function () {
  "use strict";
  function poll(el) {
    var timer = window.setInterval(function () {
      fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById(el.id);
          if (!fresh) { window.clearInterval(timer); return; }
          el.innerHTML = fresh.innerHTML;
          if (!fresh.hasAttribute("data-poll")) {
            window.clearInterval(timer);
            window.location.reload();
          }
        })
        .catch(function () { window.clearInterval(timer); });
    }, 2000);
  }
  document.addEventListener("DOMContentLoaded", function () {
    var summary = document.getElementById("error-summary");
    if (summary) { summary.focus(); }
    var polled = document.querySelectorAll("[data-poll][id]");
    for (var i = 0; i < polled.length; i++) { poll(polled[i]); }
  });
})();
