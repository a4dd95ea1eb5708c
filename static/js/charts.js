// Draws every [data-chart] element with plotly.js (served from the plotly wheel), on first
// load and on every htmx swap. The figure is the JSON that json_script put in the element whose
// id is the data-chart value. Clicking a bar or point opens the URL in its customdata[0].
(function () {
  "use strict";

  var CSS_VAR = /^var\((--[\w-]+)\s*,\s*([^)]+)\)$/;
  var styles = null;

  // "var(--ok, #2e7d32)" -> the stylesheet's --ok if it defines one, else the fallback.
  function resolveColor(value) {
    if (typeof value !== "string") return value;
    var match = CSS_VAR.exec(value);
    if (!match) return value;
    styles = styles || getComputedStyle(document.documentElement);
    return styles.getPropertyValue(match[1]).trim() || match[2].trim();
  }

  function resolveColors(figure) {
    (figure.data || []).forEach(function (trace) {
      if (trace.marker && trace.marker.color) trace.marker.color = resolveColor(trace.marker.color);
      if (trace.line && trace.line.color) trace.line.color = resolveColor(trace.line.color);
    });
    // Text and grid follow the page's theme (light or dark).
    styles = styles || getComputedStyle(document.documentElement);
    var text = styles.getPropertyValue("--text").trim();
    var grid = styles.getPropertyValue("--border").trim();
    if (text) figure.layout.font = Object.assign({}, figure.layout.font, { color: text });
    if (grid) {
      ["xaxis", "yaxis"].forEach(function (axis) {
        figure.layout[axis] = Object.assign({ gridcolor: grid, zerolinecolor: grid }, figure.layout[axis]);
      });
    }
    return figure;
  }

  // plotly draws text through its own HTML subset (<a href>, <span style>, <br>): every string
  // of the data (producer text: providers, models, node ids, reasons) is escaped so it is drawn
  // as text. Our own markup lives in hovertemplate and layout, which are left alone. Index 0 of
  // a point's customdata is our jobs-list URL, used on click and never drawn.
  // Only what starts a tag or an entity: plotly decodes &amp; &lt; &gt; (not &quot;).
  var ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;" };
  var DATA_KEYS = ["name", "x", "y", "text", "hovertext", "labels", "meta", "legendgrouptitle"];

  function escapeText(value) {
    if (typeof value === "string") {
      return value.replace(/[&<>]/g, function (c) { return ENTITIES[c]; });
    }
    if (Array.isArray(value)) return value.map(escapeText);
    if (value && typeof value === "object") {
      var copy = {};
      Object.keys(value).forEach(function (key) { copy[key] = escapeText(value[key]); });
      return copy;
    }
    return value;
  }

  function escapeData(figure) {
    (figure.data || []).forEach(function (trace) {
      DATA_KEYS.forEach(function (key) {
        if (key in trace) trace[key] = escapeText(trace[key]);
      });
      if (Array.isArray(trace.customdata)) {
        trace.customdata = trace.customdata.map(function (point) {
          return Array.isArray(point) ? [point[0]].concat(escapeText(point.slice(1))) : point;
        });
      }
    });
    return figure;
  }

  function linkOf(point) {
    var custom = point && point.customdata;
    return Array.isArray(custom) && typeof custom[0] === "string" ? custom[0] : null;
  }

  // htmx (allowScriptTags: false) drops every <script> from swapped HTML, json_script's inert
  // JSON included. So the figures are read from the raw response before the swap and put back
  // as the same <script type="application/json"> elements a full page render has, which also
  // keeps them in htmx's history snapshots.
  var swappedFigures = new Map();

  function collectFigures(html) {
    if (typeof html !== "string" || html.indexOf("application/json") === -1) return;
    var doc = new DOMParser().parseFromString(html, "text/html");
    doc.querySelectorAll('script[type="application/json"][id]').forEach(function (script) {
      swappedFigures.set(script.id, script.textContent);
    });
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    collectFigures(event.detail.serverResponse);
  });
  document.addEventListener("htmx:historyCacheMissLoad", function (event) {
    collectFigures(event.detail.response);
  });
  document.addEventListener("htmx:historyCacheHit", function (event) {
    collectFigures(event.detail.item && event.detail.item.content);
  });

  function figureSource(element) {
    var id = element.dataset.chart;
    if (swappedFigures.has(id)) {
      var stale = document.getElementById(id);
      if (stale) stale.remove();
      var script = document.createElement("script");
      script.type = "application/json";
      script.id = id;
      script.textContent = swappedFigures.get(id);
      element.parentNode.insertBefore(script, element);
      swappedFigures.delete(id);
    }
    return document.getElementById(id);
  }

  function draw(element) {
    // _fullLayout is plotly's own state: a chart restored from htmx's history snapshot is a
    // dead copy of the SVG without it, and is drawn again.
    if (element._fullLayout || typeof Plotly === "undefined") return;
    var source = figureSource(element);
    if (!source) return;
    var figure = resolveColors(escapeData(JSON.parse(source.textContent)));
    element.replaceChildren();
    delete element.dataset.ready;
    Plotly.newPlot(element, figure.data, figure.layout, {
      displaylogo: false,
      responsive: true,
      modeBarButtonsToRemove: ["select2d", "lasso2d"],
    }).then(function () {
      element.dataset.ready = "true";
    });
    element.on("plotly_click", function (event) {
      var url = linkOf(event.points && event.points[0]);
      // Only same-origin paths: the URLs come from our own server, never from producers.
      if (url && ((url.charAt(0) === "/" && url.charAt(1) !== "/") || url.charAt(0) === "#")) {
        window.location.assign(url);
      }
    });
    element.on("plotly_hover", function () { element.style.cursor = "pointer"; });
    element.on("plotly_unhover", function () { element.style.cursor = ""; });
  }

  function inView(element) {
    var box = element.getBoundingClientRect();
    return box.bottom > 0 && box.top < window.innerHeight;
  }

  // Charts below the fold are drawn one at a time when the browser is idle, so the ones in
  // view (and the headlines) show first: a chart costs plotly 50-150 ms of main thread.
  var later = [];
  function drawLater() {
    var element = later.shift();
    if (!element) return;
    if (element.isConnected) draw(element);
    if (later.length) idle(drawLater);
  }
  function idle(callback) {
    if (window.requestIdleCallback) window.requestIdleCallback(callback, { timeout: 100 });
    else window.setTimeout(callback, 0);
  }

  function drawAll(root) {
    var elements = [];
    if (root.matches && root.matches("[data-chart]")) elements.push(root);
    if (root.querySelectorAll) elements = elements.concat(Array.from(root.querySelectorAll("[data-chart]")));
    var waiting = later.length;
    elements.forEach(function (element) {
      if (inView(element)) draw(element);
      else later.push(element);
    });
    if (!waiting && later.length) idle(drawLater);
  }

  // Plotly charts swapped out by htmx are purged, so their listeners do not leak.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || typeof Plotly === "undefined") return;
    target.querySelectorAll("[data-chart]").forEach(function (element) { Plotly.purge(element); });
  });

  if (window.htmx) {
    htmx.onLoad(drawAll);
  } else {
    document.addEventListener("DOMContentLoaded", function () { drawAll(document.body); });
  }
})();
