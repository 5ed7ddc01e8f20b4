// Auto-refresh: a region marked data-refresh="N" (with an id) is fetched again every N seconds while the tab is
// visible and replaced by the same region of the fresh page. Server-rendered and escaped; no inline script needed.
(function () {
  "use strict";
  function refresh(id, seconds) {
    window.setInterval(function () {
      if (document.hidden) { return; }
      fetch(window.location.href, { credentials: "same-origin", headers: { "X-Console-Refresh": "1" } })
        .then(function (r) { return r.ok && !r.redirected ? r.text() : null; })
        .then(function (text) {
          if (!text) { return; }
          var fresh = new DOMParser().parseFromString(text, "text/html").getElementById(id);
          var now = document.getElementById(id);
          if (fresh && now) { now.replaceWith(fresh); }
        })
        .catch(function () { /* the next tick tries again */ });
    }, seconds * 1000);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh][id]").forEach(function (el) {
      refresh(el.id, Math.max(2, Number(el.getAttribute("data-refresh")) || 5));
    });
  });
})();
