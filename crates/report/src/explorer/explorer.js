/* credit report explorer: groups → trajectories × steps coloured by a method's advantage → one step's
 * observation, action, advantages and parts, and its node in the group's state graph.
 * Plain ES2019, no dependencies. Reads JSON from <script type="application/json"
 * id="credit-explorer-data"> and renders into <div id="explorer">. Keyboard: ←/→ steps, ↑/↓
 * trajectories, Home/End first/last step, 1–9 method. URL fragment:
 * #explorer/g=<group>/t=<trajectory>/s=<step>/m=<method> (indices from 0). */
(function () {
  "use strict";

  var root = document.getElementById("explorer");
  var source = document.getElementById("credit-explorer-data");
  if (!root || !source) return;
  var DATA;
  try {
    DATA = JSON.parse(source.textContent);
  } catch (err) {
    root.textContent = "The explorer's data could not be read: " + err.message;
    return;
  }
  var METHODS = DATA.methods || [];
  // Single-turn logs: a group is a prompt and its responses, one step each; no steps to walk and
  // no state graph.
  var SINGLE = !!DATA.single_turn;
  var GROUPS = DATA.groups || [];
  var SCALE = DATA.scale || {};
  if (!GROUPS.length || !METHODS.length) {
    root.textContent = "No groups were embedded in this report.";
    return;
  }

  // ---------------------------------------------------------------- formatting and colour

  function esc(s) {
    return String(s)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }
  function isNum(x) {
    return typeof x === "number" && isFinite(x);
  }
  // Advantages: signed, 3 decimals ("+1.250", "-0.310", "0.000"); tiny or huge values in
  // exponent form ("+4.20e-5"); missing values "—".
  function fmtAdv(x) {
    if (!isNum(x)) return "—";
    if (x === 0) return "0.000";
    var a = Math.abs(x);
    var body = a < 0.001 || a >= 1e6 ? a.toExponential(2) : a.toFixed(3);
    return (x < 0 ? "-" : "+") + body;
  }
  // Other numbers: integers as they are, others with 3 decimals (same exponent rule).
  function fmtNum(x) {
    if (x === null || x === undefined) return "—";
    if (typeof x !== "number") return String(x);
    if (!isFinite(x)) return String(x);
    if (Number.isInteger(x)) return String(x);
    var a = Math.abs(x);
    return a < 0.001 || a >= 1e6 ? x.toExponential(2) : x.toFixed(3);
  }
  // Returns: at most 2 decimals, trailing zeros dropped ("10", "9.9").
  function fmtShort(x) {
    return isNum(x) ? String(+x.toFixed(2)) : "—";
  }
  function pct(x) {
    return isNum(x) ? Math.round(100 * x) + "%" : "—";
  }
  // Ids often share a prefix (`sokoban-easy-seed3`, `…seed5`): keep both ends, cut the middle.
  function shortId(id) {
    id = id === null || id === undefined ? "" : String(id);
    return id.length > 12 ? id.slice(0, 4) + "…" + id.slice(-7) : id;
  }

  // The advantage scale's stops, from the report (credit_report::palette): [t, [r, g, b]] over
  // [-1, 1], sampled here in 201 steps.
  var STOPS = DATA.palette;
  var PALETTE = [];
  var INK = []; // text colour readable on PALETTE[i]
  (function () {
    for (var i = 0; i <= 200; i++) {
      var t = i / 100 - 1;
      var k = 0;
      while (k < STOPS.length - 2 && t > STOPS[k + 1][0]) k++;
      var a = STOPS[k], b = STOPS[k + 1];
      var f = (t - a[0]) / (b[0] - a[0]);
      var c = [0, 1, 2].map(function (j) {
        return Math.round(a[1][j] + f * (b[1][j] - a[1][j]));
      });
      PALETTE.push("rgb(" + c[0] + ", " + c[1] + ", " + c[2] + ")");
      var lum = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
      INK.push(lum < 140 ? "#fff" : "#111");
    }
  })();
  var GRADIENT =
    "linear-gradient(to right, " +
    STOPS.map(function (s) {
      return "rgb(" + s[1].join(", ") + ") " + ((s[0] + 1) * 50) + "%";
    }).join(", ") +
    ")";

  // Index into PALETTE for a value under a method's scale, or -1 when there is no value.
  function shade(x, method) {
    if (!isNum(x)) return -1;
    var s = SCALE[method];
    var t = isNum(s) && s > 0 ? x / s : x === 0 ? 0 : x > 0 ? 1 : -1;
    t = Math.max(-1, Math.min(1, t));
    return Math.round((t + 1) * 100);
  }

  // ---------------------------------------------------------------- state

  var state = { g: 0, t: 0, s: 0, m: METHODS.indexOf(DATA.default_method) >= 0 ? DATA.default_method : METHODS[0] };
  var cells = []; // cells[t][s] → element of the current group
  var selectedCell = null;
  var graph = null; // {svg, nodes: {id → element}, edges: {"a->b" → [element]}, vb0, view}
  var follow = true;

  function group() {
    return GROUPS[state.g];
  }
  function traj() {
    return group().trajectories[state.t];
  }
  function step() {
    var tr = traj();
    return tr ? tr.steps[state.s] : undefined;
  }

  // ---------------------------------------------------------------- skeleton

  root.classList.add("cx");
  root.innerHTML =
    '<div class="cx-bar">' +
    '<div class="cx-methods" role="group" aria-label="Colour steps by the advantage of">' +
    '<span class="cx-label">colour by</span>' +
    METHODS.map(function (m, i) {
      return (
        '<button type="button" class="cx-method" data-method="' + esc(m) + '" aria-pressed="false" title="Colour by ' +
        esc(m) + (i < 9 ? " (key " + (i + 1) + ")" : "") + '">' + esc(m) + "</button>"
      );
    }).join("") +
    "</div>" +
    '<div class="cx-legend" aria-label="Colour scale">' +
    '<div class="cx-scale"><div class="cx-ramp" style="background:' + GRADIENT + '"></div>' +
    '<div class="cx-ticks"><span class="cx-lo"></span><span>0</span><span class="cx-hi"></span></div></div>' +
    '<div class="cx-keyitems">' +
    '<span><i class="cx-demo cx-dinv" aria-hidden="true">×</i> invalid action</span>' +
    '<span><i class="cx-demo cx-dsel" aria-hidden="true"></i> selected</span>' +
    "</div></div>" +
    '<div class="cx-keys" aria-hidden="true"><kbd>←</kbd><kbd>→</kbd> step · <kbd>↑</kbd><kbd>↓</kbd> trajectory · <kbd>1</kbd>–<kbd>' +
    Math.min(9, METHODS.length) + "</kbd> method</div>" +
    "</div>" +
    '<div class="cx-groups">' +
    '<div class="cx-ghead" aria-hidden="true"><span>#</span><span>group</span><span>iter.</span><span>task</span><span>success</span><span>traj.</span><span>why it is here</span></div>' +
    '<div class="cx-glist" role="listbox" aria-label="Groups" tabindex="-1"></div>' +
    "</div>" +
    '<div class="cx-gsum"></div>' +
    (SINGLE ? '<div class="cx-prompt"></div><div class="cx-responses" role="listbox" aria-label="Responses"></div>' : "") +
    '<div class="cx-grid" role="grid" aria-label="Trajectories by steps"></div>' +
    '<div class="cx-main">' +
    '<div class="cx-detail" aria-label="Selected step"></div>' +
    '<div class="cx-graph">' +
    '<div class="cx-gbar"><span class="cx-gtitle">state graph</span>' +
    '<span class="cx-gnote"></span>' +
    '<span class="cx-gtools">' +
    '<label title="Pan and zoom to the selected step\'s node"><input type="checkbox" class="cx-follow" checked> follow</label>' +
    '<button type="button" class="cx-zoom" data-zoom="out" aria-label="Zoom out">−</button>' +
    '<button type="button" class="cx-zoom" data-zoom="in" aria-label="Zoom in">+</button>' +
    '<button type="button" class="cx-zoom" data-zoom="fit" aria-label="Fit the whole graph">fit</button>' +
    '<button type="button" class="cx-zoom" data-zoom="node" aria-label="Zoom to the selected node">node</button>' +
    "</span></div>" +
    '<div class="cx-view" tabindex="-1"></div>' +
    "</div></div>";

  var el = function (sel) {
    return root.querySelector(sel);
  };
  var glist = el(".cx-glist"), gsum = el(".cx-gsum"), grid = el(".cx-grid"), detail = el(".cx-detail");
  var graphBox = el(".cx-graph"), view = el(".cx-view"), gnote = el(".cx-gnote"), mainBox = el(".cx-main");
  var promptBox = el(".cx-prompt"), responses = el(".cx-responses");
  if (SINGLE) root.classList.add("cx-single");

  glist.innerHTML = GROUPS.map(function (g, i) {
    var label =
      "group " + (i + 1) + ": " + g.id + (g.iteration !== null && g.iteration !== undefined ? ", iteration " + g.iteration : "") +
      (g.task ? ", task " + g.task : "") + ", success " + pct(g.success_rate) + ", " + g.trajectories.length + " trajectories; " + (g.why || "");
    return (
      '<div class="cx-g" role="option" tabindex="-1" aria-selected="false" data-g="' + i + '" aria-label="' + esc(label) + '">' +
      "<span>" + (i + 1) + "</span>" +
      '<span class="cx-mono" title="' + esc(g.id) + '">' + esc(shortId(g.id)) + "</span>" +
      "<span>" + (g.iteration === null || g.iteration === undefined ? "—" : esc(g.iteration)) + "</span>" +
      "<span>" + (g.task ? esc(g.task) : "—") + "</span>" +
      '<span class="cx-rate"><i style="width:' + Math.round(100 * (g.success_rate || 0)) + '%"></i><b>' + pct(g.success_rate) + "</b></span>" +
      "<span>" + g.trajectories.length + "</span>" +
      '<span class="cx-why" title="' + esc(g.why || "") + '">' + esc(g.why || "") + "</span>" +
      "</div>"
    );
  }).join("");

  // ---------------------------------------------------------------- rendering

  // Cells are named by trajectory, step and action; the selected cell's name and every cell's
  // tooltip (set when the pointer first reaches it) also give the current method's advantage, so
  // that a method switch only has to repaint colours.
  function cellName(t, s) {
    var tr = group().trajectories[t];
    var st = tr.steps[s];
    var action = String(st.action);
    return (
      "trajectory " + (t + 1) + " (" + (tr.success ? "success" : "failure") + "), step " + st.step + ": " +
      (action.length > 120 ? action.slice(0, 119) + "…" : action) + (st.valid === false ? " [invalid action]" : "")
    );
  }
  // Whether method m's advantage at this step departs from the trainer's logged one (`logged`
  // itself departs wherever any method does).
  function departs(st, m) {
    var d = st.departs || [];
    return d.length > 0 && (m === "logged" || d.indexOf(m) >= 0);
  }
  function cellFullName(t, s) {
    var st = group().trajectories[t].steps[s];
    return cellName(t, s) + "; adv " + state.m + " " + fmtAdv(st.adv ? st.adv[state.m] : undefined) +
      (departs(st, state.m) ? "; departs from logged" : "");
  }

  function paintCell(c, t, s) {
    var st = group().trajectories[t].steps[s];
    var i = shade(st.adv ? st.adv[state.m] : undefined, state.m);
    if (i < 0) {
      c.style.backgroundColor = "";
      c.style.color = "";
      c.classList.add("cx-na");
    } else {
      c.style.backgroundColor = PALETTE[i];
      c.style.color = INK[i];
      c.classList.remove("cx-na");
    }
    c.classList.toggle("cx-departs", departs(st, state.m));
  }

  function renderGroups() {
    var items = glist.children;
    for (var i = 0; i < items.length; i++) {
      var on = i === state.g;
      items[i].setAttribute("aria-selected", on ? "true" : "false");
      items[i].tabIndex = on ? 0 : -1;
      items[i].classList.toggle("cx-on", on);
    }
  }

  function renderSummary() {
    var g = group();
    var n = g.trajectories.length;
    var ok = g.trajectories.filter(function (t) {
      return t.success;
    }).length;
    var steps = g.trajectories.reduce(function (a, t) {
      return a + t.steps.length;
    }, 0);
    gsum.innerHTML =
      "<b>Group " + (state.g + 1) + '</b> <span class="cx-mono">' + esc(g.id) + "</span>" +
      (g.iteration !== null && g.iteration !== undefined ? " · iteration " + esc(g.iteration) : "") +
      (g.task ? " · task <b>" + esc(g.task) + "</b>" : "") +
      " · " + n + (SINGLE ? " responses, " : " trajectories, ") + ok + " successful (" + pct(g.success_rate) + ")" +
      (SINGLE ? "" : " · " + steps + " steps") +
      (g.why ? ' · <span class="cx-whyline">' + esc(g.why) + "</span>" : "");
  }

  function renderGrid() {
    var g = group();
    var trs = g.trajectories;
    var maxLen = 1;
    trs.forEach(function (t) {
      maxLen = Math.max(maxLen, t.steps.length);
    });
    var avail = (grid.clientWidth || 900) - 118;
    var w = Math.max(12, Math.min(30, Math.floor(avail / maxLen) - 2));
    grid.style.setProperty("--cx-w", w + "px");
    var every = w >= 22 ? 1 : w >= 14 ? 5 : 10;
    var html = [];
    html.push('<div class="cx-row cx-steps" role="row"><div class="cx-rh" role="columnheader">traj. · step</div><div class="cx-cells">');
    for (var s = 0; s < maxLen; s++) {
      html.push('<span class="cx-sn" role="columnheader">' + (s % every === 0 ? s : "") + "</span>");
    }
    html.push("</div></div>");
    for (var t = 0; t < trs.length; t++) {
      var tr = trs[t];
      html.push(
        '<div class="cx-row" role="row" data-t="' + t + '">' +
        '<div class="cx-rh" role="rowheader" title="trajectory ' + esc(tr.id) + ": " + (tr.success ? "success" : "failure") +
        ", return " + fmtShort(tr["return"]) + ", " + tr.steps.length + ' steps">' +
        '<span class="cx-tn">' + (t + 1) + "</span>" +
        (tr.success ? '<b class="cx-ok" aria-label="success">✓</b>' : '<b class="cx-no" aria-label="failure">✗</b>') +
        '<span class="cx-ret">' + fmtShort(tr["return"]) + "</span></div>" +
        '<div class="cx-cells">'
      );
      for (var k = 0; k < tr.steps.length; k++) {
        var inv = tr.steps[k].valid === false;
        html.push(
          '<div class="cx-c' + (inv ? " cx-inv" : "") + '" role="gridcell" tabindex="-1" aria-selected="false" data-t="' + t +
          '" data-s="' + k + '" aria-label="' + esc(cellName(t, k)) + '">' + (inv ? "×" : "") + "</div>"
        );
      }
      html.push("</div></div>");
    }
    grid.innerHTML = html.join("");
    cells = [];
    var all = grid.querySelectorAll(".cx-c");
    for (var i = 0; i < all.length; i++) {
      var c = all[i];
      var ti = +c.getAttribute("data-t"), si = +c.getAttribute("data-s");
      (cells[ti] || (cells[ti] = []))[si] = c;
      paintCell(c, ti, si);
    }
    selectedCell = null;
  }

  function recolour() {
    for (var t = 0; t < cells.length; t++) {
      var row = cells[t] || [];
      for (var s = 0; s < row.length; s++) paintCell(row[s], t, s);
    }
    if (selectedCell) selectedCell.setAttribute("aria-label", cellFullName(state.t, state.s));
    var buttons = root.querySelectorAll(".cx-method");
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].setAttribute("aria-pressed", buttons[i].getAttribute("data-method") === state.m ? "true" : "false");
    }
    var sc = SCALE[state.m];
    el(".cx-lo").textContent = isNum(sc) ? fmtAdv(-sc) : "−";
    el(".cx-hi").textContent = isNum(sc) ? fmtAdv(sc) : "+";
    el(".cx-legend").setAttribute(
      "aria-label",
      "Colour: advantage of " + state.m + ", blue negative, grey zero, red positive, full colour at |A| ≥ " + fmtNum(sc)
    );
    el(".cx-scale").title = "adv_" + state.m + ": full colour at |A| ≥ " + fmtNum(sc) + " (clamped beyond)";
  }

  function advBar(x, m) {
    var i = shade(x, m);
    if (i < 0) return '<span class="cx-bar0"></span>';
    var t = i / 100 - 1;
    var w = Math.abs(t) * 50;
    var left = t < 0 ? 50 - w : 50;
    return (
      '<span class="cx-bar0"><i style="left:' + left + "%;width:" + w + "%;background:" + PALETTE[i] + '"></i></span>'
    );
  }

  // The other steps of the selected step's GiGPO anchor group: the group's steps whose
  // observation is the same text (exact anchors), as (trajectory, step index) pairs.
  function anchorMates() {
    var st = step(), mates = [];
    if (!st || st.obs === null || st.obs === undefined) return mates;
    group().trajectories.forEach(function (tr, t) {
      tr.steps.forEach(function (x, s) {
        if (x.obs === st.obs && !(t === state.t && s === state.s)) mates.push([t, s]);
      });
    });
    return mates;
  }
  // A step's discounted return as GiGPO groups it (its `step_return` part), if logged.
  function stepReturn(x) {
    var p = x.parts && x.parts.gigpo;
    return p ? p.step_return : undefined;
  }
  function markAnchorMates(mates) {
    var marked = grid.querySelectorAll(".cx-mate");
    for (var i = 0; i < marked.length; i++) marked[i].classList.remove("cx-mate");
    mates.forEach(function (m) {
      var c = cells[m[0]] && cells[m[0]][m[1]];
      if (c) c.classList.add("cx-mate");
    });
  }

  function renderDetail() {
    var g = group(), tr = traj(), st = step();
    if (!tr || !st) {
      detail.innerHTML = '<p class="cx-empty">This group has no steps.</p>';
      return;
    }
    var advRows = METHODS.map(function (m) {
      var x = st.adv ? st.adv[m] : undefined;
      var cur = m === state.m;
      var cls = (cur ? "cx-cur" : "") + (departs(st, m) ? (cur ? " " : "") + "cx-departs" : "");
      return (
        '<tr data-method="' + esc(m) + '"' + (cls ? ' class="' + cls + '"' : "") + (cur ? ' aria-current="true"' : "") + ">" +
        '<th scope="row"><button type="button" class="cx-mlink" data-method="' + esc(m) + '" title="Colour by ' + esc(m) + '">' +
        esc(m) + "</button></th>" +
        '<td class="cx-num cx-advval">' + fmtAdv(x) + "</td><td>" + advBar(x, m) + "</td></tr>"
      );
    }).join("");
    var parts = st.parts || {};
    var order = METHODS.filter(function (m) {
      return parts[m];
    }).concat(
      Object.keys(parts).filter(function (m) {
        return METHODS.indexOf(m) < 0;
      })
    );
    var partRows = order.map(function (m) {
      var p = parts[m] || {};
      var terms = Object.keys(p).map(function (k) {
        return '<span class="cx-term" data-term="' + esc(k) + '"><span class="cx-tk">' + esc(k.replace(/_/g, " ")) +
          '</span> <span class="cx-num">' + esc(fmtNum(p[k])) + "</span></span>";
      }).join(" ");
      return (
        '<tr data-method="' + esc(m) + '"' + (m === state.m ? ' class="cx-cur"' : "") + '><th scope="row">' + esc(m) +
        "</th><td>" + (terms || "—") + "</td></tr>"
      );
    }).join("");
    var mates = anchorMates();
    markAnchorMates(mates);
    var mateList = mates.slice(0, 12).map(function (m) {
      var x = group().trajectories[m[0]].steps[m[1]];
      return "t" + (m[0] + 1) + "·s" + esc(x.step) + " " + fmtShort(stepReturn(x));
    }).join(", ") + (mates.length > 12 ? ", …" : "");
    var anchorLine = mates.length
      ? '<div class="cx-anchor"><span class="cx-k">same state</span> ' + mates.length +
        " other step" + (mates.length > 1 ? "s" : "") + " (GiGPO anchor group, outlined; return " +
        fmtShort(stepReturn(st)) + " here): " + mateList + "</div>"
      : '<div class="cx-anchor cx-dim"><span class="cx-k">same state</span> no other step of the group (a singleton: GiGPO\'s step term is 0)</div>';
    detail.innerHTML =
      '<div class="cx-dhead"><b>trajectory ' + (state.t + 1) + "</b> " +
      (tr.success ? '<b class="cx-ok">✓ success</b>' : '<b class="cx-no">✗ failure</b>') +
      ", return " + fmtShort(tr["return"]) + " · <b>step " + esc(st.step) + "</b> (" + (state.s + 1) + " of " + tr.steps.length + ")" +
      ' <span class="cx-mono cx-dim" title="trajectory id">' + esc(tr.id) + "</span></div>" +
      '<div class="cx-actline"><span class="cx-k">action</span> <code class="cx-action" id="cx-action">' + esc(st.action) + "</code>" +
      (st.valid === false ? ' <span class="cx-badge cx-bad">× invalid action</span>' : ' <span class="cx-badge">valid</span>') +
      ' <span class="cx-k">reward</span> <b class="cx-num cx-reward">' + esc(fmtNum(st.reward)) + "</b>" +
      "</div>" +
      '<div class="cx-k cx-obshead">observation</div>' +
      '<pre class="cx-obs" tabindex="0" aria-label="observation">' + esc(st.obs === null || st.obs === undefined ? "—" : st.obs) + "</pre>" +
      anchorLine +
      '<div class="cx-tables">' +
      '<table class="cx-table cx-adv"><caption>advantage per method</caption><tbody>' + advRows + "</tbody></table>" +
      (partRows
        ? '<table class="cx-table cx-parts"><caption>parts</caption><tbody>' + partRows + "</tbody></table>"
        : '<p class="cx-dim cx-noparts">no parts for this step</p>') +
      "</div>";
  }

  // One prompt and its responses side by side: each response's text, score and every method's
  // advantage, coloured on that method's own scale.
  function renderResponses() {
    var g = group();
    promptBox.innerHTML =
      '<div class="cx-k">prompt</div><pre class="cx-obs cx-ptext" tabindex="0" aria-label="prompt">' +
      esc(g.prompt === null || g.prompt === undefined ? "—" : g.prompt) + "</pre>";
    responses.innerHTML = g.trajectories.map(function (tr, t) {
      var st = tr.steps[0] || {};
      var rows = METHODS.map(function (m) {
        var x = st.adv ? st.adv[m] : undefined;
        var i = shade(x, m);
        var paint = i < 0 ? "" : ' style="background-color:' + PALETTE[i] + ";color:" + INK[i] + '"';
        return (
          "<tr" + (m === state.m ? ' class="cx-cur"' : "") + '><th scope="row">' + esc(m) + "</th>" +
          '<td class="cx-num cx-advval"' + paint + ">" + fmtAdv(x) + "</td></tr>"
        );
      }).join("");
      var on = t === state.t;
      return (
        '<section class="cx-resp' + (on ? " cx-on" : "") + '" role="option" aria-selected="' + on + '" tabindex="' +
        (on ? 0 : -1) + '" data-t="' + t + '">' +
        '<div class="cx-rhead"><b>response ' + (t + 1) + "</b> " +
        (tr.success ? '<b class="cx-ok">✓</b>' : '<b class="cx-no">✗</b>') +
        ' <span class="cx-k">score</span> <b class="cx-num cx-reward">' + esc(fmtNum(st.reward)) + "</b></div>" +
        '<pre class="cx-rtext">' + esc(st.action === null || st.action === undefined ? "—" : st.action) + "</pre>" +
        '<table class="cx-table cx-adv"><caption>advantage per method</caption><tbody>' + rows + "</tbody></table>" +
        "</section>"
      );
    }).join("");
  }

  // ---------------------------------------------------------------- state graph

  function renderGraph() {
    var g = group();
    graph = null;
    view.innerHTML = "";
    if (!g.svg) {
      mainBox.classList.add("cx-nograph");
      gnote.textContent = "No state graph for this group (Graphviz was not available when the report was built).";
      return;
    }
    mainBox.classList.remove("cx-nograph");
    gnote.textContent = "";
    var text = String(g.svg);
    var at = text.indexOf("<svg");
    view.innerHTML = at >= 0 ? text.slice(at) : text;
    var svg = view.querySelector("svg");
    if (!svg) {
      mainBox.classList.add("cx-nograph");
      gnote.textContent = "The state graph of this group could not be read.";
      return;
    }
    var vb = svg.viewBox && svg.viewBox.baseVal;
    var box;
    if (vb && vb.width > 0 && vb.height > 0) box = [vb.x, vb.y, vb.width, vb.height];
    else box = [0, 0, parseFloat(svg.getAttribute("width")) || 100, parseFloat(svg.getAttribute("height")) || 100];
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "State graph of group " + (state.g + 1));
    var nodes = {}, edges = {};
    var ns = svg.querySelectorAll("g.node");
    var i, title;
    for (i = 0; i < ns.length; i++) {
      if (ns[i].id) nodes[ns[i].id] = ns[i];
    }
    for (i = 0; i < ns.length; i++) {
      title = ns[i].querySelector("title");
      if (title && !nodes[title.textContent]) nodes[title.textContent] = ns[i];
    }
    var es = svg.querySelectorAll("g.edge");
    for (i = 0; i < es.length; i++) {
      title = es[i].querySelector("title");
      if (!title) continue;
      var key = title.textContent.replace(/\s+/g, "");
      (edges[key] || (edges[key] = [])).push(es[i]);
    }
    graph = { svg: svg, nodes: nodes, edges: edges, box: box, view: null, marked: [] };
    fitGraph(false);
  }

  function viewSize() {
    return [view.clientWidth || 1, view.clientHeight || 1];
  }
  function applyView() {
    if (!graph || !graph.view) return;
    var sz = viewSize(), v = graph.view;
    var w = sz[0] / v.k, h = sz[1] / v.k;
    graph.svg.setAttribute("viewBox", [v.x - w / 2, v.y - h / 2, w, h].map(function (n) {
      return n.toFixed(2);
    }).join(" "));
  }
  var anim = 0;
  function goTo(target, animate) {
    if (!graph) return;
    cancelAnimationFrame(anim);
    var from = graph.view;
    var reduce = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
    if (!animate || !from || reduce) {
      graph.view = target;
      applyView();
      return;
    }
    var t0 = performance.now();
    var frame = function (now) {
      var f = Math.min(1, (now - t0) / 220);
      var e = f * (2 - f);
      graph.view = {
        x: from.x + (target.x - from.x) * e,
        y: from.y + (target.y - from.y) * e,
        k: Math.exp(Math.log(from.k) + (Math.log(target.k) - Math.log(from.k)) * e)
      };
      applyView();
      if (f < 1) anim = requestAnimationFrame(frame);
    };
    anim = requestAnimationFrame(frame);
  }
  function fitGraph(animate) {
    if (!graph) return;
    var sz = viewSize(), b = graph.box;
    var k = Math.min(sz[0] / b[2], sz[1] / b[3]) * 0.97;
    goTo({ x: b[0] + b[2] / 2, y: b[1] + b[3] / 2, k: k }, animate);
  }
  function zoomBy(f) {
    if (!graph || !graph.view) return;
    var v = graph.view;
    goTo({ x: v.x, y: v.y, k: Math.max(0.05, Math.min(8, v.k * f)) }, true);
  }
  // The node's box in the svg's user units (the viewBox space).
  function nodeBox(node) {
    var r = node.getBoundingClientRect();
    var m = graph.svg.getScreenCTM();
    if (!m || (r.width === 0 && r.height === 0)) return null;
    var inv = m.inverse();
    var p = new DOMPoint(r.left, r.top).matrixTransform(inv);
    var q = new DOMPoint(r.right, r.bottom).matrixTransform(inv);
    return { x: Math.min(p.x, q.x), y: Math.min(p.y, q.y), w: Math.abs(q.x - p.x), h: Math.abs(q.y - p.y) };
  }
  // Pans (and zooms in when the graph is drawn too small to read) so that the node is in view.
  function reveal(node, force) {
    if (!graph || !graph.view) return;
    var b = nodeBox(node);
    if (!b) return;
    var v = graph.view, sz = viewSize();
    var readable = 0.9;
    var k = v.k < readable ? Math.min(1.1, Math.max(readable, Math.min(sz[0] / (b.w * 1.5), sz[1] / (b.h * 3)))) : v.k;
    var w = sz[0] / k, h = sz[1] / k;
    var cx = b.x + b.w / 2, cy = b.y + b.h / 2;
    var margin = 12 / k;
    var inside =
      b.x - margin >= v.x - w / 2 && b.x + b.w + margin <= v.x + w / 2 &&
      b.y - margin >= v.y - h / 2 && b.y + b.h + margin <= v.y + h / 2;
    if (force || k !== v.k || !inside) goTo({ x: cx, y: cy, k: k }, true);
  }

  function markGraph() {
    if (!graph) return;
    graph.marked.forEach(function (n) {
      n.classList.remove("selected", "cx-path");
    });
    graph.marked = [];
    var tr = traj(), st = step();
    if (!tr || !st) return;
    var prev = null;
    tr.steps.forEach(function (x) {
      var n = x.node && graph.nodes[x.node];
      if (n) {
        n.classList.add("cx-path");
        graph.marked.push(n);
      }
      if (prev && x.node) {
        (graph.edges[prev + "->" + x.node] || []).forEach(function (e) {
          e.classList.add("cx-path");
          graph.marked.push(e);
        });
      }
      prev = x.node;
    });
    graph.svg.classList.add("cx-haspath");
    var node = st.node ? graph.nodes[st.node] : null;
    if (node) {
      node.classList.add("selected");
      gnote.textContent = "step " + st.step + " of trajectory " + (state.t + 1) + " at node " + st.node;
      if (follow) reveal(node, false);
    } else {
      gnote.textContent = st.node ? "node " + st.node + " is not in this graph" : "this step has no node in the graph";
    }
  }

  // ---------------------------------------------------------------- selection

  function clampSel() {
    state.g = Math.max(0, Math.min(GROUPS.length - 1, state.g | 0));
    var trs = group().trajectories;
    state.t = Math.max(0, Math.min(trs.length - 1, state.t | 0));
    var tr = trs[state.t];
    state.s = tr ? Math.max(0, Math.min(tr.steps.length - 1, state.s | 0)) : 0;
  }

  function showStep(focus) {
    clampSel();
    if (SINGLE) {
      renderResponses();
      var r = responses.querySelector(".cx-on");
      if (r && focus) r.focus({ preventScroll: true });
      return;
    }
    if (selectedCell) {
      selectedCell.setAttribute(
        "aria-label",
        cellName(+selectedCell.getAttribute("data-t"), +selectedCell.getAttribute("data-s"))
      );
      selectedCell.classList.remove("cx-sel");
      selectedCell.setAttribute("aria-selected", "false");
      selectedCell.tabIndex = -1;
    }
    var rows = grid.querySelectorAll(".cx-row.cx-rowsel");
    for (var i = 0; i < rows.length; i++) rows[i].classList.remove("cx-rowsel");
    var c = cells[state.t] && cells[state.t][state.s];
    selectedCell = c || null;
    if (c) {
      c.classList.add("cx-sel");
      c.setAttribute("aria-selected", "true");
      c.setAttribute("aria-label", cellFullName(state.t, state.s));
      c.tabIndex = 0;
      c.parentNode.parentNode.classList.add("cx-rowsel");
      scrollIntoGrid(c);
      if (focus) c.focus({ preventScroll: true });
    }
    renderDetail();
    markGraph();
  }

  // Scrolls the grid (only the grid, not the page) so that the cell is visible.
  function scrollIntoGrid(c) {
    var g = grid.getBoundingClientRect(), r = c.getBoundingClientRect();
    var left = g.left + 116, top = g.top + 22;
    if (r.left < left) grid.scrollLeft -= left - r.left + 4;
    else if (r.right > g.right - 4) grid.scrollLeft += r.right - g.right + 20;
    if (r.top < top) grid.scrollTop -= top - r.top + 2;
    else if (r.bottom > g.bottom - 4) grid.scrollTop += r.bottom - g.bottom + 20;
  }

  function openGroup(gi, keep) {
    state.g = gi;
    if (!keep) {
      state.t = 0;
      state.s = 0;
    }
    clampSel();
    renderGroups();
    renderSummary();
    if (SINGLE) {
      showStep(false);
      return;
    }
    renderGrid();
    renderGraph();
    showStep(false);
  }

  function setMethod(m) {
    if (METHODS.indexOf(m) < 0 || m === state.m) return;
    state.m = m;
    recolour();
    if (SINGLE) renderResponses();
    else renderDetail();
    writeHash();
  }

  // ---------------------------------------------------------------- URL fragment

  function hashFor() {
    return "#explorer/g=" + state.g + "/t=" + state.t + "/s=" + state.s + "/m=" + encodeURIComponent(state.m);
  }
  function writeHash() {
    var h = hashFor();
    if (location.hash === h) return;
    try {
      history.replaceState(history.state, "", h);
    } catch (err) {
      location.replace(h);
    }
  }
  function readHash() {
    var h = location.hash;
    if (h.indexOf("#explorer") !== 0) return null;
    var out = {};
    h.slice(1).split("/").slice(1).forEach(function (p) {
      var i = p.indexOf("=");
      if (i > 0) {
        try {
          out[p.slice(0, i)] = decodeURIComponent(p.slice(i + 1));
        } catch (err) {
          /* ignore a malformed part */
        }
      }
    });
    return out;
  }
  function applyHash(h) {
    var m = h.m && METHODS.indexOf(h.m) >= 0 ? h.m : state.m;
    var g = h.g !== undefined && /^\d+$/.test(h.g) ? +h.g : state.g;
    var methodChanged = m !== state.m;
    state.m = m;
    if (methodChanged) recolour();
    var groupChanged = g !== state.g || !cells.length;
    state.g = g;
    state.t = /^\d+$/.test(h.t || "") ? +h.t : 0;
    state.s = /^\d+$/.test(h.s || "") ? +h.s : 0;
    if (groupChanged) openGroup(Math.min(GROUPS.length - 1, g), true);
    else showStep(false);
  }

  // ---------------------------------------------------------------- events

  grid.addEventListener("click", function (e) {
    var c = e.target.closest && e.target.closest(".cx-c");
    if (!c || !grid.contains(c)) return;
    state.t = +c.getAttribute("data-t");
    state.s = +c.getAttribute("data-s");
    showStep(true);
    writeHash();
  });
  grid.addEventListener("mouseover", function (e) {
    var c = e.target.closest && e.target.closest(".cx-c");
    if (!c || c.getAttribute("data-m") === state.m) return;
    c.setAttribute("data-m", state.m);
    c.title = cellFullName(+c.getAttribute("data-t"), +c.getAttribute("data-s"));
  });
  if (SINGLE) {
    responses.addEventListener("click", function (e) {
      var r = e.target.closest && e.target.closest(".cx-resp");
      if (!r) return;
      state.t = +r.getAttribute("data-t");
      showStep(true);
      writeHash();
    });
  }
  glist.addEventListener("click", function (e) {
    var o = e.target.closest && e.target.closest(".cx-g");
    if (!o) return;
    var gi = +o.getAttribute("data-g");
    if (gi !== state.g) {
      openGroup(gi, false);
      writeHash();
    }
    o.focus({ preventScroll: true });
  });
  root.addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("[data-method]");
    if (b && (b.classList.contains("cx-method") || b.classList.contains("cx-mlink"))) {
      setMethod(b.getAttribute("data-method"));
      return;
    }
    var z = e.target.closest && e.target.closest(".cx-zoom");
    if (z) {
      var what = z.getAttribute("data-zoom");
      if (what === "in") zoomBy(1.4);
      else if (what === "out") zoomBy(1 / 1.4);
      else if (what === "fit") fitGraph(true);
      else if (what === "node" && graph) {
        var st = step();
        var n = st && st.node && graph.nodes[st.node];
        if (n) reveal(n, true);
      }
    }
  });
  el(".cx-follow").addEventListener("change", function (e) {
    follow = e.target.checked;
    if (follow) markGraph();
  });

  function move(dt, ds, focus) {
    var trs = group().trajectories;
    if (!trs.length) return;
    // Responses are one step each: ←/→ move between them as ↑/↓ do.
    if (SINGLE && isFinite(ds)) {
      dt = dt || ds;
      ds = 0;
    }
    if (dt) state.t = Math.max(0, Math.min(trs.length - 1, state.t + dt));
    if (ds === -Infinity) state.s = 0;
    else if (ds === Infinity) state.s = trs[state.t].steps.length - 1;
    else if (ds) state.s += ds;
    showStep(focus);
    writeHash();
  }

  root.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    var tg = e.target;
    if (tg.closest && tg.closest("input, select, textarea, .cx-obs")) return;
    var inCells = !!(tg.classList && tg.classList.contains("cx-c"));
    var inGroups = !!(tg.closest && tg.closest(".cx-glist"));
    var k = e.key;
    if (k === "ArrowRight") move(0, 1, inCells);
    else if (k === "ArrowLeft") move(0, -1, inCells);
    else if (k === "ArrowDown" || k === "ArrowUp") {
      var d = k === "ArrowDown" ? 1 : -1;
      if (inGroups) {
        var gi = Math.max(0, Math.min(GROUPS.length - 1, state.g + d));
        if (gi !== state.g) {
          openGroup(gi, false);
          writeHash();
        }
        glist.children[state.g].focus();
        glist.children[state.g].scrollIntoView({ block: "nearest" });
      } else move(d, 0, inCells);
    } else if (k === "Home") move(0, -Infinity, inCells);
    else if (k === "End") move(0, Infinity, inCells);
    else if ((k === "Enter" || k === " ") && inCells) move(0, 0, true);
    else if (/^[1-9]$/.test(k) && +k <= METHODS.length) setMethod(METHODS[+k - 1]);
    else return;
    e.preventDefault();
  });

  // Drag to pan, ctrl/⌘ + wheel (or pinch) to zoom, click a node to select a step in that state.
  var drag = null;
  view.addEventListener("pointerdown", function (e) {
    if (!graph || e.button !== 0) return;
    drag = { x: e.clientX, y: e.clientY, v: graph.view, moved: false, id: e.pointerId };
  });
  view.addEventListener("pointermove", function (e) {
    if (!drag || !graph) return;
    var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    if (!drag.moved) {
      drag.moved = true;
      try {
        view.setPointerCapture(drag.id);
      } catch (err) {
        /* pointer already gone */
      }
      view.classList.add("cx-dragging");
    }
    cancelAnimationFrame(anim);
    graph.view = { x: drag.v.x - dx / drag.v.k, y: drag.v.y - dy / drag.v.k, k: drag.v.k };
    applyView();
  });
  function endDrag(e) {
    if (!drag) return;
    var wasClick = !drag.moved;
    drag = null;
    view.classList.remove("cx-dragging");
    if (wasClick && e.type === "pointerup") nodeClicked(e.target);
  }
  view.addEventListener("pointerup", endDrag);
  view.addEventListener("pointercancel", endDrag);
  view.addEventListener(
    "wheel",
    function (e) {
      if (!graph || !(e.ctrlKey || e.metaKey)) return;
      e.preventDefault();
      var v = graph.view;
      var f = Math.exp(-e.deltaY * 0.01);
      var r = view.getBoundingClientRect(), sz = viewSize();
      var px = (e.clientX - r.left - sz[0] / 2) / v.k, py = (e.clientY - r.top - sz[1] / 2) / v.k;
      var k = Math.max(0.05, Math.min(8, v.k * f));
      cancelAnimationFrame(anim);
      graph.view = { x: v.x + px - px * (v.k / k), y: v.y + py - py * (v.k / k), k: k };
      applyView();
    },
    { passive: false }
  );
  function nodeClicked(target) {
    var n = target.closest && target.closest("g.node");
    if (!n || !graph) return;
    var id = n.id;
    var title = n.querySelector("title");
    var names = [id, title ? title.textContent : null];
    var hit = function (x) {
      return x.node && names.indexOf(x.node) >= 0;
    };
    var trs = group().trajectories;
    // Prefer the selected trajectory (its next visit after the selected step, else its first),
    // then any trajectory.
    var steps = trs[state.t] ? trs[state.t].steps : [];
    for (var s = 0; s < steps.length; s++) {
      var j = (state.s + 1 + s) % steps.length;
      if (hit(steps[j])) {
        state.s = j;
        showStep(false);
        writeHash();
        return;
      }
    }
    for (var t = 0; t < trs.length; t++) {
      for (var k = 0; k < trs[t].steps.length; k++) {
        if (hit(trs[t].steps[k])) {
          state.t = t;
          state.s = k;
          showStep(false);
          writeHash();
          return;
        }
      }
    }
  }

  window.addEventListener("hashchange", function () {
    var h = readHash();
    if (h) applyHash(h);
  });
  // Keep the graph's scale when its box changes size; a graph first drawn while hidden (no size)
  // is fitted again once it can be seen.
  var lastWidth = view.clientWidth;
  var resized = function () {
    var w = view.clientWidth;
    if (graph && w > 1 && lastWidth <= 1) {
      fitGraph(false);
      markGraph();
    } else applyView();
    lastWidth = w;
  };
  if (typeof ResizeObserver === "function") new ResizeObserver(resized).observe(view);
  else window.addEventListener("resize", resized);

  // ---------------------------------------------------------------- start

  recolour();
  var initial = readHash();
  if (initial) {
    applyHash(initial);
    // Opened from a link to a step: bring the explorer into view (again after the browser's own
    // fragment and scroll restoration have run).
    root.scrollIntoView({ block: "start" });
    window.addEventListener("load", function () {
      setTimeout(function () {
        root.scrollIntoView({ block: "start" });
      }, 0);
    });
  } else {
    openGroup(0, false);
  }

  // A small handle for tests and the console (read-only use).
  window.creditExplorer = {
    state: function () {
      return { g: state.g, t: state.t, s: state.s, m: state.m };
    },
    formatAdvantage: fmtAdv,
    formatNumber: fmtNum
  };
})();
