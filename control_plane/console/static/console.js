// The console's own script: charts (uPlot) drawn from the stored metric history,
// and the range buttons above them. Loaded from this origin only (no inline code).
(function () {
  "use strict";

  var BYTES = ["B", "KiB", "MiB", "GiB", "TiB"];  // 1024-based, as every size the console shows

  function bytes(v) {
    if (v == null) return "";
    var i = 0;
    while (Math.abs(v) >= 1024 && i < BYTES.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + " " + BYTES[i];
  }

  function draw(figure, data) {
    var pairs = figure.dataset.series.split(",").map(function (s) { return s.split(":"); });
    var isBytes = figure.dataset.unit === "bytes";
    var columns = [data.t];
    var points = 0;
    var series = [{}];
    pairs.forEach(function (pair, i) {
      var values = data.series[pair[0]] || [];
      points += values.filter(function (v) { return v != null; }).length;
      columns.push(values);
      series.push({label: pair[1], stroke: ["#2563eb", "#d97706", "#059669"][i % 3], width: 2,
                   value: isBytes ? function (u, v) { return bytes(v); } : undefined});
    });
    if (figure._plot) figure._plot.destroy();
    var old = figure.querySelector(".empty");
    if (old) old.remove();
    figure.dataset.points = String(points);
    if (!points) {
      var p = document.createElement("p");
      p.className = "empty";
      p.textContent = "No figures stored for this range yet.";
      figure.appendChild(p);
      return;
    }
    var width = Math.max(280, Math.min(figure.parentElement.clientWidth - 8, 900));
    figure._plot = new uPlot({
      width: width, height: 200, series: series,
      axes: [{}, {size: 70, values: isBytes ? function (u, vals) { return vals.map(bytes); } : undefined}]
    }, columns, figure);
  }

  function load(group, range) {
    var url = group.dataset.src + "?range=" + encodeURIComponent(range);
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (data) {
        group.querySelectorAll("figure.chart").forEach(function (f) { draw(f, data); });
        group.dataset.loaded = range;
      })
      .catch(function () { group.dataset.loaded = "error"; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".charts").forEach(function (group) {
      group.querySelectorAll("[data-range]").forEach(function (button) {
        button.addEventListener("click", function () {
          group.querySelectorAll("[data-range]").forEach(function (b) {
            b.setAttribute("aria-pressed", String(b === button));
          });
          load(group, button.dataset.range);
        });
      });
      load(group, "1h");
    });
    // Copy buttons: the named element's text to the clipboard, said beside the button.
    document.querySelectorAll("[data-copy]").forEach(function (b) {
      b.addEventListener("click", function () {
        var text = document.getElementById(b.dataset.copy).textContent;
        var said = document.querySelector('[data-copied="' + b.dataset.copy + '"]');
        navigator.clipboard.writeText(text).then(
          function () { if (said) said.textContent = "Copied."; },
          function () { if (said) said.textContent = "Select the text and copy it."; });
      });
    });
    document.querySelectorAll("[data-back]").forEach(function (b) {
      b.addEventListener("click", function () { history.back(); });
    });
  });
})();
