/* tracescale report charts: inline SVG drawn from the JSON embedded in the page (no network). */
(function () {
  "use strict";
  var COLORS = {compute: "#4e79a7", memcpy: "#76b7b2", communication: "#e15759", dataloader: "#f28e2b",
    sync: "#b07aa1", reduction: "#9c755f", host: "#bab0ac", idle: "#d4d4d4"};
  var EXTRA = ["#59a14f", "#edc948", "#ff9da7", "#8cd17d", "#499894"];
  var LABELS = {compute: "Compute", memcpy: "Memory copies", communication: "Communication",
    dataloader: "Data loading", sync: "Synchronization", reduction: "Reduction", host: "Host overhead", idle: "Idle"};
  var W = 540, H = 300, M = {l: 56, r: 16, t: 14, b: 40};

  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; }); }
  function num(v) { return (typeof v === "number" && isFinite(v)) ? v : null; }
  function color(c, i) { return COLORS[c] || EXTRA[i % EXTRA.length]; }
  function label(c) { return LABELS[c] || c; }
  function ms(s) { return s >= 1 ? s.toPrecision(3) + " s" : (s * 1000).toFixed(1) + " ms"; }
  function fixed(v, d) { return v.toFixed(d); }
  function r1(v) { return Math.round(v * 10) / 10; }

  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) { hi = lo + 1; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) { out.push(v); }
    return out;
  }
  function linY(lo, hi) { return function (v) { return M.t + (H - M.t - M.b) * (1 - (v - lo) / (hi - lo)); }; }
  function logX(lo, hi) {
    var a = Math.log2(lo), b = Math.log2(hi);
    if (b <= a) { b = a + 1; a -= 1; }
    return function (v) { return M.l + (W - M.l - M.r) * (Math.log2(v) - a) / (b - a); };
  }
  function svg(body) { return '<svg viewBox="0 0 ' + W + " " + H + '" role="img">' + body + "</svg>"; }
  function line(x1, y1, x2, y2, st) { return '<line x1="' + r1(x1) + '" y1="' + r1(y1) + '" x2="' + r1(x2) + '" y2="' + r1(y2) + '" ' + (st || 'stroke="#ccd3da"') + "/>"; }
  function text(x, y, s, anchor, extra) { return '<text x="' + r1(x) + '" y="' + r1(y) + '" text-anchor="' + (anchor || "middle") + '" ' + (extra || "") + ">" + esc(s) + "</text>"; }
  function path(pts, st) {
    if (pts.length < 2) { return ""; }
    return '<path fill="none" d="M' + pts.map(function (p) { return r1(p[0]) + "," + r1(p[1]); }).join("L") + '" ' + st + "/>";
  }
  function dot(x, y, c, tip, r) { return '<circle cx="' + r1(x) + '" cy="' + r1(y) + '" r="' + (r || 4) + '" fill="' + c + '"><title>' + esc(tip) + "</title></circle>"; }
  function yAxis(lo, hi, y, fmt, title) {
    var s = "";
    niceTicks(lo, hi, 5).forEach(function (v) { s += line(M.l, y(v), W - M.r, y(v)) + text(M.l - 6, y(v) + 4, fmt(v), "end"); });
    return s + text(14, (H - M.b + M.t) / 2, title, "middle", 'transform="rotate(-90 14 ' + (H - M.b + M.t) / 2 + ')"');
  }
  function xAxisLog(ns, x) {
    var s = "";
    ns.forEach(function (n) { s += line(x(n), H - M.b, x(n), H - M.b + 4, 'stroke="#666"') + text(x(n), H - M.b + 16, String(n)); });
    return s + line(M.l, H - M.b, W - M.r, H - M.b, 'stroke="#666"') + text((M.l + W - M.r) / 2, H - 6, "GPUs (N, log scale)");
  }
  function legend(items) {
    return '<div class="legend">' + items.map(function (it) { return '<span><i style="background:' + it[1] + '"></i>' + esc(it[0]) + "</span>"; }).join("") + "</div>";
  }
  function chart(title, body, leg) { return '<div class="chart"><h4>' + esc(title) + "</h4>" + svg(body) + (leg || "") + "</div>"; }
  function uniq(a) { return a.filter(function (v, i) { return a.indexOf(v) === i; }).sort(function (p, q) { return p - q; }); }
  function runsOf(st) { return (st.runs || []).slice().sort(function (a, b) { return a.world_size - b.world_size; }); }
  function projsOf(st) { return ((st.scaling || {}).projections || []).filter(function (p) { return num(p.world_size) && num(p.step_time_s); }); }
  function whatIfs(st) {
    var groups = {};
    ((st.scaling || {}).what_if || []).forEach(function (e) {
      var ps = e.projections ? e.projections : [e];
      var name = e.label || e.scenario || "what-if";
      groups[name] = (groups[name] || []).concat(ps);
    });
    return groups;
  }

  function speedupChart(st) {
    var sc = st.scaling || {}, base = num(sc.baseline_world_size) || 1;
    var pts = (sc.points || []).filter(function (p) { return num(p.speedup) !== null; });
    var projs = projsOf(st).filter(function (p) { return num(p.speedup) !== null; });
    var wi = whatIfs(st), amdahl = num(sc.amdahl_limit);
    var ns = uniq(pts.map(function (p) { return p.world_size; }).concat(projs.map(function (p) { return p.world_size; })));
    if (!ns.length) { return ""; }
    var vals = pts.map(function (p) { return p.speedup; }).concat(projs.map(function (p) { return p.speedup; }));
    Object.keys(wi).forEach(function (k) { wi[k].forEach(function (p) { if (num(p.speedup)) { vals.push(p.speedup); } }); });
    pts.forEach(function (p) { if (num(p.gustafson_speedup)) { vals.push(p.gustafson_speedup); } });
    var ymax = Math.max.apply(null, vals.concat([amdahl && amdahl < 4 * Math.max.apply(null, vals) ? amdahl : 0])) * 1.25;
    var x = logX(ns[0], ns[ns.length - 1]), y = linY(0, ymax), s = yAxis(0, ymax, y, function (v) { return v + "x"; }, "speedup") + xAxisLog(ns, x);
    var ideal = [], lo = Math.log2(ns[0]), hi = Math.log2(ns[ns.length - 1]);
    for (var i = 0; i <= 60; i++) { var n = Math.pow(2, lo + (hi - lo) * i / 60), v = n / base; if (v > ymax) { break; } ideal.push([x(n), y(v)]); }
    s += path(ideal, 'stroke="#888" stroke-dasharray="4 3"');
    if (amdahl && amdahl < ymax) { s += line(M.l, y(amdahl), W - M.r, y(amdahl), 'stroke="#d62728" stroke-dasharray="2 3"') + text(W - M.r - 4, y(amdahl) - 5, "Amdahl ceiling " + fixed(amdahl, 2) + "x", "end", 'style="fill:#d62728"'); }
    var curve = (sc.curve || []).filter(function (p) { return num(p.world_size) && num(p.speedup) !== null && p.world_size >= ns[0] && p.world_size <= ns[ns.length - 1]; });
    var fitted = curve.length > 1 ? curve : pts.slice(-1).concat(projs);
    s += path(fitted.map(function (p) { return [x(p.world_size), y(p.speedup)]; }), 'stroke="#f28e2b" stroke-width="2" stroke-dasharray="6 3"');
    projs.forEach(function (p) { s += dot(x(p.world_size), y(p.speedup), "#f28e2b", "projected N=" + p.world_size + ": " + fixed(p.speedup, 2) + "x"); });
    var k = 0, leg = [["ideal", "#888"], ["measured", "#1f77b4"], [curve.length > 1 ? "model (fitted)" : "model (projected)", "#f28e2b"]];
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
    pts.forEach(function (p) { s += dot(x(p.world_size), y(p.speedup), "#1f77b4", "measured N=" + p.world_size + ": " + fixed(p.speedup, 2) + "x"); });
    if (amdahl) { leg.push(["Amdahl ceiling", "#d62728"]); }
    return chart("Speedup: measured, model and ideal", s, legend(leg));
  }

  function stackedChart(st) {
    var cats = st.categories || Object.keys(COLORS);
    var bars = runsOf(st).map(function (r) { return {n: r.world_size, bd: r.breakdown_s || {}, proj: false}; })
      .concat(projsOf(st).filter(function (p) { return p.breakdown_s && Object.keys(p.breakdown_s).length; })
        .map(function (p) { return {n: p.world_size, bd: p.breakdown_s, proj: true}; }));
    if (!bars.length) { return ""; }
    var tot = bars.map(function (b) { return cats.reduce(function (a, c) { return a + (num(b.bd[c]) || 0); }, 0); });
    var ymax = Math.max.apply(null, tot) * 1.1 || 1, y = linY(0, ymax), s = yAxis(0, ymax, y, function (v) { return (v * 1000).toFixed(0); }, "ms per step");
    var bw = (W - M.l - M.r) / bars.length;
    bars.forEach(function (b, i) {
      var acc = 0, x0 = M.l + i * bw + bw * 0.15;
      cats.forEach(function (c, ci) {
        var v = num(b.bd[c]) || 0;
        if (v <= 0) { return; }
        s += '<rect x="' + r1(x0) + '" y="' + r1(y(acc + v)) + '" width="' + r1(bw * 0.7) + '" height="' + r1(y(acc) - y(acc + v)) + '" fill="' + color(c, ci) + '"' + (b.proj ? ' fill-opacity="0.55"' : "") + "><title>" + esc("N=" + b.n + (b.proj ? " (projected) " : " ") + label(c) + ": " + ms(v)) + "</title></rect>";
        acc += v;
      });
      s += text(x0 + bw * 0.35, H - M.b + 16, String(b.n)) + (b.proj ? text(x0 + bw * 0.35, H - M.b + 28, "proj.") : "");
    });
    s += line(M.l, H - M.b, W - M.r, H - M.b, 'stroke="#666"');
    return chart("Time per step by category vs N (measured, then projected)", s, legend(cats.map(function (c, i) { return [label(c), color(c, i)]; })));
  }

  function serialChart(st) {
    var sf = (st.scaling || {}).serial_fraction || {}, bc = sf.by_category || {};
    var cats = Object.keys(bc).filter(function (c) { return num(bc[c]) !== null; }).sort(function (a, b) { return bc[b] - bc[a]; });
    if (!cats.length) { return ""; }
    var total = num(sf.total) || cats.reduce(function (a, c) { return a + bc[c]; }, 0);
    var xmax = Math.max(total, 0.01) * 1.15, rowH = Math.min(28, (H - M.t - M.b) / (cats.length + 1)), left = 130;
    var xs = function (v) { return left + (W - left - M.r - 60) * v / xmax; }, s = "";
    cats.concat(["total"]).forEach(function (c, i) {
      var v = c === "total" ? total : bc[c], yy = M.t + i * rowH, col = c === "total" ? "#1d2733" : color(c, i);
      s += text(left - 6, yy + rowH * 0.65, c === "total" ? "Total" : label(c), "end");
      s += '<rect x="' + left + '" y="' + r1(yy + rowH * 0.15) + '" width="' + r1(Math.max(0.5, xs(v) - left)) + '" height="' + r1(rowH * 0.7) + '" fill="' + col + '"><title>' + esc(label(c) + ": " + (v * 100).toFixed(1) + "% of T(1)") + "</title></rect>";
      var tx = c === "total" && sf.ci90 && num(sf.ci90[1]) !== null ? Math.max(xs(v), xs(sf.ci90[1])) : xs(v);
      s += text(tx + 4, yy + rowH * 0.65, (v * 100).toFixed(1) + "%" + (v > 0 ? "  (cap " + fixed(1 / v, 1) + "x)" : ""), "start");
    });
    var ci = sf.ci90;
    if (ci && num(ci[0]) !== null && num(ci[1]) !== null) {
      var yy = M.t + cats.length * rowH + rowH / 2;
      s += line(xs(ci[0]), yy, xs(ci[1]), yy, 'stroke="#f0b400" stroke-width="3"');
    }
    return chart("Serial fraction by category (share of T(1) that does not shrink)", s, legend([["total with 90% interval", "#f0b400"]]));
  }

  function intervalChart(st) {
    var runs = runsOf(st).filter(function (r) { return num((r.step_time_s || {}).mean) !== null; }), projs = projsOf(st);
    var ns = uniq(runs.map(function (r) { return r.world_size; }).concat(projs.map(function (p) { return p.world_size; })));
    if (!ns.length) { return ""; }
    var vals = [];
    runs.forEach(function (r) { vals.push(r.step_time_s.mean, num(r.step_time_s.p90) || 0); });
    projs.forEach(function (p) { vals.push(p.step_time_s, p.ci90 && num(p.ci90[1]) ? p.ci90[1] : 0); });
    var ymax = Math.max.apply(null, vals) * 1.1, x = logX(ns[0], ns[ns.length - 1]), y = linY(0, ymax);
    var s = yAxis(0, ymax, y, function (v) { return (v * 1000).toFixed(0); }, "ms per step") + xAxisLog(ns, x);
    function whisker(n, lo, hi, c) { return line(x(n), y(lo), x(n), y(hi), 'stroke="' + c + '" stroke-width="2"') + line(x(n) - 5, y(lo), x(n) + 5, y(lo), 'stroke="' + c + '"') + line(x(n) - 5, y(hi), x(n) + 5, y(hi), 'stroke="' + c + '"'); }
    runs.forEach(function (r) {
      var t = r.step_time_s;
      if (num(t.p10) !== null && num(t.p90) !== null) { s += whisker(r.world_size, t.p10, t.p90, "#1f77b4"); }
      s += dot(x(r.world_size), y(t.mean), "#1f77b4", "measured N=" + r.world_size + ": " + ms(t.mean));
    });
    projs.forEach(function (p) {
      if (p.ci90 && num(p.ci90[0]) !== null && num(p.ci90[1]) !== null) { s += whisker(p.world_size, p.ci90[0], p.ci90[1], "#f28e2b"); }
      s += dot(x(p.world_size), y(p.step_time_s), "#f28e2b", "projected N=" + p.world_size + ": " + ms(p.step_time_s));
    });
    return chart("Step time: measured (p10–p90) and projected (90% interval)", s, legend([["measured", "#1f77b4"], ["projected", "#f28e2b"]]));
  }

  function rankChart(st, run) {
    var cats = st.categories || Object.keys(COLORS), ranks = (run.per_rank || []).filter(function (p) { return num(p.step_time_s) !== null; });
    if (ranks.length < 2) { return ""; }
    ranks.sort(function (a, b) { return a.rank - b.rank; });
    var mean = num((run.step_time_s || {}).mean) || ranks.reduce(function (a, p) { return a + p.step_time_s; }, 0) / ranks.length;
    var ymax = Math.max.apply(null, ranks.map(function (p) { return p.step_time_s; })) * 1.1, y = linY(0, ymax);
    var s = yAxis(0, ymax, y, function (v) { return (v * 1000).toFixed(0); }, "ms per step"), bw = (W - M.l - M.r) / ranks.length, nslow = 0;
    ranks.forEach(function (p, i) {
      var acc = 0, x0 = M.l + i * bw + bw * 0.1, bd = p.breakdown_s || {}, slow = p.step_time_s > mean * 1.05;
      var parts = cats.filter(function (c) { return (num(bd[c]) || 0) > 0; });
      if (!parts.length) { parts = ["__total"]; bd = {__total: p.step_time_s}; }
      parts.forEach(function (c, ci) {
        var v = bd[c];
        s += '<rect x="' + r1(x0) + '" y="' + r1(y(acc + v)) + '" width="' + r1(Math.max(bw * 0.8, 0.5)) + '" height="' + r1(y(acc) - y(acc + v)) + '" fill="' + color(c, ci) + '"><title>' + esc("rank " + p.rank + " " + label(c) + ": " + ms(v)) + "</title></rect>";
        acc += v;
      });
      if (slow) {
        nslow++;
        s += '<rect x="' + r1(x0) + '" y="' + r1(y(p.step_time_s)) + '" width="' + r1(Math.max(bw * 0.8, 0.5)) + '" height="' + r1(y(0) - y(p.step_time_s)) + '" fill="none" stroke="#d62728" stroke-width="2"/>';
        if (ranks.length <= 64) { s += text(x0 + bw * 0.4, y(p.step_time_s) - 4, "straggler", "middle", 'style="fill:#d62728"'); }
      }
      if (ranks.length <= 32) { s += text(x0 + bw * 0.4, H - M.b + 16, String(p.rank)); }
    });
    s += line(M.l, y(mean), W - M.r, y(mean), 'stroke="#1d2733" stroke-dasharray="5 3"') + text(M.l + 4, y(mean) - 4, "mean " + ms(mean), "start");
    s += line(M.l, H - M.b, W - M.r, H - M.b, 'stroke="#666"') + text((M.l + W - M.r) / 2, H - 6, "rank");
    var leg = legend([["more than 5% slower than the mean (" + nslow + ")", "#d62728"]]);
    return chart("Per rank at N=" + run.world_size + ": step time by category", s, leg);
  }

  function compareChart(doc) {
    var runs = doc.runs || [];
    if (!runs.length) { return ""; }
    var cats = [];
    runs.forEach(function (r) { Object.keys((r.breakdown_s || {}).before || {}).forEach(function (c) { if (cats.indexOf(c) < 0) { cats.push(c); } }); });
    var bars = [];
    runs.forEach(function (r) { bars.push({n: r.world_size, side: "before", bd: (r.breakdown_s || {}).before || {}}, {n: r.world_size, side: "after", bd: (r.breakdown_s || {}).after || {}}); });
    var tot = bars.map(function (b) { return cats.reduce(function (a, c) { return a + (num(b.bd[c]) || 0); }, 0); });
    var ymax = Math.max.apply(null, tot) * 1.1 || 1, y = linY(0, ymax), s = yAxis(0, ymax, y, function (v) { return (v * 1000).toFixed(0); }, "ms per step");
    var bw = (W - M.l - M.r) / bars.length;
    bars.forEach(function (b, i) {
      var acc = 0, x0 = M.l + i * bw + bw * 0.12;
      cats.forEach(function (c, ci) {
        var v = num(b.bd[c]) || 0;
        if (v <= 0) { return; }
        s += '<rect x="' + r1(x0) + '" y="' + r1(y(acc + v)) + '" width="' + r1(bw * 0.76) + '" height="' + r1(y(acc) - y(acc + v)) + '" fill="' + color(c, ci) + '"><title>' + esc("N=" + b.n + " " + b.side + " " + label(c) + ": " + ms(v)) + "</title></rect>";
        acc += v;
      });
      s += text(x0 + bw * 0.38, H - M.b + 14, b.side) + (b.side === "before" ? text(x0 + bw, H - M.b + 28, "N=" + b.n) : "");
    });
    return chart("Time per step by category, before and after", s, legend(cats.map(function (c, i) { return [label(c), color(c, i)]; })));
  }

  function studyCharts(st) {
    var html = speedupChart(st) + stackedChart(st) + serialChart(st) + intervalChart(st);
    runsOf(st).filter(function (r) { return (r.per_rank || []).length > 1; }).slice(-4).reverse().forEach(function (r) { html += rankChart(st, r); });
    return html;
  }

  function main() {
    var doc = JSON.parse(document.getElementById("ts-data").textContent);
    var slots = document.querySelectorAll(".charts");
    for (var i = 0; i < slots.length; i++) {
      var el = slots[i], idx = Number(el.getAttribute("data-index"));
      if (doc.kind === "compare") { el.innerHTML = idx === 0 ? compareChart(doc) : ""; }
      else { el.innerHTML = studyCharts((doc.studies || [])[idx] || {}); }
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
})();
