/* Measures every chart's text and marks after the report's script ran (tests/test_html_layout.py). */
(function () {
  function box(r) { return [Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)]; }
  var out = {charts: [], problems: [], bottom: 0};
  document.querySelectorAll(".chart").forEach(function (chart) {
    var svg = chart.querySelector("svg"), title = (chart.querySelector("h4") || {}).textContent || "?";
    if (!svg) { out.problems.push({chart: title, kind: "no svg"}); return; }
    var sr = svg.getBoundingClientRect(), cr = chart.getBoundingClientRect();
    var vb = svg.viewBox && svg.viewBox.baseVal ? svg.viewBox.baseVal.width : sr.width;
    var texts = Array.prototype.filter.call(svg.querySelectorAll("text"), function (t) {
      var cs = getComputedStyle(t);
      return cs.display !== "none" && cs.visibility !== "hidden" && t.textContent.trim() !== "";
    });
    var rects = texts.map(function (t) { return t.getBoundingClientRect(); });
    var scale = sr.width / vb;
    var info = {title: title, texts: texts.length, scale: scale, box: box(cr),
      sizes: texts.map(function (t) { return parseFloat(getComputedStyle(t).fontSize) * scale; })};
    out.charts.push(info);
    if (sr.right > cr.right + 0.5 || sr.left < cr.left - 0.5) {
      out.problems.push({chart: title, kind: "svg wider than its box", svg: box(sr), box: box(cr)});
    }
    rects.forEach(function (r, i) {
      var name = texts[i].textContent;
      if (r.left < sr.left - 0.5 || r.right > sr.right + 0.5 || r.top < sr.top - 0.5 || r.bottom > sr.bottom + 0.5) {
        out.problems.push({chart: title, kind: "clipped", text: name, at: box(r), svg: box(sr)});
      }
      for (var j = 0; j < i; j++) {
        var q = rects[j];
        var w = Math.min(r.right, q.right) - Math.max(r.left, q.left);
        var h = Math.min(r.bottom, q.bottom) - Math.max(r.top, q.top);
        if (w > 1 && h > 1) {
          out.problems.push({chart: title, kind: "overlap", text: name, other: texts[j].textContent, at: box(r), with: box(q)});
        }
      }
    });
    var plot = svg.getAttribute("data-plot");
    if (plot) {
      var p = plot.split(" ").map(Number), k = sr.width / vb;
      var px = [sr.left + p[0] * k, sr.top + p[1] * k, sr.left + p[2] * k, sr.top + p[3] * k];
      svg.querySelectorAll("rect, circle, path").forEach(function (m) {
        var r = m.getBoundingClientRect(), tol = m.tagName === "circle" ? 5 : 1;
        if (r.width === 0 && r.height === 0) { return; }
        if (r.left < px[0] - tol || r.right > px[2] + tol || r.top < px[1] - tol || r.bottom > px[3] + tol) {
          var tip = m.querySelector("title");
          out.problems.push({chart: title, kind: "mark outside the plot", mark: m.tagName,
            tip: tip ? tip.textContent : "", at: box(r), plot: px.map(Math.round)});
        }
      });
    }
    out.bottom = Math.max(out.bottom, cr.bottom + window.scrollY);
  });
  var pre = document.createElement("pre");
  pre.id = "ts-layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
