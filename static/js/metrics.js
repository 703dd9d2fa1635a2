// Metric charts: each `[data-metric-chart]` figure lists its data sources (the chart data
// route of one or more experiments, services/metrics.py::chart_data) and is drawn with uPlot
// (static/vendor). One line per run (pod) — seeds overlaid —, the min–max band of each
// downsampled bucket behind it, exponential smoothing chosen per panel, values on hover in
// the legend, axes labelled with the step and the metric's unit. Charts follow the theme
// and the width of their box, and re-check for new points every `data-refresh` seconds
// (a 304 when nothing arrived) while the tab is visible. Points a run posted as NaN or
// ±Infinity (a diverged loss; `non_finite` per bucket) have no value to draw: each is
// marked with a × in the run's colour along the top edge, and counted under the chart.
(function () {
  "use strict";
  var LIGHT = ["#3552c8", "#d9480f", "#2b8a3e", "#ae3ec9", "#0c8599", "#e67700", "#c2255c", "#5c940d"];
  var DARK = ["#8ea3ff", "#ff922b", "#69db7c", "#e599f7", "#66d9e8", "#ffd43b", "#faa2c1", "#a9e34b"];
  var charts = [];

  function cssVar(name, fallback) {
    var value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return value || fallback;
  }

  function isDark() {
    var theme = document.documentElement.dataset.theme;
    if (theme === "dark" || theme === "light") { return theme === "dark"; }
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  }

  function withAlpha(hex, alpha) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16 & 255) + "," + (n >> 8 & 255) + "," + (n & 255) + "," + alpha + ")";
  }

  function format(value, unit) {
    if (value === null || value === undefined || isNaN(value)) { return "—"; }
    var abs = Math.abs(value);
    var text = abs !== 0 && (abs < 1e-3 || abs >= 1e6) ? value.toExponential(3)
      : abs >= 1e4 ? Math.round(value).toLocaleString() : String(Number(value.toPrecision(4)));
    return unit ? text + " " + unit : text;
  }

  // Tick labels with as many decimals as the tick spacing needs (a learning rate's 0.0003,
  // a loss's 1.5, a step count's 15,000), exponents only for the very small or large.
  function ticks(u, splits, axisIndex, space, increment) {
    var decimals = Math.max(0, -Math.floor(Math.log10(increment || 1)));
    return splits.map(function (v) {
      if (v === 0) { return "0"; }
      if (decimals > 6 || Math.abs(v) >= 1e7) { return v.toExponential(1); }
      return decimals ? v.toFixed(decimals) : Math.round(v).toLocaleString();
    });
  }

  // Debiased exponential moving average (as TensorBoard smooths): the first points are not
  // pulled towards zero. x gaps do not matter: smoothing is over the points in order.
  function smooth(ys, weight) {
    if (!weight) { return ys; }
    var out = new Array(ys.length), last = 0, count = 0;
    for (var i = 0; i < ys.length; i++) {
      if (ys[i] === null) { out[i] = null; continue; }
      last = last * weight + (1 - weight) * ys[i];
      count++;
      out[i] = last / (1 - Math.pow(weight, count));
    }
    return out;
  }

  function smoothingOf(figure) {
    var panel = figure.closest(".metrics");
    var select = panel && panel.querySelector("[data-metric-smoothing]");
    return select ? parseFloat(select.value) || 0 : 0;
  }

  function draw(chart) {
    var figure = chart.figure, box = figure.querySelector("[data-metric-plot]");
    var unit = figure.dataset.unit || "", label = figure.dataset.label || "value";
    var weight = smoothingOf(figure), palette = isDark() ? DARK : LIGHT;
    var text = cssVar("--muted", "#59626f"), grid = cssVar("--border", "#d6dae1");
    var tables = [], series = [{ label: "step", value: function (u, v) { return v === null ? "—" : format(v); } }];
    var bands = [], hidden = [], column = 1, marks = [], nonFinite = 0;
    chart.series.forEach(function (line, i) {
      var colour = palette[i % palette.length];
      (line.non_finite || []).forEach(function (count, j) {
        if (count > 0) { marks.push({ x: line.x[j], colour: colour }); nonFinite += count; }
      });
      var show = { label: line.label, stroke: colour, width: 1.75, spanGaps: true, points: { show: line.x.length < 60 },
                   value: function (u, v) { return format(v, unit); } };
      if (line.downsampled) {
        // The bucket's range as a faint band, then the mean line (smoothed) on top.
        tables.push([line.x, line.max, line.min, smooth(line.y, weight)]);
        series.push({ label: line.label + " max", stroke: "transparent", spanGaps: true, points: { show: false } });
        series.push({ label: line.label + " min", stroke: "transparent", spanGaps: true, points: { show: false } });
        bands.push({ series: [column, column + 1], fill: withAlpha(colour, 0.16) });
        hidden.push(column, column + 1);
        column += 2;
      } else if (weight) {
        tables.push([line.x, line.y, smooth(line.y, weight)]);
        series.push({ label: line.label + " raw", stroke: withAlpha(colour, 0.28), width: 1, spanGaps: true,
                      points: { show: false } });
        hidden.push(column);
        column += 1;
      } else {
        tables.push([line.x, line.y]);
      }
      series.push(show);
      column += 1;
    });
    if (!tables.length) { box.textContent = "No points for this metric yet."; return; }
    var data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    var width = Math.max(240, box.clientWidth || figure.clientWidth || 320);
    var axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 },
                 font: "11px system-ui, sans-serif", labelFont: "12px system-ui, sans-serif" };
    var options = {
      width: width, height: width < 420 ? 200 : 240, series: series, bands: bands,
      scales: { x: { time: false } },
      axes: [Object.assign({ label: "step" }, axis),
             Object.assign({ label: unit ? label + " [" + unit + "]" : label, size: 60, space: 24, values: ticks }, axis)],
      legend: { live: true },
      cursor: { sync: { key: chart.syncKey }, points: { size: 6 } },
      hooks: { draw: marks.length ? [function (u) { markNonFinite(u, marks); }] : [] }
    };
    if (chart.plot) { chart.plot.destroy(); }
    box.textContent = "";
    chart.plot = new uPlot(options, data, box);
    noteNonFinite(figure, nonFinite);
    // The band edges and the raw lines behind smoothing are drawing aids: keep them out of the legend.
    var rows = chart.plot.root.querySelectorAll(".u-legend .u-series");
    hidden.forEach(function (index) { if (rows[index]) { rows[index].classList.add("metric-aid"); } });
    chart.width = width;
  }

  // A × per non-finite bucket, in its run's colour, along the top of the plot area.
  function markNonFinite(u, marks) {
    var ctx = u.ctx, ratio = window.devicePixelRatio || 1, size = 4 * ratio;
    var top = u.bbox.top + size + 2 * ratio, left = u.bbox.left, right = u.bbox.left + u.bbox.width;
    ctx.save();
    ctx.lineWidth = 1.5 * ratio;
    marks.forEach(function (mark) {
      var x = u.valToPos(mark.x, "x", true);
      if (!(x >= left && x <= right)) { return; }
      ctx.strokeStyle = mark.colour;
      ctx.beginPath();
      ctx.moveTo(x - size, top - size); ctx.lineTo(x + size, top + size);
      ctx.moveTo(x + size, top - size); ctx.lineTo(x - size, top + size);
      ctx.stroke();
    });
    ctx.restore();
  }

  function noteNonFinite(figure, count) {
    var note = figure.querySelector(".metric-non-finite");
    if (!count) { if (note) { note.remove(); } return; }
    if (!note) {
      note = document.createElement("p");
      note.className = "muted metric-non-finite";
      figure.appendChild(note);
    }
    note.textContent = "× " + count.toLocaleString() + " value" + (count === 1 ? "" : "s") +
      " not finite (NaN or ±∞), not drawn";
  }

  function load(chart) {
    var sources = chart.sources;
    return Promise.all(sources.map(function (source, i) {
      var headers = chart.etags[i] ? { "If-None-Match": chart.etags[i] } : {};
      return fetch(source.url, { credentials: "same-origin", headers: headers }).then(function (answer) {
        if (answer.status === 304) { return chart.parts[i]; }
        if (!answer.ok) { throw new Error("The chart data answered " + answer.status + "."); }
        chart.etags[i] = answer.headers.get("ETag");
        return answer.json().then(function (body) {
          return body.series.map(function (line) {
            return Object.assign({}, line, { label: (source.prefix || "") + line.label });
          });
        });
      });
    })).then(function (parts) {
      var changed = parts.some(function (part, i) { return part !== chart.parts[i]; });
      chart.parts = parts;
      chart.series = [].concat.apply([], parts);
      if (changed || !chart.plot) { draw(chart); }
    }).catch(function (error) {
      if (!chart.plot) { chart.figure.querySelector("[data-metric-plot]").textContent = error.message; }
    });
  }

  function start(figure) {
    if (figure.dataset.metricReady) { return; }
    figure.dataset.metricReady = "1";
    var sources;
    try { sources = JSON.parse(figure.dataset.metricSources || "[]"); } catch (e) { sources = []; }
    var chart = { figure: figure, sources: sources, etags: [], parts: [], series: [], plot: null,
                  syncKey: figure.closest(".metrics") ? "metrics" : "metric-" + charts.length };
    charts.push(chart);
    load(chart);
    var refresh = parseInt(figure.dataset.refresh || "0", 10);
    if (refresh > 0) {
      chart.timer = setInterval(function () {
        if (!document.body.contains(figure)) { clearInterval(chart.timer); return; }
        if (!document.hidden) { load(chart); }
      }, refresh * 1000);
    }
  }

  function scan(root) {
    if (typeof uPlot === "undefined") { return; }
    (root || document).querySelectorAll("[data-metric-chart]").forEach(start);
  }

  function redrawAll() {
    charts = charts.filter(function (chart) { return document.body.contains(chart.figure); });
    charts.forEach(function (chart) { if (chart.plot) { draw(chart); } });
  }

  document.addEventListener("change", function (event) {
    if (!event.target.matches("[data-metric-smoothing]")) { return; }
    var panel = event.target.closest(".metrics");
    charts.forEach(function (chart) { if (chart.plot && panel.contains(chart.figure)) { draw(chart); } });
  });

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      charts.forEach(function (chart) {
        var box = chart.figure.querySelector("[data-metric-plot]");
        if (chart.plot && box && Math.abs(box.clientWidth - chart.width) > 8) { draw(chart); }
      });
    }, 150);
  });
  // The theme toggle (sagan.js) sets data-theme; the system theme can change too.
  new MutationObserver(redrawAll).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  if (window.matchMedia) { window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redrawAll); }
  // Panels swapped in by htmx polling bring new figures.
  document.addEventListener("htmx:afterSettle", function (event) { scan(event.target); });
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", function () { scan(); }); }
  else { scan(); }
})();
