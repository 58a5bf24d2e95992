/* Runs a report page's chart script inside its own container: finds the container, then gives
   the script a `document` whose lookups stay inside it and whose new ids get the report's prefix. */
(function () {
  "use strict";
  var UID = "__UID__", me = document.currentScript;
  function rootOf() {
    var el = me;
    while (el && !(el.classList && el.classList.contains("tracescale-report"))) { el = el.parentNode; }
    return el || document.getElementById(UID);
  }
  function start(root) {
    function own(node) { if (node && node.id && node.id.indexOf(UID + "-") !== 0) { node.id = UID + "-" + node.id; } return node; }
    var body = new Proxy(root, {get: function (t, k) {
      if (k === "appendChild") { return function (n) { return t.appendChild(own(n)); }; }
      if (k === "insertBefore") { return function (n, ref) { return t.insertBefore(own(n), ref); }; }
      var v = t[k]; return typeof v === "function" ? v.bind(t) : v; }});
    var scoped = new Proxy(document, {get: function (t, k) {
      if (k === "getElementById") { return function (id) { return root.querySelector("#" + CSS.escape(UID + "-" + id)); }; }
      if (k === "querySelector") { return function (s) { return root.querySelector(s); }; }
      if (k === "querySelectorAll") { return function (s) { return root.querySelectorAll(s); }; }
      if (k === "getElementsByClassName") { return function (s) { return root.getElementsByClassName(s); }; }
      if (k === "body" || k === "documentElement") { return body; }
      var v = t[k]; return typeof v === "function" ? v.bind(t) : v; }});
    (function (document) {
__CODE__
    })(scoped);
  }
  var tries = 0;
  (function wait() {
    var root = rootOf();
    if (root) { start(root); } else if (tries++ < 100) { setTimeout(wait, 20); }
  })();
})();
