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

  function fmt(v, isBytes) {
    if (v == null) return "—";
    return isBytes ? bytes(v) : (Math.round(v * 10) / 10) + " %";
  }

  // For screen readers (and anyone): what the chart shows, as a table beside it.
  function summary(figure, pairs, columns, isBytes) {
    var old = figure.querySelector("table.chart-data");
    if (old) old.remove();
    var table = document.createElement("table");
    table.className = "chart-data sr-only";
    var caption = table.createCaption();
    caption.textContent = figure.querySelector("figcaption").textContent + ": the range's figures";
    var head = table.createTHead().insertRow();
    ["Series", "Newest", "Lowest", "Highest"].forEach(function (name) {
      var th = document.createElement("th");
      th.scope = "col";
      th.textContent = name;
      head.appendChild(th);
    });
    var body = table.createTBody();
    pairs.forEach(function (pair, i) {
      var values = columns[i + 1].filter(function (v) { return v != null; });
      var row = body.insertRow();
      var th = document.createElement("th");
      th.scope = "row";
      th.textContent = pair[1];
      row.appendChild(th);
      [values[values.length - 1], values.length ? Math.min.apply(null, values) : null,
       values.length ? Math.max.apply(null, values) : null].forEach(function (v) {
        row.insertCell().textContent = fmt(v, isBytes);
      });
    });
    figure.appendChild(table);
  }

  // Deployments as dashed lines across the chart, at their time (as Odoo.sh marks its
  // graphs), named in the chart's legend area below.
  function marks(deploys, colour) {
    return {hooks: {draw: [function (u) {
      var ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = colour;
      ctx.setLineDash([4, 4]);
      ctx.lineWidth = 1;
      (deploys || []).forEach(function (d) {
        var x = Math.round(u.valToPos(d.t, "x", true));
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
      });
      ctx.restore();
    }]}};
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
    figure.dataset.deploys = String((data.deploys || []).length);
    summary(figure, pairs, columns, isBytes);
    if (!points) {
      var p = document.createElement("p");
      p.className = "empty";
      p.textContent = "No figures stored for this range yet.";
      figure.appendChild(p);
      return;
    }
    var style = getComputedStyle(document.body);
    var fg = style.color, line = style.getPropertyValue("--line").trim() || "#e5e7eb";
    var width = Math.max(280, Math.min(figure.parentElement.clientWidth - 8, 900));
    figure._plot = new uPlot({
      width: width, height: 200, series: series,
      // The x axis is the range asked for, whatever points are stored in it.
      scales: {x: {time: true, range: function () { return [data.start, data.end]; }}},
      plugins: [marks(data.deploys, fg)],
      axes: [{stroke: fg, grid: {stroke: line}, ticks: {stroke: line}},
             {size: 84, stroke: fg, grid: {stroke: line}, ticks: {stroke: line},
              values: isBytes ? function (u, vals) { return vals.map(bytes); } : undefined}]
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

  // Runtime logs: the source chosen, followed live (asked again every 3 s), its lines
  // filtered by a search and a level as they arrive, downloaded whole.
  function logs() {
    var panel = document.getElementById("runtime-logs");
    if (!panel) return;
    var search = document.querySelector("[data-log-search]");
    var level = document.querySelector("[data-log-level]");
    var follow = document.querySelector("[data-log-follow]");
    var download = document.querySelector("[data-log-download]");
    var sources = document.querySelectorAll("[data-logs]");
    var current = sources.length ? sources[0].dataset.logs : null;
    var timer = null;
    var WANTED = {"": null, warning: ["warning", "error"], error: ["error"]};

    function filter() {
      var text = search.value.toLowerCase();
      var levels = WANTED[level.value];
      var shown = 0;
      panel.querySelectorAll(".line").forEach(function (line) {
        var ok = (!text || line.textContent.toLowerCase().indexOf(text) >= 0) &&
                 (!levels || levels.indexOf(line.dataset.level) >= 0);
        line.hidden = !ok;
        if (ok) shown++;
      });
      panel.dataset.shown = String(shown);
    }

    function ask() {
      if (current) htmx.ajax("GET", current, {target: "#runtime-logs", swap: "innerHTML"});
    }

    sources.forEach(function (b) {
      b.addEventListener("click", function () {
        current = b.dataset.logs;
        download.href = b.dataset.download;
      });
    });
    search.addEventListener("input", filter);
    level.addEventListener("change", filter);
    follow.addEventListener("change", function () {
      if (timer) { clearInterval(timer); timer = null; }
      if (follow.checked) { ask(); timer = setInterval(ask, 3000); }
      panel.dataset.following = String(follow.checked);
    });
    document.body.addEventListener("htmx:afterSwap", function (e) {
      if (e.detail.target !== panel) return;
      filter();
      var pre = panel.querySelector("pre");
      if (pre && follow.checked) pre.scrollTop = pre.scrollHeight;
    });
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
    logs();
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
