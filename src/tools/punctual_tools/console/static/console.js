// A page's live part (the Now page's figures, the Tenants page's table): every few seconds, fetch the fragment its
// region names (data-live) and swap it in, without reloading the page. Nothing else on the console needs a script.
"use strict";

(function () {
  const region = document.querySelector("[data-live]");
  if (!region) {
    return;
  }
  const url = region.dataset.live;
  const period = Number(region.dataset.period) || 2000;
  let busy = false;

  async function refresh() {
    if (busy) {
      return;
    }
    busy = true;
    try {
      const answer = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (answer.ok) {
        region.innerHTML = await answer.text();
        region.dataset.updated = String(Date.now());
        delete region.dataset.failed;
      } else {
        region.dataset.failed = String(answer.status); // e.g. 401 once the token changed: the page says so on reload
      }
    } catch (error) {
      region.dataset.failed = "no answer";
    } finally {
      busy = false;
    }
  }

  window.setInterval(refresh, period);
})();
