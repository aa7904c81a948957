// The console's only script: the live tail (server-sent events, pausable).
// Values are set with textContent, never as HTML.
"use strict";
(function () {
  var box = document.getElementById("tail");
  if (!box) return;
  var stream = box.getAttribute("data-stream");
  var status = document.getElementById("tail-status");
  var count = document.getElementById("tail-count");
  var pause = document.getElementById("pause");
  var n = 0, last = "", source = null, paused = false, maxShown = 500;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function show(ev) {
    var row = el("div", "event");
    var meta = el("div", "meta");
    var link = el("a", "pid", ev.persistence_id + " #" + ev.sequence_nr);
    link.href = "/entity?id=" + encodeURIComponent(ev.persistence_id) + "&from=" + ev.sequence_nr;
    meta.appendChild(link);
    meta.appendChild(el("span", "ts", ev.timestamp));
    meta.appendChild(el("span", "ser", ev.payload.kind + (ev.manifest ? " " + ev.manifest : "")));
    meta.appendChild(el("span", "slice", "slice " + ev.slice));
    (ev.tags || []).forEach(function (t) { meta.appendChild(el("span", "tag", t)); });
    row.appendChild(meta);
    row.appendChild(el("pre", "payload", ev.payload.text));
    box.insertBefore(row, box.firstChild);
    while (box.childNodes.length > maxShown) box.removeChild(box.lastChild);
    n++;
    count.textContent = String(n);
  }
  function open() {
    var url = stream;
    if (last) url += "&after=" + encodeURIComponent(last);
    source = new EventSource(url);
    source.addEventListener("start", function (e) {
      var s = JSON.parse(e.data);
      status.textContent = "following " + s.following + " after " + s.after;
      status.setAttribute("data-state", "following");
      pause.disabled = false;
    });
    source.addEventListener("event", function (e) {
      last = e.lastEventId;
      show(JSON.parse(e.data));
    });
    source.addEventListener("failure", function (e) {
      status.textContent = "stopped: " + JSON.parse(e.data).error;
      source.close();
    });
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) status.textContent = "the console closed the stream";
      else status.textContent = "reconnecting…";
    };
  }
  pause.addEventListener("click", function () {
    paused = !paused;
    if (paused) {
      source.close();
      status.textContent = "paused; resuming continues after the last event shown";
      status.setAttribute("data-state", "paused");
      pause.textContent = "Resume";
    } else {
      pause.textContent = "Pause";
      status.textContent = "connecting…";
      open();
    }
  });
  open();
})();
