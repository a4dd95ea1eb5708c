// traceviz client script: owned by the pages work. No inline script anywhere (CSP script-src
// 'self'); everything here is progressive enhancement over working links and forms.
(function () {
  "use strict";

  function stepLinks() {
    return Array.prototype.slice.call(document.querySelectorAll("#step-list [data-step-link]"));
  }

  function isTyping(target) {
    if (!target || !target.tagName) return false;
    var tag = target.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }

  // j / k move focus through the step list; Enter on the focused link opens its panel (it is a
  // plain link with hx-get, so the browser's own Enter handling does the rest).
  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
    if (isTyping(event.target)) return;
    if (event.key !== "j" && event.key !== "k") return;
    var links = stepLinks();
    if (!links.length) return;
    var index = links.indexOf(document.activeElement);
    if (index === -1) {
      var current = document.querySelector('#step-list [data-step-link][aria-current="true"]');
      index = current ? links.indexOf(current) : -1;
      index = event.key === "j" ? index + 1 : Math.max(index - 1, 0);
      if (index === -1) index = 0;
    } else {
      index += event.key === "j" ? 1 : -1;
    }
    index = Math.min(Math.max(index, 0), links.length - 1);
    links[index].focus();
    links[index].scrollIntoView({ block: "nearest" });
    event.preventDefault();
  });

  // Keep the step list's "current" marker in step with the panel that is shown, whether it
  // came from a click, a deep link or a history restore.
  function markCurrentStep() {
    var panel = document.getElementById("step-panel");
    if (!panel) return;
    var key = panel.getAttribute("data-step-key") || "";
    stepLinks().forEach(function (link) {
      if (key && link.getAttribute("data-step-key") === key) {
        link.setAttribute("aria-current", "true");
      } else {
        link.removeAttribute("aria-current");
      }
    });
  }

  // The live-refreshing jobs table skips a refresh while the user is inside it (focus on a
  // link, an expanded reason, a text selection): a refresh must not steal focus or the place.
  function userIsBusyIn(element) {
    if (element.contains(document.activeElement) && document.activeElement !== document.body) {
      return true;
    }
    if (element.querySelector("details[open]")) return true;
    var selection = window.getSelection && window.getSelection();
    if (selection && !selection.isCollapsed && element.contains(selection.anchorNode)) return true;
    return document.hidden;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var element = event.detail && event.detail.elt;
    if (!element || !element.hasAttribute || !element.hasAttribute("data-live-refresh")) return;
    // Only the table's own timer lands here: filter changes and page links are issued by the
    // form and the links, so they always go through.
    if (userIsBusyIn(element)) event.preventDefault();
  });

  // The selected step's row is shown inside the list's own scroll box (the page itself does
  // not move), and the panel is brought into view when it is off screen: on a deep link, on
  // a small screen where it sits below the list, after a click far down the page.
  function revealCurrentStep() {
    var list = document.querySelector(".steps");
    var current = document.querySelector('#step-list [data-step-link][aria-current="true"]');
    if (list && current && list.scrollHeight > list.clientHeight) {
      var top = current.getBoundingClientRect().top - list.getBoundingClientRect().top;
      list.scrollTop += top - list.clientHeight / 3;
    }
  }

  function panelOffScreen(panel) {
    var box = panel.getBoundingClientRect();
    return box.top < 0 || box.top > window.innerHeight - 80;
  }

  function revealPanel() {
    var panel = document.getElementById("step-panel");
    if (!panel || !panel.getAttribute("data-step-key")) return;
    if (panelOffScreen(panel)) panel.scrollIntoView({ block: "start" });
  }

  // The waterfall opens around the selected step's node (the root failure by default): its
  // row is brought into the waterfall's own scroll box, the page itself does not move.
  function revealSelectedNode() {
    var list = document.querySelector("#waterfall ol.wf");
    var row = list && list.querySelector(".wf-row.selected");
    if (!list || !row || list.scrollHeight <= list.clientHeight) return;
    var top = row.getBoundingClientRect().top - list.getBoundingClientRect().top;
    list.scrollTop += top - list.clientHeight / 3;
  }

  // The compare page opens on the first divergence (its card is open already) unless the
  // address names another place.
  function revealFirstDivergence() {
    var first = document.querySelector("[data-first-divergence]");
    if (first && !window.location.hash) first.scrollIntoView({ block: "start" });
  }

  // A link to a compared node (a difference's, the first divergence's place) opens its card.
  function openLinkedNode() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var node = id && document.getElementById(id);
    if (!node || !node.classList.contains("compare-node")) return;
    var details = node.querySelector("details");
    if (details) details.open = true;
    node.scrollIntoView({ block: "start" });
  }
  window.addEventListener("hashchange", openLinkedNode);

  document.addEventListener("DOMContentLoaded", function () {
    revealFirstDivergence();
    openLinkedNode();
    markCurrentStep();
    revealCurrentStep();
    revealSelectedNode();
    if (/[?&]step=/.test(window.location.search) || window.location.hash === "#step-panel") {
      revealPanel();
    }
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    markCurrentStep();
    var source = event.detail && event.detail.elt;
    if (source && source.hasAttribute && source.hasAttribute("data-live-job")) return;
    var target = event.detail && event.detail.target;
    if (target && target.id === "step-panel") revealPanel();
    if (target && target.id === "step-results") revealCurrentStep();
    if (target && target.id === "waterfall") {
      // A move (the overview strip, "Jump to root failure"): the step list and panel came out
      // of band, opened around the step it selected.
      revealSelectedNode();
      revealCurrentStep();
      // "Jump to root failure" lands on the root failure's panel, as its #step-panel link does
      // (the settled element is the swapped content: the request's element says who asked).
      var asked = event.detail.requestConfig && event.detail.requestConfig.elt;
      var panel = document.getElementById("step-panel");
      if (panel && asked && asked.classList && asked.classList.contains("jump-root")) {
        panel.scrollIntoView({ block: "start" });
      }
    }
  });
  document.addEventListener("htmx:historyRestore", markCurrentStep);

  // A live job page's poll asks for what the reader is looking at: the step whose panel is
  // open, the list's filter (from the address bar) and the rows opened with "Show earlier" /
  // "Show more" (first offset and count), and as many waterfall rows as are shown.
  var LIVE_KEEP = ["node", "segment", "retried"];
  document.addEventListener("htmx:configRequest", function (event) {
    var element = event.detail && event.detail.elt;
    if (!element || !element.hasAttribute || !element.hasAttribute("data-live-job")) return;
    var parameters = event.detail.parameters;
    var address = new URLSearchParams(window.location.search);
    LIVE_KEEP.forEach(function (name) {
      if (address.get(name)) parameters[name] = address.get(name);
    });
    var panel = document.getElementById("step-panel");
    var selected = address.get("step") || (panel && panel.getAttribute("data-step-key"));
    if (selected) parameters.step = selected;
    var rows = document.querySelectorAll("#step-list li[data-index]");
    if (rows.length) {
      parameters.first = rows[0].getAttribute("data-index");
      parameters.rows = String(rows.length);
    }
    var collapsed = address.getAll("collapse");
    if (collapsed.length) parameters.collapse = collapsed;
    var wfRows = document.querySelectorAll("#waterfall .wf-row");
    parameters.wf_rows = String(wfRows.length);
    if (wfRows.length) parameters.wf_first = wfRows[0].getAttribute("data-offset");
    parameters.lines = String(document.querySelectorAll("#narrative li.line").length);
  });

  // A poll waits while the reader selects text in what it would replace; a focused step link
  // gets its focus back on the fresh row, so j/k and Enter carry on where they were.
  var LIVE_PARTS = ["job-head", "job-overview", "waterfall", "step-results", "step-panel", "narrative"];
  var liveFocusKey = null;
  var livePanel = null;
  var liveHeadOpen = null;

  // Which of a part's details the reader opened or closed, by class and place among those of
  // its class (a details that appears with the fresh part, a new planner attempt, keeps its own).
  function openStates(part) {
    var states = {};
    if (!part) return states;
    part.querySelectorAll("details").forEach(function (details) {
      var name = details.className || "details";
      (states[name] = states[name] || []).push(details.open);
    });
    return states;
  }

  function restoreOpen(part, states) {
    if (!part || !states) return;
    var seen = {};
    part.querySelectorAll("details").forEach(function (details) {
      var name = details.className || "details";
      var index = (seen[name] = (seen[name] || 0) + 1) - 1;
      if (states[name] && index < states[name].length) details.open = states[name][index];
    });
  }
  document.addEventListener("htmx:beforeRequest", function (event) {
    var element = event.detail && event.detail.elt;
    if (!element || !element.hasAttribute || !element.hasAttribute("data-live-job")) return;
    var selection = window.getSelection && window.getSelection();
    var selecting = LIVE_PARTS.some(function (id) {
      var part = document.getElementById(id);
      return part && selection && !selection.isCollapsed && part.contains(selection.anchorNode);
    });
    if (selecting) {
      event.preventDefault();
      return;
    }
    liveHeadOpen = openStates(document.getElementById("job-head"));
    var focused = document.activeElement;
    liveFocusKey = focused && focused.getAttribute ? focused.getAttribute("data-step-key") : null;
    // The panel is replaced too (its step may have changed): keep where the reader was in it.
    var panel = document.getElementById("step-panel");
    livePanel = panel && {
      key: panel.getAttribute("data-step-key"),
      scrollTop: panel.scrollTop,
      open: Array.prototype.map.call(panel.querySelectorAll("details"), function (d) {
        return d.open;
      }),
    };
  });

  // Every part is replaced, so the browser's own scroll anchoring has nothing to hold on to:
  // keep the part the reader is in where it was on screen.
  var liveAnchor = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var element = event.detail && event.detail.elt;
    if (!element || !element.hasAttribute || !element.hasAttribute("data-live-job")) return;
    liveAnchor = null;
    for (var i = 0; i < LIVE_PARTS.length; i++) {
      var part = document.getElementById(LIVE_PARTS[i]);
      var box = part && part.getBoundingClientRect();
      if (box && box.bottom > 0 && box.height > 0) {
        if (!liveAnchor || box.top < liveAnchor.top) {
          liveAnchor = { id: LIVE_PARTS[i], top: box.top };
        }
        if (box.top >= 0) break;
      }
    }
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var element = event.detail && event.detail.elt;
    if (!element || !element.hasAttribute || !element.hasAttribute("data-live-job")) return;
    if (liveAnchor && window.scrollY > 0) {
      var anchor = document.getElementById(liveAnchor.id);
      if (anchor) window.scrollBy(0, anchor.getBoundingClientRect().top - liveAnchor.top);
    }
    liveAnchor = null;
    restoreOpen(document.getElementById("job-head"), liveHeadOpen);
    liveHeadOpen = null;
    var panel = document.getElementById("step-panel");
    if (livePanel && panel && panel.getAttribute("data-step-key") === livePanel.key) {
      panel.querySelectorAll("details").forEach(function (details, i) {
        if (i < livePanel.open.length) details.open = livePanel.open[i];
      });
      panel.scrollTop = livePanel.scrollTop;
    }
    livePanel = null;
    if (!liveFocusKey) return;
    var links = document.querySelectorAll("#step-list [data-step-link]");
    for (var i = 0; i < links.length; i++) {
      if (links[i].getAttribute("data-step-key") === liveFocusKey) {
        links[i].focus({ preventScroll: true });
        break;
      }
    }
    liveFocusKey = null;
  });
})();
