// Metric charts: each `[data-metric-chart]` figure lists its data sources (the chart data
// route of one or more experiments, services/dispatch/metrics.py::chart_data) and is drawn with uPlot
// (static/vendor). One line per run (pod) — seeds overlaid —, the min–max band of each
// downsampled bucket behind it, or, with a "Group by" key chosen (a run's configuration:
// seed, condition…), each group's mean with its spread and its runs faint behind, exponential smoothing chosen per panel, values on hover in
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

  function panelOf(figure) { return figure.closest(".metrics"); }

  // The panel's "Group by" choice: a configuration key (seed, condition…), or "" for each run.
  function groupingOf(figure) {
    var panel = panelOf(figure);
    var select = panel && panel.querySelector("[data-metric-group]");
    var spread = panel && panel.querySelector("[data-metric-spread]");
    return { key: select ? select.value : "", spread: spread ? spread.value : "range" };
  }

  function configValue(line, key) {
    var config = line.config || {};
    return Object.prototype.hasOwnProperty.call(config, key) ? config[key] : null;
  }

  // The runs of a chart put in groups by one configuration key, groups in the key's order
  // (numbers as numbers); a run without the key is a group of its own kind, "not set".
  function groupsOf(lines, key) {
    var groups = [], byValue = {};
    lines.forEach(function (line, i) {
      var raw = configValue(line, key), name = raw === null ? "not set" : String(raw);
      if (!Object.prototype.hasOwnProperty.call(byValue, name)) {
        byValue[name] = { name: name, raw: raw, members: [] };
        groups.push(byValue[name]);
      }
      byValue[name].members.push(i);
    });
    return groups.sort(function (a, b) {
      if (a.raw === null || b.raw === null) { return a.raw === null ? 1 : -1; }
      if (typeof a.raw === "number" && typeof b.raw === "number") { return a.raw - b.raw; }
      return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    });
  }

  // A run's values on the joined step grid, the gaps between two of its own points filled
  // by a straight line (runs sampled at different steps still average step by step); no
  // value before its first point or after its last.
  function interpolate(xs, ys) {
    var out = ys.slice(), last = -1;
    for (var i = 0; i < ys.length; i++) {
      if (ys[i] === null || ys[i] === undefined) { out[i] = null; continue; }
      if (last >= 0 && i - last > 1) {
        for (var j = last + 1; j < i; j++) {
          out[j] = ys[last] + (xs[j] - xs[last]) / (xs[i] - xs[last]) * (ys[i] - ys[last]);
        }
      }
      last = i;
    }
    return out;
  }

  // One line per run: the bucket band and the (smoothed) mean line, as before grouping.
  function perRun(chart, weight, palette, unit) {
    var tables = [], series = [], bands = [], hidden = [], column = 1, marks = [], nonFinite = 0;
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
    if (!tables.length) { return null; }
    return { data: tables.length === 1 ? tables[0] : uPlot.join(tables), series: series, bands: bands,
             hidden: hidden, marks: marks, nonFinite: nonFinite };
  }

  // Runs grouped by a configuration key: each group's mean as a line, its spread (min–max,
  // or the mean ± one standard deviation) as a band, and its runs faint behind.
  function grouped(chart, grouping, weight, palette, unit) {
    var lines = chart.series, groups = groupsOf(lines, grouping.key);
    var joined = lines.length === 1 ? [lines[0].x, smooth(lines[0].y, weight)]
      : uPlot.join(lines.map(function (line) { return [line.x, smooth(line.y, weight)]; }));
    var xs = joined[0], runs = lines.map(function (line, i) { return interpolate(xs, joined[i + 1]); });
    var data = [xs], series = [], bands = [], hidden = [], marks = [], nonFinite = 0;
    var fmt = function (u, v) { return format(v, unit); };
    groups.forEach(function (group, g) {
      var colour = palette[g % palette.length], mean = [], low = [], high = [];
      group.members.forEach(function (m) {
        (lines[m].non_finite || []).forEach(function (count, j) {
          if (count > 0) { marks.push({ x: lines[m].x[j], colour: colour }); nonFinite += count; }
        });
        data.push(runs[m]);
        series.push({ label: lines[m].label, stroke: withAlpha(colour, 0.3), width: 1, spanGaps: true,
                      points: { show: false }, value: fmt });
        hidden.push(data.length - 1);
      });
      for (var j = 0; j < xs.length; j++) {
        var values = [];
        group.members.forEach(function (m) { if (runs[m][j] !== null) { values.push(runs[m][j]); } });
        if (!values.length) { mean.push(null); low.push(null); high.push(null); continue; }
        var average = values.reduce(function (a, b) { return a + b; }, 0) / values.length;
        mean.push(average);
        if (grouping.spread === "std") {
          var variance = values.reduce(function (a, b) { return a + (b - average) * (b - average); }, 0) /
            Math.max(1, values.length - 1);
          low.push(average - Math.sqrt(variance)); high.push(average + Math.sqrt(variance));
        } else {
          low.push(Math.min.apply(null, values)); high.push(Math.max.apply(null, values));
        }
      }
      var name = grouping.key + " " + group.name;
      data.push(high, low);
      series.push({ label: name + " high", stroke: "transparent", spanGaps: true, points: { show: false } });
      series.push({ label: name + " low", stroke: "transparent", spanGaps: true, points: { show: false } });
      bands.push({ series: [data.length - 2, data.length - 1], fill: withAlpha(colour, 0.2) });
      hidden.push(data.length - 2, data.length - 1);
      data.push(mean);
      var count = group.members.length;
      series.push({ label: name + " · mean of " + count + " run" + (count === 1 ? "" : "s"), stroke: colour,
                    width: 2.5, spanGaps: true, points: { show: false }, value: fmt });
    });
    return { data: data, series: series, bands: bands, hidden: hidden, marks: marks, nonFinite: nonFinite,
             groups: groups.length };
  }

  function draw(chart) {
    var figure = chart.figure, box = figure.querySelector("[data-metric-plot]");
    var unit = figure.dataset.unit || "", label = figure.dataset.label || "value";
    var weight = smoothingOf(figure), palette = isDark() ? DARK : LIGHT;
    var text = cssVar("--muted", "#59626f"), grid = cssVar("--border", "#d6dae1");
    var grouping = groupingOf(figure);
    var useGroups = grouping.key && chart.series.length > 0;
    var built = useGroups ? grouped(chart, grouping, weight, palette, unit) : perRun(chart, weight, palette, unit);
    if (!built) { box.textContent = "No points for this metric yet."; return; }
    figure.dataset.groups = useGroups ? String(built.groups) : "";
    var series = [{ label: "step", value: function (u, v) { return v === null ? "—" : format(v); } }].concat(built.series);
    var width = Math.max(240, box.clientWidth || figure.clientWidth || 320);
    var axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 },
                 font: "11px system-ui, sans-serif", labelFont: "12px system-ui, sans-serif" };
    var marks = built.marks;
    var options = {
      width: width, height: width < 420 ? 200 : 240, series: series, bands: built.bands,
      scales: { x: { time: false } },
      axes: [Object.assign({ label: "step" }, axis),
             Object.assign({ label: unit ? label + " [" + unit + "]" : label, size: 60, space: 24, values: ticks }, axis)],
      legend: { live: true },
      cursor: { sync: { key: chart.syncKey }, points: { size: 6 } },
      hooks: { draw: marks.length ? [function (u) { markNonFinite(u, marks); }] : [] }
    };
    if (chart.plot) { chart.plot.destroy(); }
    box.textContent = "";
    chart.plot = new uPlot(options, built.data, box);
    noteNonFinite(figure, built.nonFinite);
    // Band edges, raw lines behind smoothing and the runs behind a group's mean are drawing
    // aids: keep them out of the legend.
    var rows = chart.plot.root.querySelectorAll(".u-legend .u-series");
    built.hidden.forEach(function (index) { if (rows[index]) { rows[index].classList.add("metric-aid"); } });
    chart.width = width;
  }

  // The "Group by" choices of a panel: every configuration key its charts' runs carry, the
  // keys whose values differ between runs first. Hidden while no run carries any.
  function offerGroups(panel) {
    var select = panel && panel.querySelector("[data-metric-group]");
    if (!select) { return; }
    var values = {};
    charts.forEach(function (chart) {
      if (!panel.contains(chart.figure)) { return; }
      chart.series.forEach(function (line) {
        Object.keys(line.config || {}).forEach(function (key) {
          (values[key] = values[key] || {})[String(line.config[key])] = true;
        });
      });
    });
    var keys = Object.keys(values).sort(function (a, b) {
      var spread = Object.keys(values[b]).length - Object.keys(values[a]).length;
      return spread || (a < b ? -1 : 1);
    });
    var wanted = select.value || select.dataset.initial || "";
    var offered = Array.prototype.map.call(select.options, function (o) { return o.value; }).slice(1);
    if (offered.join("\n") !== keys.join("\n")) {
      while (select.options.length > 1) { select.remove(1); }
      keys.forEach(function (key) {
        var count = Object.keys(values[key]).length;
        select.add(new Option(key + " (" + count + " value" + (count === 1 ? "" : "s") + ")", key));
      });
    }
    if (wanted && keys.indexOf(wanted) >= 0 && select.value !== wanted) {
      select.value = wanted;
      delete select.dataset.initial;
      panelCharts(panel).forEach(function (chart) { if (chart.plot) { draw(chart); } });
    }
    var box = select.closest("[data-metric-grouping]");
    if (box) { box.hidden = !keys.length; }
  }

  function panelCharts(panel) {
    return charts.filter(function (chart) { return panel.contains(chart.figure); });
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
            // In the compare view a run's experiment is one more key to group by.
            var config = source.prefix ? Object.assign({ experiment: source.prefix.trim() }, line.config || {})
              : line.config;
            return Object.assign({}, line, { label: (source.prefix || "") + line.label, config: config });
          });
        });
      });
    })).then(function (parts) {
      var changed = parts.some(function (part, i) { return part !== chart.parts[i]; });
      chart.parts = parts;
      chart.series = [].concat.apply([], parts);
      if (changed || !chart.plot) { draw(chart); }
      if (changed) { offerGroups(panelOf(chart.figure)); }
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
    if (!event.target.matches("[data-metric-smoothing], [data-metric-group], [data-metric-spread]")) { return; }
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
