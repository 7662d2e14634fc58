// The report's per-query explorer (msprlab.reports.explore_page). Plain DOM, no library.
// The question list is the JSON in #xp-data; a question's lists are read when it is opened,
// from the chunk file (report-explore/NNN.js) that holds it, through a <script> element:
// that works from file:// where fetch() does not.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("xp-data").textContent);
  var FEATURES = data.features;            // dense, lexical, graph, frequency, personal, success
  var COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
  var PAGE = 100;
  var chunks = {};                          // chunk index -> its questions, once loaded
  var waiting = {};                         // chunk index -> callbacks
  var state = {a: data.defaults[0], b: data.defaults[1], key: "id", down: false,
               filter: "", page: 0, open: null, search: null};

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, kids) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") { node.textContent = attrs[k]; } else { node.setAttribute(k, attrs[k]); }
    });
    (kids || []).forEach(function (kid) {
      node.appendChild(typeof kid === "string" ? document.createTextNode(kid) : kid);
    });
    return node;
  }
  function num(x, digits) { return x === null || x === undefined ? "–" : x.toFixed(digits); }
  function signed(x) {
    if (x === null) { return "–"; }
    return Math.abs(x) <= data.tie ? "0" : (x > 0 ? "+" : "") + x.toFixed(4);
  }
  function pair(a, b) { return a < b ? a + "|" + b : b + "|" + a; }
  function change(q) {
    var x = q.v[state.a], y = q.v[state.b];
    return x === null || y === null || x === undefined || y === undefined ? null : y - x;
  }
  function overlap(q, k) { var o = q.o[pair(state.a, state.b)]; return o ? o[k] : null; }
  function value(q, key) {
    switch (key) {
      case "change": return change(q);
      case "a": return q.v[state.a];
      case "b": return q.v[state.b];
      case "jaccard": return overlap(q, 0);
      case "rbo": return overlap(q, 1);
      default: return q[key];
    }
  }

  // ---- the question list ----------------------------------------------------------------
  function shown() {
    var needle = state.filter.trim().toLowerCase();
    var rows = data.questions.filter(function (q) {
      return !needle || q.id.toLowerCase().indexOf(needle) >= 0 ||
        q.text.toLowerCase().indexOf(needle) >= 0;
    });
    var sign = state.down ? -1 : 1;
    rows.sort(function (p, q) {
      var x = value(p, state.key), y = value(q, state.key);
      if (x === y) { return p.id < q.id ? -1 : 1; }
      if (x === null || x === undefined) { return 1; }    // blanks last either way
      if (y === null || y === undefined) { return -1; }
      return (x < y ? -1 : 1) * sign;
    });
    return rows;
  }

  function tally() {
    var up = 0, down = 0, same = 0, none = 0, j = [], r = [];
    data.questions.forEach(function (q) {
      var c = change(q);
      if (c === null) { none += 1; } else if (c > data.tie) { up += 1; }
      else if (c < -data.tie) { down += 1; } else { same += 1; }
      if (overlap(q, 0) !== null) { j.push(overlap(q, 0)); }
      if (overlap(q, 1) !== null) { r.push(overlap(q, 1)); }
    });
    function mean(xs) { return xs.length ? xs.reduce(function (s, x) { return s + x; }, 0) / xs.length : null; }
    var t = $("xp-tally");
    t.textContent = "";
    t.appendChild(el("b", {text: state.b + " against " + state.a + ": "}));
    t.appendChild(el("span", {"class": "up", id: "xp-improved", text: up + " improved"}));
    t.appendChild(document.createTextNode(", "));
    t.appendChild(el("span", {"class": "down", id: "xp-degraded", text: down + " degraded"}));
    t.appendChild(document.createTextNode(", " + same + " unchanged (|Δ| ≤ " + data.tie +
      ")" + (none ? ", " + none + " without a relevant memory (not counted)" : "") +
      " of " + data.questions.length + " questions; mean Jaccard@10 " + num(mean(j), 3) +
      ", mean RBO (p = " + data.p + ") " + num(mean(r), 3) + "."));
  }

  function renderList() {
    var rows = shown();
    var pages = Math.max(1, Math.ceil(rows.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    var body = $("xp-rows");
    body.textContent = "";
    rows.slice(state.page * PAGE, (state.page + 1) * PAGE).forEach(function (q) {
      var c = change(q);
      var tr = el("tr", {"data-qid": q.id, "class": "xp-q" + (q.id === state.open ? " xp-open" : "")}, [
        el("td", {}, [el("a", {href: "#xp-detail", text: q.id})]),
        el("td", {"class": "xp-text", title: q.text, text: q.text}),
        el("td", {"class": "num xp-change" + (c > data.tie ? " up" : (c < -data.tie ? " down" : "")),
                  "data-change": c === null ? "" : String(c), text: signed(c)}),
        el("td", {"class": "num", text: num(q.v[state.a], 4)}),
        el("td", {"class": "num", text: num(q.v[state.b], 4)}),
        el("td", {"class": "num", text: String(q.n)}),
        el("td", {text: q.intent}), el("td", {text: q.type || "–"}), el("td", {text: q.seen || "–"}),
        el("td", {"class": "num", text: num(overlap(q, 0), 3)}),
        el("td", {"class": "num", text: num(overlap(q, 1), 3)})]);
      tr.addEventListener("click", function (event) { event.preventDefault(); openQuestion(q.id, null); });
      body.appendChild(tr);
    });
    $("xp-a-head").textContent = state.a;
    $("xp-b-head").textContent = state.b;
    $("xp-page").textContent = rows.length ? "questions " + (state.page * PAGE + 1) + "–" +
      Math.min(rows.length, (state.page + 1) * PAGE) + " of " + rows.length +
      (rows.length < data.questions.length ? " (filtered from " + data.questions.length + ")" : "")
      : "no question matches";
    $("xp-prev").disabled = state.page === 0;
    $("xp-next").disabled = state.page >= pages - 1;
    Array.prototype.forEach.call(document.querySelectorAll("#xp-table th[data-key]"), function (th) {
      th.setAttribute("aria-sort", th.getAttribute("data-key") !== state.key ? "none"
        : (state.down ? "descending" : "ascending"));
    });
  }

  // ---- one question -----------------------------------------------------------------------
  function withChunk(index, then) {
    if (chunks[index]) { then(chunks[index]); return; }
    if (waiting[index]) { waiting[index].push(then); return; }
    waiting[index] = [then];
    var script = el("script", {src: data.folder + "/" + data.files[index]});
    script.onerror = function () {
      $("xp-detail").textContent = "Could not read " + data.folder + "/" + data.files[index] +
        ": keep the folder " + data.folder + " beside this page.";
    };
    document.body.appendChild(script);
  }
  window.msprlabExplore = {chunk: function (index, content) {
    chunks[index] = content;
    (waiting[index] || []).forEach(function (then) { then(content); });
    delete waiting[index];
  }};

  function byId(id) {
    for (var i = 0; i < data.questions.length; i += 1) {
      if (data.questions[i].id === id) { return data.questions[i]; }
    }
    return null;
  }

  function openQuestion(id, event) {
    var q = byId(id);
    state.open = id;
    renderList();
    $("xp-detail").textContent = "reading " + data.files[q.chunk] + " …";
    withChunk(q.chunk, function (chunk) {
      var searches = chunk.questions[id];
      state.search = event !== null ? event : searches[0].e;
      renderQuestion(q, searches, chunk.texts);
    });
  }

  function label(grade) {
    if (grade === null) { return "unjudged"; }
    if (data.verdicts) { return grade > 0 ? "helpful" : "unhelpful"; }
    return grade > 0 ? "grade " + grade : "judged not relevant";
  }

  function parts(row, weights) {
    var text = FEATURES.map(function (f, k) {   // the feature is shown as term / weight
      return f + ": " + weights[k] + " × " + (weights[k] ? (row.t[k] / weights[k]).toFixed(6) : "·") +
        " = " + row.t[k];
    });
    return text.join("\n") + "\nsum " + row.sum + "\n× relevance " + row.rel +
      (row.role !== 1 ? "\n× role " + row.role : "") + "\n= score " + row.score;
  }

  function bar(row, scale) {
    // The weighted terms stacked (before the multipliers), and a dark mark at the score:
    // the sum times the relevance (and role) multiplier, on the same scale.
    var box = el("span", {"class": "xp-bar"});
    row.t.forEach(function (term, k) {
      if (term === 0) { return; }
      box.appendChild(el("span", {"class": term < 0 ? "xp-neg" : "",
        style: "width:" + (Math.abs(term) / scale * 100).toFixed(2) + "%;background:" + COLOURS[k],
        title: FEATURES[k] + " " + term.toFixed(4)}));
    });
    var at = Math.max(0, Math.min(100, row.score / scale * 100));
    box.appendChild(el("i", {"class": "xp-mark", style: "left:" + at.toFixed(2) + "%",
      title: "score " + row.score.toFixed(4)}));
    return box;
  }

  function rows(list, arm) {
    // [rank, memory_id, grade, seed, score, relevance, role, the 6 weighted terms]
    return list.map(function (r) {
      var row = {rank: r[0], id: r[1], grade: r[2], seed: r[3], score: r[4], rel: r[5],
                 role: r[6], t: r.slice(7, 13), arm: arm};
      var sum = row.t[0];
      for (var k = 1; k < 6; k += 1) { sum += row.t[k]; }
      row.sum = sum;
      return row;
    });
  }

  function armTable(arm, part, texts, scale, other) {
    var table = el("table", {"class": "xp-list", "data-arm": arm}, [el("thead", {}, [el("tr", {}, [
      el("th", {"class": "num", text: "#"}), el("th", {text: "memory"}), el("th", {text: "label"}),
      el("th", {"class": "num", text: "score"}), el("th", {text: "parts"}), el("th", {text: "from"})])])]);
    var body = el("tbody");
    rows(part.l, arm).forEach(function (row) {
      var text = texts[row.id] || "";
      var tr = el("tr", {"class": "xp-row" + (other[row.id] ? "" : " xp-only"), "data-arm": arm,
        "data-rank": String(row.rank), "data-memory": row.id, "data-score": String(row.score),
        "data-terms": JSON.stringify(row.t), "data-relevance": String(row.rel),
        "data-role": String(row.role), title: parts(row, part.w)}, [
        el("td", {"class": "num", text: String(row.rank)}),
        el("td", {}, [el("code", {text: row.id}), el("small", {text: text.length > 90 ? text.slice(0, 89) + "…" : text})]),
        el("td", {"class": row.grade > 0 ? "up" : "", text: label(row.grade)}),
        el("td", {"class": "num", text: row.score.toFixed(4)}),
        el("td", {}, [bar(row, scale), el("small", {text: "× rel " + row.rel.toFixed(3) +
          (row.role !== 1 ? " × role " + row.role : "")})]),
        el("td", {text: row.seed ? "seed" : "graph"})]);
      body.appendChild(tr);
    });
    table.appendChild(body);
    return table;
  }

  function fateText(f) {
    if (!f) { return "shown"; }
    if (f[2] === "ranked") { return "ranked " + f[3] + " of " + f[4] + " (" + (f[5] ? "seed" : "graph") + ")"; }
    return data.fates[f[2]];
  }

  function renderQuestion(q, searches, texts) {
    var box = $("xp-detail");
    box.textContent = "";
    var s = searches.filter(function (x) { return x.e === state.search; })[0] || searches[0];
    var select = el("select", {id: "xp-search"});
    searches.forEach(function (x) {
      var va = x.a[state.a].v, vb = x.a[state.b].v;
      var o = el("option", {value: String(x.e), text: "e" + x.e + " · " + x.ts + " · " + state.a +
        " " + num(va, 3) + " → " + state.b + " " + num(vb, 3)});
      if (x.e === s.e) { o.selected = true; }
      select.appendChild(o);
    });
    select.addEventListener("change", function () {
      state.search = Number(select.value);
      renderQuestion(q, searches, texts);
    });
    box.appendChild(el("h3", {id: "xp-title", text: q.id + ": " + q.text}));
    box.appendChild(el("p", {}, [data.metric + " " + state.a + " " + num(q.v[state.a], 4) + ", " +
      state.b + " " + num(q.v[state.b], 4) + " (change " + signed(change(q)) + ", mean over " +
      q.n + " test search(es)); intent " + q.intent + ", type " + (q.type || "–") + ", " +
      (q.seen || "") + ". Search: ", select, " (" + searches.length + ")"]));
    var left = s.a[state.a], right = s.a[state.b];
    var inLeft = {}, inRight = {}, scale = 0;
    left.l.forEach(function (r) { inLeft[r[1]] = true; scale = Math.max(scale, Math.abs(r[4])); });
    right.l.forEach(function (r) { inRight[r[1]] = true; scale = Math.max(scale, Math.abs(r[4])); });
    rows(left.l).concat(rows(right.l)).forEach(function (row) {
      var total = 0;
      row.t.forEach(function (t) { total += Math.abs(t); });
      scale = Math.max(scale, total);
    });
    scale = scale || 1;
    var sides = el("div", {"class": "xp-sides"});
    [[state.a, left, inRight], [state.b, right, inLeft]].forEach(function (side) {
      sides.appendChild(el("div", {}, [el("h4", {text: side[0] + " (" + data.metric + " " +
        num(side[1].v, 4) + "; weights " + side[1].w.map(function (w) { return +w.toFixed(4); }).join(", ") + ")"}),
        armTable(side[0], side[1], texts, scale, side[2])]));
    });
    box.appendChild(sides);
    var legend = el("p", {"class": "small"}, ["Parts: "]);
    FEATURES.forEach(function (f, k) {
      legend.appendChild(el("span", {"class": "xp-key", style: "background:" + COLOURS[k]}));
      legend.appendChild(document.createTextNode(f + " "));
    });
    legend.appendChild(document.createTextNode("— the weighted terms stacked, one scale per search (striped: a negative term); the dark mark is the score, their sum times the relevance (and role) multiplier. Hover a row for the arithmetic. Rows only one list holds are marked at the left."));
    box.appendChild(legend);
    var lost = {};
    [[state.a, inLeft], [state.b, inRight]].forEach(function (arm, side) {
      s.a[arm[0]].x.forEach(function (x) {    // [memory_id, grade, fate, rank, pool, seed]
        lost[x[0]] = lost[x[0]] || {grade: x[1], fates: [null, null]};
        lost[x[0]].fates[side] = x;
      });
    });
    var ids = Object.keys(lost).sort(function (p, q) {   // neither list first
      var np = !inLeft[p] && !inRight[p], nq = !inLeft[q] && !inRight[q];
      return np === nq ? (p < q ? -1 : 1) : (np ? -1 : 1);
    });
    var neither = ids.filter(function (id) { return !inLeft[id] && !inRight[id]; }).length;
    box.appendChild(el("h4", {text: "Relevant memories a list misses: " + neither +
      " that neither list shows, " + (ids.length - neither) + " that one list shows"}));
    if (!ids.length) { box.appendChild(el("p", {"class": "small", text: "None: both lists hold every relevant memory."})); return; }
    var table = el("table", {id: "xp-lost"}, [el("thead", {}, [el("tr", {}, [el("th", {text: "memory"}),
      el("th", {text: "label"}), el("th", {text: state.a}), el("th", {text: state.b})])])]);
    var body = el("tbody");
    function where(id, side, shownIn) {
      if (shownIn[id]) {
        var list = side ? right.l : left.l;
        for (var i = 0; i < list.length; i += 1) { if (list[i][1] === id) { return "shown at rank " + list[i][0]; } }
      }
      return fateText(lost[id].fates[side]);
    }
    ids.forEach(function (id) {
      var text = texts[id] || "";
      var both = !inLeft[id] && !inRight[id];
      body.appendChild(el("tr", {"data-memory": id, "data-neither": both ? "true" : "false",
        "class": both ? "" : "low"}, [
        el("td", {}, [el("code", {text: id}), el("small", {text: text.length > 90 ? text.slice(0, 89) + "…" : text})]),
        el("td", {text: label(lost[id].grade)}),
        el("td", {text: where(id, 0, inLeft)}), el("td", {text: where(id, 1, inRight)})]));
    });
    table.appendChild(body);
    box.appendChild(table);
    box.appendChild(el("p", {"class": "small", text: "Where each arm lost it: not in the pool (never a dense seed, not reached through the graph), not in the store yet (added after the search), or ranked below 10 of the pool's candidates (with the rank, and whether it was a seed). Italic rows: one of the two lists shows it."}));
  }

  // ---- controls -----------------------------------------------------------------------------
  function fill(select, chosen) {
    data.arms.forEach(function (arm) {
      var o = el("option", {value: arm, text: arm});
      if (arm === chosen) { o.selected = true; }
      select.appendChild(o);
    });
    select.addEventListener("change", function () {
      state[select.id === "xp-a" ? "a" : "b"] = select.value;
      tally(); renderList();
      if (state.open) { openQuestion(state.open, state.search); }
    });
  }
  fill($("xp-a"), state.a);
  fill($("xp-b"), state.b);
  $("xp-filter").addEventListener("input", function () {
    state.filter = $("xp-filter").value; state.page = 0; renderList();
  });
  $("xp-prev").addEventListener("click", function () { state.page -= 1; renderList(); });
  $("xp-next").addEventListener("click", function () { state.page += 1; renderList(); });
  Array.prototype.forEach.call(document.querySelectorAll("#xp-table th[data-key]"), function (th) {
    th.addEventListener("click", function () {
      var key = th.getAttribute("data-key");
      state.down = key === state.key ? !state.down : th.getAttribute("data-first") === "down";
      state.key = key; state.page = 0; renderList();
    });
  });
  tally();
  renderList();
}());
