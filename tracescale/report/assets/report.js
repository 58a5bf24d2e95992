/* tracescale report charts: inline SVG drawn from the JSON embedded in the page (no network).
   Each chart is drawn at its box's real pixel width, so text stays 11px at any window size and
   margins come from the measured width of the labels: no label is clipped or drawn over another.
   Only what the document holds is drawn; nothing is derived except positions. */
(function () {
  "use strict";
  var COLORS = {compute: "#4e79a7", memcpy: "#76b7b2", communication: "#e15759", dataloader: "#f28e2b",
    sync: "#b07aa1", reduction: "#9c755f", host: "#bab0ac", idle: "#d4d4d4"};
  var EXTRA = ["#59a14f", "#edc948", "#ff9da7", "#8cd17d", "#499894"];
  var LABELS = {compute: "Compute", memcpy: "Memory copies", communication: "Communication",
    dataloader: "Data loading", sync: "Synchronization", reduction: "Reduction", host: "Host overhead", idle: "Idle"};
  var FONT = 11, LINE = 14, H = 300, PAD = 6;
  var measureCtx = null;

  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; }); }
  function num(v) { return (typeof v === "number" && isFinite(v)) ? v : null; }
  function color(c, i) { return COLORS[c] || EXTRA[i % EXTRA.length]; }
  function label(c) { return LABELS[c] || c; }
  function r1(v) { return Math.round(v * 10) / 10; }
  function sig(v, d) { return Number(v.toPrecision(d)).toString(); }
  function ms(s) {
    var a = Math.abs(s);
    if (a >= 1) { return sig(s, 3) + " s"; }
    if (a >= 1e-3) { return (s * 1000).toFixed(1) + " ms"; }
    return a === 0 ? "0 ms" : Math.round(s * 1e6) + " \u00b5s";
  }
  function times(v) { var a = Math.abs(v); return (a < 10 ? v.toFixed(2) : a < 100 ? v.toFixed(1) : Math.round(v).toString()) + "x"; }
  function pct(v) { return (v * 100).toFixed(1) + "%"; }

  /* Width of a label in px at the chart font (canvas metrics; a fair guess without a canvas). */
  function tw(s) {
    if (measureCtx === null) {
      try { measureCtx = document.createElement("canvas").getContext("2d") || false; } catch (e) { measureCtx = false; }
      if (measureCtx) { measureCtx.font = FONT + "px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"; }
    }
    return measureCtx ? measureCtx.measureText(String(s)).width : String(s).length * FONT * 0.62;
  }

  /* Round tick values and a formatter with as many decimals as the step needs (no 0.6000000000000001). */
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) { hi = lo + 1; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
    var dec = Math.max(0, -Math.floor(Math.log10(step) + 1e-9)), out = [];
    // The last tick is at or above hi, so the plot's top edge is a labelled gridline.
    for (var k = Math.ceil(lo / step - 1e-9); out.length < 2 || out[out.length - 1] < hi - step * 1e-9; k++) { out.push(Number((k * step).toFixed(dec))); }
    return {values: out, dec: dec, top: out[out.length - 1]};
  }

  function frame(W, yTicks, yfmt, yTitle, xTitle) {
    var labels = yTicks.values.map(yfmt), wide = Math.max.apply(null, labels.map(tw).concat([0]));
    var M = {l: PAD + LINE + 8 + wide + 6, r: 14, t: 12, b: 20 + 2 * LINE};
    return {W: W, H: H, M: M, labels: labels, yTitle: yTitle, xTitle: xTitle, x0: M.l, x1: W - M.r, y0: M.t, y1: H - M.b};
  }
  function linY(f, lo, hi) { return function (v) { return f.y0 + (f.y1 - f.y0) * (1 - (v - lo) / (hi - lo)); }; }
  function logX(f, lo, hi) {
    var a = Math.log2(lo), b = Math.log2(hi), pad = 0.04;
    if (b <= a) { b = a + 1; a -= 1; }
    var span = b - a; a -= span * pad; b += span * pad;
    return function (v) { return f.x0 + (f.x1 - f.x0) * (Math.log2(v) - a) / (b - a); };
  }
  function line(x1, y1, x2, y2, st) { return '<line x1="' + r1(x1) + '" y1="' + r1(y1) + '" x2="' + r1(x2) + '" y2="' + r1(y2) + '" ' + (st || 'stroke="#ccd3da"') + "/>"; }
  function text(x, y, s, anchor, extra) { return '<text x="' + r1(x) + '" y="' + r1(y) + '" text-anchor="' + (anchor || "middle") + '" ' + (extra || "") + ">" + esc(s) + "</text>"; }
  function path(pts, st) {
    if (pts.length < 2) { return ""; }
    return '<path fill="none" d="M' + pts.map(function (p) { return r1(p[0]) + "," + r1(p[1]); }).join("L") + '" ' + st + "/>";
  }
  function dot(x, y, c, tip, r) { return '<circle cx="' + r1(x) + '" cy="' + r1(y) + '" r="' + (r || 4) + '" fill="' + c + '"><title>' + esc(tip) + "</title></circle>"; }
  function rect(x, y, w, h, fill, tip, extra) {
    return '<rect x="' + r1(x) + '" y="' + r1(y) + '" width="' + r1(Math.max(w, 0.5)) + '" height="' + r1(Math.max(h, 0)) + '" fill="' + fill + '"' + (extra || "") + ">" + (tip ? "<title>" + esc(tip) + "</title>" : "") + "</rect>";
  }
  function yAxis(f, ticks, y) {
    var s = "";
    ticks.values.forEach(function (v, i) { s += line(f.x0, y(v), f.x1, y(v)) + text(f.x0 - 6, y(v) + 4, f.labels[i], "end"); });
    var mid = (f.y0 + f.y1) / 2, tx = PAD + LINE / 2 + 3;
    return s + text(tx, mid, f.yTitle, "middle", 'dominant-baseline="central" transform="rotate(-90 ' + r1(tx) + " " + r1(mid) + ')"');
  }
  /* Labels under the x axis, centred at xs: every k-th one when they would touch (k = 1, 2,
     4, 5, 8, 10, ...), the ones ``always`` names first; a label that would touch a drawn one
     or leave the svg is skipped. */
  function xLabels(f, xs, labels, row, always) {
    var gap = xs.length > 1 ? Math.abs(xs[1] - xs[0]) : Infinity, wide = Math.max.apply(null, labels.map(tw).concat([0])) + 6;
    var k = 1, steps = [1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 200, 250, 256, 500, 512, 1000, 1024];
    for (var i = 0; i < steps.length; i++) { k = steps[i]; if (gap * k >= wide) { break; } }
    var y = f.y1 + 16 + (row || 0) * LINE, taken = [], s = "";
    var order = xs.map(function (x, j) { return j; });
    var first = order.filter(function (j) { return always && always(j); });
    order = first.concat(order.filter(function (j) { return j % k === 0 && first.indexOf(j) < 0; }));
    order.forEach(function (j) {
      var w = tw(labels[j]), a = xs[j] - w / 2 - 2, b = xs[j] + w / 2 + 2;
      if (a < 1 || b > f.W - 1) { return; }
      if (taken.some(function (t) { return a < t[1] && b > t[0]; })) { return; }
      taken.push([a, b]);
      s += text(xs[j], y, labels[j]);
    });
    return s;
  }
  function xAxisLog(f, ns, x) {
    var s = "";
    ns.forEach(function (n) { s += line(x(n), f.y1, x(n), f.y1 + 4, 'stroke="#666"'); });
    s += xLabels(f, ns.map(x), ns.map(String));
    return s + line(f.x0, f.y1, f.x1, f.y1, 'stroke="#666"') + text((f.x0 + f.x1) / 2, f.H - 8, f.xTitle);
  }
  function legend(items) {
    return '<div class="legend">' + items.map(function (it) { return '<span><i style="background:' + it[1] + '"></i>' + esc(it[0]) + "</span>"; }).join("") + "</div>";
  }
  /* data-plot: the plotting area, so a check can tell that every mark stays inside it. */
  function svg(f, body) {
    var plot = f.x0 !== undefined ? ' data-plot="' + [f.x0, f.y0, f.x1, f.y1].map(r1).join(" ") + '"' : "";
    return '<svg viewBox="0 0 ' + f.W + " " + f.H + '" width="' + f.W + '" height="' + f.H + '" role="img"' + plot + ">" + body + "</svg>";
  }
  function uniq(a) { return a.filter(function (v, i) { return a.indexOf(v) === i; }).sort(function (p, q) { return p - q; }); }
  function runsOf(st) { return (st.runs || []).slice().sort(function (a, b) { return a.world_size - b.world_size; }); }
  function projsOf(st) { return ((st.scaling || {}).projections || []).filter(function (p) { return num(p.world_size) && num(p.step_time_s) !== null; }); }
  function msTicks(ymax) {
    var t = niceTicks(0, ymax * 1000, 5);
    return {ticks: {values: t.values.map(function (v) { return v / 1000; }), dec: t.dec}, top: t.top / 1000, fmt: function (v) { return (v * 1000).toFixed(t.dec); }};
  }
  function whatIfs(st) {
    var groups = {};
    ((st.scaling || {}).what_if || []).forEach(function (e) {
      var ps = e.projections ? e.projections : [e];
      var name = e.label || e.scenario || "what-if";
      groups[name] = (groups[name] || []).concat(ps);
    });
    return groups;
  }
  /* Points of a polyline kept inside [lo, hi] vertically: the segment leaving the range ends on its edge. */
  function clipTo(pts, top) {
    var out = [];
    for (var i = 0; i < pts.length; i++) {
      if (pts[i][1] >= top) { out.push(pts[i]); continue; }
      if (i > 0 && pts[i - 1][1] >= top) {
        var p = pts[i - 1], q = pts[i], t = (p[1] - top) / (p[1] - q[1]);
        out.push([p[0] + (q[0] - p[0]) * t, top]);
      }
      break;
    }
    return out;
  }

  function speedupChart(st, W) {
    var sc = st.scaling || {}, base = num(sc.baseline_world_size) || 1;
    var pts = (sc.points || []).filter(function (p) { return num(p.speedup) !== null; });
    var projs = projsOf(st).filter(function (p) { return num(p.speedup) !== null; });
    var wi = whatIfs(st), amdahl = num(sc.amdahl_limit);
    var ns = uniq(pts.map(function (p) { return p.world_size; }).concat(projs.map(function (p) { return p.world_size; })));
    if (!ns.length) { return null; }
    var vals = pts.map(function (p) { return p.speedup; }).concat(projs.map(function (p) { return p.speedup; }));
    Object.keys(wi).forEach(function (k) { wi[k].forEach(function (p) { if (num(p.speedup) !== null) { vals.push(p.speedup); } }); });
    pts.forEach(function (p) { if (num(p.gustafson_speedup) !== null) { vals.push(p.gustafson_speedup); } });
    var top = Math.max.apply(null, vals.concat([1]));
    var ymax = Math.max(top, amdahl && amdahl < 4 * top ? amdahl : 0) * 1.1;
    var ticks = niceTicks(0, ymax, 5);
    ymax = ticks.top;
    var f = frame(W, ticks, function (v) { return v.toFixed(ticks.dec) + "x"; }, "speedup", (st.unit || "GPUs") + " (N, log scale)");
    var x = logX(f, ns[0], ns[ns.length - 1]), y = linY(f, 0, ymax), s = yAxis(f, ticks, y) + xAxisLog(f, ns, x);
    var ideal = [], lo = Math.log2(ns[0]), hi = Math.log2(ns[ns.length - 1]);
    for (var i = 0; i <= 60; i++) { var n = Math.pow(2, lo + (hi - lo) * i / 60); ideal.push([x(n), y(n / base)]); }
    s += path(clipTo(ideal, f.y0), 'stroke="#888" stroke-dasharray="4 3"');
    if (amdahl && amdahl < ymax) {
      var lab = "Amdahl ceiling " + times(amdahl), ly = y(amdahl) - 5 - FONT < f.y0 ? y(amdahl) + 5 + FONT : y(amdahl) - 5;
      s += line(f.x0, y(amdahl), f.x1, y(amdahl), 'stroke="#d62728" stroke-dasharray="2 3"') + text(f.x1 - 4, ly, lab, "end", 'style="fill:#d62728"');
    }
    var curve = (sc.curve || []).filter(function (p) { return num(p.world_size) && num(p.speedup) !== null && p.world_size >= ns[0] && p.world_size <= ns[ns.length - 1]; });
    var fitted = curve.length > 1 ? curve : pts.slice(-1).concat(projs);
    s += path(clipTo(fitted.map(function (p) { return [x(p.world_size), y(p.speedup)]; }), f.y0), 'stroke="#f28e2b" stroke-width="2" stroke-dasharray="6 3"');
    projs.forEach(function (p) { s += dot(x(p.world_size), y(p.speedup), "#f28e2b", "projected N=" + p.world_size + ": " + times(p.speedup)); });
    var model = sc.assumed ? "model (assumed: one run cannot be fitted)" : curve.length > 1 ? "model (fitted)" : "model (projected)";
    var k = 0, leg = [["ideal", "#888"], ["measured", "#1f77b4"], [model, "#f28e2b"]];
    Object.keys(wi).forEach(function (name) {
      var c = EXTRA[k++ % EXTRA.length], ws = pts.slice(-1).concat(wi[name].filter(function (p) { return num(p.speedup) !== null; }));
      s += path(ws.map(function (p) { return [x(p.world_size), y(p.speedup)]; }), 'stroke="' + c + '" stroke-width="1.5" stroke-dasharray="3 2"');
      leg.push(["what if " + name, c]);
    });
    var gus = pts.filter(function (p) { return num(p.gustafson_speedup) !== null; });
    if (gus.length) {
      s += path(gus.map(function (p) { return [x(p.world_size), y(p.gustafson_speedup)]; }), 'stroke="#59a14f" stroke-width="1.5"');
      leg.push(["Gustafson scaled speedup", "#59a14f"]);
    }
    s += path(pts.map(function (p) { return [x(p.world_size), y(p.speedup)]; }), 'stroke="#1f77b4" stroke-width="2"');
    pts.forEach(function (p) { s += dot(x(p.world_size), y(p.speedup), "#1f77b4", "measured N=" + p.world_size + ": " + times(p.speedup)); });
    if (amdahl) { leg.push(["Amdahl ceiling", "#d62728"]); }
    return {title: "Speedup: measured, model and ideal", svg: svg(f, s), legend: legend(leg)};
  }

  function barLabels(f, bars, xs, bw) {
    var s = xLabels(f, xs, bars.map(function (b) { return String(b.n); }));
    var projXs = [], projLab = [];
    bars.forEach(function (b, i) { if (b.proj) { projXs.push(xs[i]); projLab.push(bw > tw("proj.") + 4 ? "proj." : "p"); } });
    if (projXs.length) {
      var f2 = {y1: f.y1, W: f.W};
      s += xLabels(f2, projXs, projLab, 1);
    }
    return s;
  }

  function stackedChart(st, W) {
    var cats = st.categories || Object.keys(COLORS);
    var bars = runsOf(st).map(function (r) { return {n: r.world_size, bd: r.breakdown_s || {}, proj: false}; })
      .concat(projsOf(st).filter(function (p) { return p.breakdown_s && Object.keys(p.breakdown_s).length; })
        .map(function (p) { return {n: p.world_size, bd: p.breakdown_s, proj: true}; }));
    if (!bars.length) { return null; }
    var tot = bars.map(function (b) { return cats.reduce(function (a, c) { return a + Math.max(num(b.bd[c]) || 0, 0); }, 0); });
    var t = msTicks(Math.max.apply(null, tot) * 1.05 || 1e-3), ymax = t.top;
    var f = frame(W, t.ticks, t.fmt, "ms per step", "");
    var y = linY(f, 0, ymax), s = yAxis(f, t.ticks, y), bw = (f.x1 - f.x0) / bars.length, xs = [];
    bars.forEach(function (b, i) {
      var acc = 0, x0 = f.x0 + i * bw + bw * 0.15;
      xs.push(x0 + bw * 0.35);
      cats.forEach(function (c, ci) {
        var v = num(b.bd[c]) || 0;
        if (v <= 0) { return; }
        s += rect(x0, y(acc + v), bw * 0.7, y(acc) - y(acc + v), color(c, ci), "N=" + b.n + (b.proj ? " (projected) " : " ") + label(c) + ": " + ms(v), b.proj ? ' fill-opacity="0.55"' : "");
        acc += v;
      });
    });
    s += barLabels(f, bars, xs, bw) + line(f.x0, f.y1, f.x1, f.y1, 'stroke="#666"');
    return {title: "Time per step by category vs N (measured, then projected)", svg: svg(f, s), legend: legend(cats.map(function (c, i) { return [label(c), color(c, i)]; }))};
  }

  function serialChart(st, W) {
    var sf = (st.scaling || {}).serial_fraction || {}, bc = sf.by_category || {};
    var cats = Object.keys(bc).filter(function (c) { return num(bc[c]) !== null; }).sort(function (a, b) { return bc[b] - bc[a]; });
    if (!cats.length) { return null; }
    var total = num(sf.total), ci = sf.ci90 && num(sf.ci90[0]) !== null && num(sf.ci90[1]) !== null ? sf.ci90 : null;
    var rows = cats.map(function (c, i) { return {name: label(c), v: Math.max(bc[c], 0), col: color(c, i), lab: pct(bc[c])}; });
    if (total !== null) {
      rows.push({name: "Total", v: Math.max(total, 0), col: "#1d2733", lab: pct(total) + (ci ? " (90% CI " + pct(ci[0]) + "\u2013" + pct(ci[1]) + ")" : "")});
    }
    var rowH = 24, fh = 12 + rows.length * rowH + 8;
    var left = PAD + Math.max.apply(null, rows.map(function (r) { return tw(r.name); })) + 8;
    var reserve = Math.max.apply(null, rows.map(function (r) { return tw(r.lab); })) + 10;
    var xmax = Math.max.apply(null, rows.map(function (r) { return r.v; }).concat([ci ? ci[1] : 0, 0.01]));
    var span = Math.max(W - left - 14 - reserve, 20), xs = function (v) { return left + span * Math.max(v, 0) / xmax; }, s = "";
    rows.forEach(function (r, i) {
      var yy = 12 + i * rowH, isTotal = r.name === "Total" && i === rows.length - 1;
      s += text(left - 6, yy + rowH * 0.5 + 4, r.name, "end");
      s += rect(left, yy + rowH * 0.15, xs(r.v) - left, rowH * 0.7, r.col, r.name + ": " + r.lab + " of T(1)");
      var tx = xs(r.v);
      if (isTotal && ci) {
        s += line(xs(ci[0]), yy + rowH / 2, xs(ci[1]), yy + rowH / 2, 'stroke="#f0b400" stroke-width="3"');
        tx = Math.max(tx, xs(ci[1]));
      }
      s += text(tx + 5, yy + rowH * 0.5 + 4, r.lab, "start");
    });
    var f = {W: W, H: fh};
    var title = "Serial fraction by category (share of T(1) that does not shrink" + (sf.t1_estimated ? "; T(1) estimated, not measured)" : ")");
    return {title: title, svg: svg(f, s), legend: legend([["total with 90% interval", "#f0b400"]])};
  }

  function intervalChart(st, W) {
    var runs = runsOf(st).filter(function (r) { return num((r.step_time_s || {}).mean) !== null; }), projs = projsOf(st);
    var ns = uniq(runs.map(function (r) { return r.world_size; }).concat(projs.map(function (p) { return p.world_size; })));
    if (!ns.length) { return null; }
    var vals = [];
    runs.forEach(function (r) { vals.push(r.step_time_s.mean, num(r.step_time_s.p90) || 0); });
    projs.forEach(function (p) { vals.push(p.step_time_s, p.ci90 && num(p.ci90[1]) !== null ? p.ci90[1] : 0); });
    var t = msTicks(Math.max.apply(null, vals) * 1.05 || 1e-3), ymax = t.top;
    var f = frame(W, t.ticks, t.fmt, "ms per step", (st.unit || "GPUs") + " (N, log scale)");
    var x = logX(f, ns[0], ns[ns.length - 1]), y = linY(f, 0, ymax);
    var s = yAxis(f, t.ticks, y) + xAxisLog(f, ns, x);
    function whisker(n, lo, hi, c) { return line(x(n), y(lo), x(n), y(hi), 'stroke="' + c + '" stroke-width="2"') + line(x(n) - 5, y(lo), x(n) + 5, y(lo), 'stroke="' + c + '"') + line(x(n) - 5, y(hi), x(n) + 5, y(hi), 'stroke="' + c + '"'); }
    runs.forEach(function (r) {
      var q = r.step_time_s;
      if (num(q.p10) !== null && num(q.p90) !== null) { s += whisker(r.world_size, q.p10, q.p90, "#1f77b4"); }
      s += dot(x(r.world_size), y(q.mean), "#1f77b4", "measured N=" + r.world_size + ": " + ms(q.mean));
    });
    projs.forEach(function (p) {
      if (p.ci90 && num(p.ci90[0]) !== null && num(p.ci90[1]) !== null) { s += whisker(p.world_size, p.ci90[0], p.ci90[1], "#f28e2b"); }
      s += dot(x(p.world_size), y(p.step_time_s), "#f28e2b", "projected N=" + p.world_size + ": " + ms(p.step_time_s));
    });
    return {title: "Step time: measured (p10\u2013p90) and projected (90% interval)", svg: svg(f, s), legend: legend([["measured", "#1f77b4"], [(st.scaling || {}).assumed ? "projected (assumed)" : "projected", "#f28e2b"]])};
  }

  /* Ranks the document names as stragglers (runs[].stragglers); older documents: none marked. */
  function stragglerRanks(run) {
    var out = {};
    (run.stragglers || []).forEach(function (g) { if (g && num(g.rank) !== null) { out[g.rank] = g; } });
    return out;
  }

  function rankChart(st, run, W) {
    var cats = st.categories || Object.keys(COLORS), ranks = (run.per_rank || []).filter(function (p) { return num(p.step_time_s) !== null; });
    if (ranks.length < 2) { return null; }
    ranks.sort(function (a, b) { return a.rank - b.rank; });
    var mean = num((run.step_time_s || {}).mean), slowSet = stragglerRanks(run);
    var t = msTicks(Math.max.apply(null, ranks.map(function (p) { return p.step_time_s; })) * 1.12), ymax = t.top;
    var f = frame(W, t.ticks, t.fmt, "ms per step", "rank");
    var y = linY(f, 0, ymax), s = yAxis(f, t.ticks, y), bw = (f.x1 - f.x0) / ranks.length, xs = [], nslow = 0;
    var tag = bw >= tw("straggler") + 4;
    ranks.forEach(function (p, i) {
      var acc = 0, x0 = f.x0 + i * bw + bw * 0.1, bd = p.breakdown_s || {}, slow = slowSet.hasOwnProperty(p.rank);
      xs.push(x0 + bw * 0.4);
      var parts = cats.filter(function (c) { return (num(bd[c]) || 0) > 0; });
      if (!parts.length) { parts = ["__total"]; bd = {__total: p.step_time_s}; }
      parts.forEach(function (c, ci) {
        var v = bd[c];
        s += rect(x0, y(acc + v), bw * 0.8, y(acc) - y(acc + v), color(c, ci), "rank " + p.rank + " " + label(c) + ": " + ms(v));
        acc += v;
      });
      if (slow) {
        nslow++;
        s += rect(x0, y(p.step_time_s), bw * 0.8, y(0) - y(p.step_time_s), "none", "", ' stroke="#d62728" stroke-width="2"');
        if (tag) { s += text(x0 + bw * 0.4, y(p.step_time_s) - 4, "straggler", "middle", 'style="fill:#d62728"'); }
      }
    });
    s += xLabels(f, xs, ranks.map(function (p) { return String(p.rank); }), 0, function (j) { return slowSet.hasOwnProperty(ranks[j].rank); });
    if (mean !== null) { s += line(f.x0, y(mean), f.x1, y(mean), 'stroke="#1d2733" stroke-dasharray="5 3"'); }
    s += line(f.x0, f.y1, f.x1, f.y1, 'stroke="#666"') + text((f.x0 + f.x1) / 2, f.H - 8, f.xTitle);
    var leg = [["straggler: own time (not waiting) above the median rank's (" + nslow + ")", "#d62728"]];
    if (mean !== null) { leg.unshift(["mean " + ms(mean) + " (dashed)", "#1d2733"]); }
    return {title: "Per rank at N=" + run.world_size + ": step time by category", svg: svg(f, s), legend: legend(leg)};
  }

  function compareChart(doc, W) {
    var runs = doc.runs || [];
    if (!runs.length) { return null; }
    var cats = [];
    runs.forEach(function (r) { Object.keys((r.breakdown_s || {}).before || {}).forEach(function (c) { if (cats.indexOf(c) < 0) { cats.push(c); } }); });
    var bars = [];
    runs.forEach(function (r) {
      var nb = num(r.world_size_before) !== null ? r.world_size_before : r.world_size;
      bars.push({n: nb, pair: nb === r.world_size ? "N=" + nb : "N=" + nb + "\u2192" + r.world_size, side: "before", bd: (r.breakdown_s || {}).before || {}},
        {n: r.world_size, side: "after", bd: (r.breakdown_s || {}).after || {}});
    });
    var tot = bars.map(function (b) { return cats.reduce(function (a, c) { return a + Math.max(num(b.bd[c]) || 0, 0); }, 0); });
    var t = msTicks(Math.max.apply(null, tot) * 1.05 || 1e-3), ymax = t.top;
    var f = frame(W, t.ticks, t.fmt, "ms per step", "");
    var y = linY(f, 0, ymax), s = yAxis(f, t.ticks, y), bw = (f.x1 - f.x0) / bars.length, xs = [];
    bars.forEach(function (b, i) {
      var acc = 0, x0 = f.x0 + i * bw + bw * 0.12;
      xs.push(x0 + bw * 0.38);
      cats.forEach(function (c, ci) {
        var v = num(b.bd[c]) || 0;
        if (v <= 0) { return; }
        s += rect(x0, y(acc + v), bw * 0.76, y(acc) - y(acc + v), color(c, ci), "N=" + b.n + " " + b.side + " " + label(c) + ": " + ms(v));
        acc += v;
      });
    });
    var short = bw < tw("before") + 6;
    s += xLabels(f, xs, bars.map(function (b) { return short ? b.side.charAt(0) : b.side; }));
    var pairXs = [], pairLab = [];
    for (var i = 0; i + 1 < bars.length; i += 2) { pairXs.push((xs[i] + xs[i + 1]) / 2); pairLab.push(bars[i].pair); }
    s += xLabels(f, pairXs, pairLab, 1) + line(f.x0, f.y1, f.x1, f.y1, 'stroke="#666"');
    var leg = cats.map(function (c, i) { return [label(c), color(c, i)]; });
    var note = short ? '<div class="legend">b: before, a: after</div>' : "";
    return {title: "Time per step by category, before and after", svg: svg(f, s), legend: legend(leg) + note};
  }

  function studyCharts(st) {
    var out = [speedupChart, stackedChart, serialChart, intervalChart].map(function (fn) { return function (W) { return fn(st, W); }; });
    runsOf(st).filter(function (r) { return (r.per_rank || []).length > 1; }).slice(-4).reverse().forEach(function (r) {
      out.push(function (W) { return rankChart(st, r, W); });
    });
    return out;
  }

  /* Fill a slot: one box per chart that has data, each drawn at its box's width once all
     boxes are in the grid (a lone box spans the row until the others arrive). */
  function fill(el, makers) {
    el.innerHTML = "";
    var live = makers.filter(function (make) { return make(540) !== null; });
    var boxes = live.map(function () {
      var box = document.createElement("div");
      box.className = "chart";
      el.appendChild(box);
      return box;
    });
    boxes.forEach(function (box, i) {
      var inner = box.clientWidth - 18, W = Math.max(300, Math.min(inner > 0 ? inner : 540, 1200));
      var c = live[i](Math.floor(W));
      box.innerHTML = "<h4>" + esc(c.title) + "</h4>" + c.svg + (c.legend || "");
    });
  }

  var drawn = [];
  function main() {
    var doc = JSON.parse(document.getElementById("ts-data").textContent);
    var slots = document.querySelectorAll(".charts");
    for (var i = 0; i < slots.length; i++) {
      var el = slots[i], idx = Number(el.getAttribute("data-index"));
      var makers = doc.kind === "compare" ? (idx === 0 ? [function (W) { return compareChart(doc, W); }] : [])
        : studyCharts((doc.studies || [])[idx] || {});
      fill(el, makers);
      drawn.push([el, makers]);
    }
    var ok = document.createElement("div");
    ok.id = "ts-ok";
    ok.hidden = true;
    document.body.appendChild(ok);
  }

  try { main(); } catch (e) {
    var err = document.createElement("div");
    err.id = "ts-error";
    err.textContent = "chart error: " + e;
    document.body.insertBefore(err, document.body.firstChild);
    throw e;
  }
  var timer = null, lastWidth = window.innerWidth;
  window.addEventListener("resize", function () {
    if (window.innerWidth === lastWidth) { return; }
    lastWidth = window.innerWidth;
    clearTimeout(timer);
    timer = setTimeout(function () { drawn.forEach(function (d) { fill(d[0], d[1]); }); }, 150);
  });
})();
