/* memtrace attribution report: summary, sortable list of failed cases, one case's graph.
 *
 * Memory content is untrusted: every value reaches the page through textContent or a canvas
 * label, never innerHTML. Data comes from <script type="application/json"> blocks (parsed with
 * JSON.parse) or, for one case at a time, from cases/NNNN.js files that call
 * window.__memtraceCase(...) (script tags load from file://, fetch() does not).
 */
(function () {
  'use strict';

  // Above this many visible nodes dagre gets slow (seconds); cytoscape's breadthfirst layout
  // (also layered, sources to sinks) takes over.
  var DAGRE_MAX_NODES = 300;
  // Above this many elements, cheaper rendering while panning and zooming.
  var BIG_GRAPH = 800;
  // Node labels are drawn at FONT model pixels; a label is legible at MIN_LABEL_PX on screen.
  var FONT = 12;
  var MIN_LABEL_PX = 11;
  var READABLE_ZOOM = MIN_LABEL_PX / FONT;
  // The rows layout (execution order, wrapped like text) when the layered one cannot be read.
  var ROW_CELL_W = 200, ROW_CELL_H = 100;

  var report = readJson('memtrace-report');
  var state = {
    sortKey: 'key', // answer order: a case's #case=NNNN is its place in it
    sortDir: 1,
    filterText: '',
    facet: null, // {field, value}: a click on a summary table row
    rows: [],
    current: null, // the open case: {view, byId, collapsed, layout, selected}
    timings: {}
  };
  var cy = null;
  var caseCache = {};
  var pending = {};
  var timelineCache = {};

  // ---------------------------------------------------------------------------------------------
  // helpers

  function readJson(id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  function $(id) { return document.getElementById(id); }

  /* el('td', {className: 'num', text: '3'}, child, ...): strings become text nodes. */
  function el(tag, props) {
    var node = document.createElement(tag);
    props = props || {};
    Object.keys(props).forEach(function (key) {
      var value = props[key];
      if (value === undefined || value === null) return;
      if (key === 'text') node.textContent = String(value);
      else if (key === 'className') node.className = value;
      else if (key === 'title') node.title = String(value);
      else if (key === 'href') { if (safeHref(value)) node.href = value; }
      else if (key === 'onclick') node.addEventListener('click', value);
      else if (key.indexOf('data-') === 0 || key === 'tabindex' || key === 'type' || key === 'target' || key === 'rel') node.setAttribute(key, String(value));
    });
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child);
    }
    return node;
  }

  function safeHref(url) {
    return typeof url === 'string' && (/^https?:\/\//i.test(url) || url.charAt(0) === '#');
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  function pct(x) { return x === null || x === undefined ? 'n/a' : (100 * x).toFixed(1) + '%'; }

  function show(node, visible) { node.classList.toggle('hidden', !visible); }

  function errorBadge(type) {
    return type ? el('span', {className: 'etype ' + (/^[A-Za-z]+$/.test(type) ? type : ''), text: type})
      : el('span', {className: 'muted', text: 'no culprit'});
  }

  function valueText(value) {
    if (value === null || value === undefined) return '';
    return typeof value === 'string' ? value : JSON.stringify(value, null, 1);
  }

  // ---------------------------------------------------------------------------------------------
  // summary

  function renderSummary() {
    var s = report.summary;
    var meta = [];
    if (s.method) meta.push('method ' + s.method);
    if (report.generated) meta.push('generated ' + report.generated);
    if (report.sources && report.sources.length) meta.push('sources: ' + report.sources.join(', '));
    $('meta').textContent = meta.join(' · ');

    var stats = [
      ['cases', 'failed cases', s.cases],
      ['attributed', 'attributed', s.attributed],
      ['unattributed', 'without a culprit', s.unattributed],
      ['failed', 'failed to run', (s.failed || []).length, (s.failed || []).length > 0],
      ['resumed', 'resumed', s.resumed],
      ['records', 'span records read', s.records],
      ['skipped_records', 'records skipped', s.skipped_records, s.skipped_records > 0],
      ['listed', 'verdicts listed', report.cases.length]
    ];
    var rp = s.review_precision;
    if (rp && rp.reviews) {
      stats.push(['review_precision', 'verdict precision (' + rp.reviews + ' reviews' +
        (rp.unverified ? ', ' + rp.unverified + ' unverified' : '') +
        (typeof rp.mean_confidence === 'number' ? '; stated confidence ' + rp.mean_confidence.toFixed(2) : '') + ')',
        pct(rp.precision)]);
    }
    var refusedReviews = 0;
    Object.keys((rp && rp.refused) || {}).forEach(function (k) { refusedReviews += rp.refused[k]; });
    if (refusedReviews) {
      // Reviews the trust policy refused (docs/feedback.md): counted, never used.
      stats.push(['reviews_refused', 'reviews refused by the trust policy', refusedReviews, true]);
    }
    if (s.accuracy && s.accuracy.error_type_accuracy !== null) {
      stats.push(['error_type_accuracy', 'error type accuracy', pct(s.accuracy.error_type_accuracy)]);
    }
    var box = clear($('stats'));
    stats.forEach(function (item) {
      box.appendChild(el('div', {className: 'stat' + (item[3] ? ' bad' : ''), 'data-stat': item[0]},
        el('span', {className: 'value', text: item[2] === undefined ? '' : item[2]}),
        el('span', {className: 'name', text: item[1]})));
    });

    countTable($('by-error-type'), 'by_error_type', s.by_error_type || {}, 'error_type');
    countTable($('by-system'), 'by_system', s.by_system || {}, 'system');
    countTable($('by-op-name'), 'by_op_name', s.by_op_name || {}, 'op_name', 25);
    matrix($('matrix'), s.by_system_error || {});
    if (s.accuracy) accuracy($('accuracy'), s.accuracy);
    show($('accuracy-block'), !!s.accuracy);
    problems($('problems'), s);
  }

  function countTable(box, name, counts, field, limit) {
    var entries = Object.keys(counts).map(function (k) { return [k, counts[k]]; });
    entries.sort(function (a, b) { return b[1] - a[1] || (a[0] < b[0] ? -1 : 1); });
    var total = entries.reduce(function (t, e) { return t + e[1]; }, 0);
    var max = entries.length ? entries[0][1] : 1;
    var body = el('tbody');
    entries.slice(0, limit || entries.length).forEach(function (entry) {
      var row = el('tr', {'data-key': entry[0], title: 'show only these cases'},
        el('td', {}, field === 'error_type' ? errorBadge(entry[0]) : entry[0]),
        el('td', {className: 'num', text: entry[1]}),
        el('td', {}, bar(entry[1], max)));
      row.addEventListener('click', function () { setFacet(field, entry[0]); });
      body.appendChild(row);
    });
    var table = el('table', {className: 'counts', 'data-table': name},
      el('thead', {}, el('tr', {}, el('th', {text: field.replace('_', ' ')}), el('th', {className: 'num', text: 'cases'}), el('th'))),
      body);
    clear(box).appendChild(entries.length ? table : el('p', {className: 'muted', text: 'none'}));
    if (limit && entries.length > limit) box.appendChild(el('p', {className: 'muted', text: (entries.length - limit) + ' more'}));
    return total;
  }

  function bar(value, max) {
    var span = el('span', {className: 'bar'});
    span.style.width = Math.max(2, Math.round(120 * value / Math.max(max, 1))) + 'px';
    return span;
  }

  function matrix(box, bySystemError) {
    var systems = Object.keys(bySystemError).sort();
    var types = {};
    systems.forEach(function (s) { Object.keys(bySystemError[s]).forEach(function (t) { types[t] = true; }); });
    types = Object.keys(types).sort();
    clear(box);
    if (!systems.length) { box.appendChild(el('p', {className: 'muted', text: 'no attributed failures'})); return; }
    var head = el('tr', {}, el('th', {text: 'system'}));
    types.forEach(function (t) { head.appendChild(el('th', {className: 'num'}, errorBadge(t))); });
    head.appendChild(el('th', {className: 'num', text: 'total'}));
    var body = el('tbody');
    systems.forEach(function (s) {
      var row = el('tr', {'data-key': s}, el('td', {text: s}));
      var total = 0;
      types.forEach(function (t) {
        var n = bySystemError[s][t] || 0;
        total += n;
        row.appendChild(el('td', {className: 'num', text: n}));
      });
      row.appendChild(el('td', {className: 'num', text: total}));
      body.appendChild(row);
    });
    box.appendChild(el('table', {'data-table': 'by_system_error'}, el('thead', {}, head), body));
  }

  function accuracy(box, acc) {
    clear(box);
    box.appendChild(el('p', {},
      'error type: ', el('strong', {'data-acc': 'error_type', text: acc.error_type_correct + ' / ' + acc.compared + ' = ' + pct(acc.error_type_accuracy)}),
      ' · culprit op id: ', el('strong', {'data-acc': 'op_id', text: acc.op_id_correct + ' / ' + acc.op_id_compared + ' = ' + pct(acc.op_id_accuracy)}),
      ' · ' + acc.labelled + ' labels, ' + (acc.labelled_without_verdict || []).length + ' labelled cases without a verdict, ' +
      acc.unlabelled_verdicts + ' verdicts without a label'));
    var labelled = Object.keys(acc.confusion || {}).sort();
    var predicted = {};
    labelled.forEach(function (l) { Object.keys(acc.confusion[l]).forEach(function (p) { predicted[p] = true; }); });
    predicted = Object.keys(predicted).sort();
    if (!labelled.length) return;
    var head = el('tr', {}, el('th', {text: 'label ↓ / verdict →'}));
    predicted.forEach(function (p) { head.appendChild(el('th', {className: 'num'}, errorBadge(p === '(none)' ? null : p))); });
    var body = el('tbody');
    labelled.forEach(function (l) {
      var row = el('tr', {}, el('td', {}, errorBadge(l === '(none)' ? null : l)));
      predicted.forEach(function (p) {
        var n = acc.confusion[l][p] || 0;
        var cell = el('td', {className: 'num', text: n});
        if (n && l === p) cell.style.fontWeight = '700';
        row.appendChild(cell);
      });
      body.appendChild(row);
    });
    box.appendChild(el('table', {'data-table': 'confusion'}, el('thead', {}, head), body));
  }

  function problems(box, s) {
    clear(box);
    if ((s.failed || []).length) {
      box.appendChild(el('h2', {text: 'Cases that failed to run'}));
      var list = el('ul');
      s.failed.forEach(function (f) { list.appendChild(el('li', {}, el('span', {className: 'mono', text: f.case_id}), ': ' + f.error)); });
      box.appendChild(list);
    }
    if ((s.cases_not_in_traces || []).length) {
      box.appendChild(el('h2', {text: 'Cases not found in the traces'}));
      box.appendChild(el('p', {className: 'mono', text: s.cases_not_in_traces.join(', ')}));
    }
    if ((s.source_errors || []).length) {
      box.appendChild(el('h2', {text: 'Skipped input (first errors)'}));
      var errs = el('ul');
      s.source_errors.forEach(function (e) { errs.appendChild(el('li', {className: 'mono', text: e})); });
      box.appendChild(errs);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // case list

  var COLUMNS = [
    {key: 'key', title: '#', num: true},
    {key: 'question', title: 'question'},
    {key: 'prediction', title: 'answer given'},
    {key: 'expected', title: 'expected'},
    {key: 'error_type', title: 'verdict'},
    {key: 'op_name', title: 'culprit op'},
    {key: 'confidence', title: 'conf.', num: true},
    {key: 'case_id', title: 'case'},
    {key: 'store', title: 'store'},
    {key: 'reason_text', title: 'reason'}
  ];
  // What the search box looks in.
  var SEARCHED = ['case_id', 'question', 'prediction', 'expected', 'reason', 'reason_text', 'store', 'system', 'error_type', 'op_name', 'op_id'];
  var LABEL_COLUMNS = [
    {key: 'label_error_type', title: 'label'},
    {key: 'type_match', title: 'type ✓'},
    {key: 'op_match', title: 'op ✓'}
  ];

  function columns() { return report.summary.accuracy ? COLUMNS.concat(LABEL_COLUMNS) : COLUMNS; }

  function setFacet(field, value) {
    state.facet = {field: field, value: value};
    renderList();
    $('cases').scrollIntoView({block: 'start'});
  }

  function visibleRows() {
    var text = state.filterText.toLowerCase();
    var rows = report.cases.filter(function (r) {
      if (state.facet && String(r[state.facet.field] === null || r[state.facet.field] === undefined ? '?' : r[state.facet.field]) !== state.facet.value) return false;
      if (!text) return true;
      return SEARCHED.some(function (k) {
        var v = r[k];
        return v !== null && v !== undefined && String(v).toLowerCase().indexOf(text) >= 0;
      });
    });
    var key = state.sortKey, dir = state.sortDir;
    rows.sort(function (a, b) {
      var x = a[key], y = b[key];
      if (x === y) return a.key < b.key ? -1 : 1;
      if (x === null || x === undefined) return 1; // blanks last either way
      if (y === null || y === undefined) return -1;
      if (typeof x === 'number' && typeof y === 'number') return dir * (x - y);
      return dir * (String(x) < String(y) ? -1 : 1);
    });
    return rows;
  }

  function renderList() {
    var head = el('tr');
    columns().forEach(function (col) {
      var th = el('th', {className: col.num ? 'num' : '', 'data-sort': col.key, title: 'sort'}, col.title);
      if (state.sortKey === col.key) th.appendChild(el('span', {className: 'arrow', text: state.sortDir > 0 ? ' ▲' : ' ▼'}));
      th.addEventListener('click', function () {
        if (state.sortKey === col.key) state.sortDir = -state.sortDir;
        else { state.sortKey = col.key; state.sortDir = col.num ? -1 : 1; }
        renderList();
      });
      head.appendChild(th);
    });
    clear($('cases').tHead).appendChild(head);
    state.rows = visibleRows();
    var body = document.createElement('tbody');
    state.rows.forEach(function (r) {
      var tr = el('tr', {'data-key': r.key, 'data-case': r.case_id, tabindex: 0});
      columns().forEach(function (col) { tr.appendChild(cell(col, r)); });
      tr.addEventListener('click', function () { go(r.key); });
      tr.addEventListener('keydown', function (e) { if (e.key === 'Enter') go(r.key); });
      body.appendChild(tr);
    });
    var table = $('cases');
    table.replaceChild(body, table.tBodies[0]);
    var total = report.cases.length;
    $('list-count').textContent = state.rows.length === total ? total + ' cases' : state.rows.length + ' of ' + total + ' cases';
    var filtered = !!state.facet || !!state.filterText;
    show($('clear-filter'), filtered);
    $('clear-filter').textContent = state.facet ? 'clear filter (' + state.facet.field.replace('_', ' ') + ' = ' + state.facet.value + ')' : 'clear filter';
  }

  function cell(col, r) {
    var v = r[col.key];
    if (col.key === 'error_type' || col.key === 'label_error_type') return el('td', {}, col.key === 'label_error_type' && !r.label_error_type && r.type_match === null ? '' : errorBadge(v));
    if (col.key === 'type_match' || col.key === 'op_match') {
      return el('td', {}, v === null || v === undefined ? '' : el('span', {className: 'match ' + (v ? 'yes' : 'no'), text: v ? '✓' : '✗'}));
    }
    if (col.key === 'confidence') return el('td', {className: 'num', text: typeof v === 'number' ? v.toFixed(2) : ''});
    if (col.key === 'case_id') return el('td', {className: 'mono', title: v, 'data-case-id': v, text: r.case_short || v});
    if (col.key === 'key') return el('td', {className: 'num mono', text: v});
    if (col.key === 'op_name') return el('td', {className: 'mono', text: v === null ? '' : v});
    if (col.key === 'question' || col.key === 'prediction' || col.key === 'expected') {
      return el('td', {className: 'text ' + col.key, text: v === null || v === undefined ? (col.key === 'expected' ? '—' : 'not captured') : v});
    }
    if (col.key === 'reason_text') return el('td', {className: 'reason', title: r.reason || '', text: v || ''});
    return el('td', {className: (col.num ? 'num ' : ''), text: v === null || v === undefined ? '' : v});
  }

  // ---------------------------------------------------------------------------------------------
  // timeline of one store: writes, reads, answers (failed ones marked) in time order

  window.__memtraceTimeline = function (data) {
    timelineCache[data.key] = data;
    var callbacks = pending['t' + data.key] || [];
    delete pending['t' + data.key];
    callbacks.forEach(function (cb) { cb(data); });
  };

  function loadTimeline(key, cb) {
    if (timelineCache[key]) { cb(timelineCache[key]); return; }
    if (!/^[0-9]+$/.test(key)) { cb(null); return; }
    if (pending['t' + key]) { pending['t' + key].push(cb); return; }
    pending['t' + key] = [cb];
    var script = document.createElement('script');
    script.src = 'timelines/' + key + '.js';
    script.onerror = function () { delete pending['t' + key]; cb(null); };
    document.head.appendChild(script);
  }

  function renderTimelines() {
    var list = report.timelines || [];
    show($('timeline-block'), list.length > 0);
    if (!list.length) return;
    var select = clear($('timeline-store'));
    list.forEach(function (t) {
      var option = el('option', {text: (t.store || '(no store)') + ' · ' + t.failed + ' failed, ' + t.events + ' events'});
      option.value = t.key;
      select.appendChild(option);
    });
    select.addEventListener('change', function () { showTimeline(this.value); });
    showTimeline(list[0].key);
  }

  function showTimeline(key) {
    loadTimeline(key, function (t) {
      var table = $('timeline');
      clear(table.tHead).appendChild(el('tr', {},
        el('th', {text: 'time'}), el('th', {text: 'trace'}), el('th', {text: 'what'}),
        el('th', {text: 'op'}), el('th', {text: 'case'}), el('th', {text: 'wrote / answered'})));
      var body = document.createElement('tbody');
      if (!t) {
        body.appendChild(el('tr', {}, el('td', {className: 'muted', text: 'timelines/' + key + '.js is missing'})));
      } else {
        t.events.forEach(function (e) {
          var failed = e.key !== null && e.key !== undefined && e.role === 'answer';
          var tr = el('tr', {className: 'role-' + e.role + (failed ? ' failed' : ''), 'data-role': failed ? 'failed' : e.role},
            el('td', {className: 'mono', text: e.time ? e.time.replace('T', ' ').replace(/(\.\d{3})\d*Z$/, '$1Z') : ''}),
            el('td', {className: 'mono muted', text: e.trace}),
            el('td', {}, el('span', {className: 'role', text: failed ? 'failed answer' : e.role})),
            el('td', {className: 'mono', text: e.name + ' (' + e.kind + ')'}),
            el('td', {className: 'mono', text: e.case || ''}),
            el('td', {className: 'text', text: e.what || ''}));
          if (failed) {
            tr.title = 'open this case';
            tr.addEventListener('click', function () { go(e.key); });
          }
          body.appendChild(tr);
        });
        $('timeline-count').textContent = t.events.length + ' events' + (t.omitted ? ' (the newest; ' + t.omitted + ' older not shown)' : '');
      }
      table.replaceChild(body, table.tBodies[0]);
    });
  }

  // ---------------------------------------------------------------------------------------------
  // routing

  function go(key) { location.hash = 'case=' + encodeURIComponent(key); }

  function route() {
    var match = /^#case=(.+)$/.exec(location.hash);
    if (match) openCase(decodeURIComponent(match[1]));
    else showOverview();
  }

  function showOverview() {
    show($('overview'), true);
    show($('case'), false);
    if (cy) { cy.destroy(); cy = null; }
    state.current = null;
  }

  // ---------------------------------------------------------------------------------------------
  // case data

  window.__memtraceCase = function (data) {
    caseCache[data.key] = data;
    var callbacks = pending[data.key] || [];
    delete pending[data.key];
    callbacks.forEach(function (cb) { cb(data); });
  };

  function loadCase(key, cb) {
    if (caseCache[key]) { cb(caseCache[key]); return; }
    if (!/^[0-9]+$/.test(key)) { cb(null); return; }
    var inline = readJson('memtrace-case-' + key);
    if (inline) { caseCache[key] = inline; cb(inline); return; }
    if (pending[key]) { pending[key].push(cb); return; }
    pending[key] = [cb];
    var script = document.createElement('script');
    script.src = 'cases/' + key + '.js';
    script.onerror = function () { delete pending[key]; cb(null); };
    document.head.appendChild(script);
  }

  function openCase(key) {
    show($('overview'), false);
    show($('case'), true);
    var started = performance.now();
    document.documentElement.removeAttribute('data-case');
    loadCase(key, function (view) {
      if (!view) {
        $('case-title').textContent = 'case not found in this report';
        clear($('verdict'));
        clear($('graph')).appendChild(el('div', {className: 'message', text: 'No data for this case (cases/' + key + '.js is missing).'}));
        return;
      }
      renderCase(key, view);
      state.timings.openCaseMs = performance.now() - started;
      // For tests and automation: wait for html[data-case="KEY"] (no script evaluation needed).
      document.documentElement.setAttribute('data-case', key);
    });
  }

  // ---------------------------------------------------------------------------------------------
  // one case

  function renderCase(key, view) {
    var byId = {};
    view.nodes.forEach(function (n) { byId[n.id] = n; });
    var current = {key: key, view: view, byId: byId, collapsed: {}, layout: $('layout').value, selected: null};
    state.current = current;
    $('case-title').textContent = 'case ' + view.case_id;
    $('case-title').title = view.case_id;
    renderVerdict(view);
    var index = state.rows.map(function (r) { return r.key; }).indexOf(key);
    $('prev').disabled = index <= 0;
    $('next').disabled = index < 0 || index >= state.rows.length - 1;
    show($('back'), !report.single);
    show($('prev'), !report.single);
    show($('next'), !report.single);
    clear($('detail'));
    if (view.missing || !view.nodes.length) {
      if (cy) { cy.destroy(); cy = null; }
      clear($('stage-toggles'));
      clear($('graph')).appendChild(el('div', {className: 'message', text: view.missing || 'This case has no graph.'}));
      return;
    }
    // Open on the evidence path: what lies off it folds into one counted group per stage.
    view.stages.forEach(function (s) {
      if (view.nodes.some(function (n) { return n.stage === s && !n.core; })) current.collapsed[s] = true;
    });
    renderStageToggles();
    draw();
    var start = view.verdict && view.verdict.op_id && byId[view.verdict.op_id] ? view.verdict.op_id : null;
    // The drawing already shows the whole path legibly: select the culprit without moving.
    if (start) select(start, false);
    else $('detail').appendChild(el('p', {className: 'muted', text: 'Click a node to see its values, attributes and times.'}));
  }

  /* What a person asks first: the question, the expected and the given answer, the feedback. */
  function renderQuestion(box, q) {
    if (!q) return;
    var rows = [
      ['question', q.question || 'not captured'],
      ['expected', (q.expected || []).length ? q.expected.join(' | ') : 'not known'],
      ['answer given', q.prediction === null || q.prediction === undefined ? 'not captured' : q.prediction]
    ];
    var table = el('table', {className: 'qa'});
    rows.forEach(function (r) {
      table.appendChild(el('tr', {}, el('th', {text: r[0]}), el('td', {text: String(r[1])})));
    });
    (q.feedback || []).forEach(function (f, i, all) {
      var what = [f.label, f.score === null || f.score === undefined ? null : 'score ' + f.score].filter(Boolean).join(', ');
      var when = f.time_unix_nano ? new Date(f.time_unix_nano / 1e6).toISOString() : '';
      var who = (f.service ? ' from ' + f.service : '') + ' [' + (f.trust || 'unverified') + ']';
      var text = what + (f.name ? ' (' + f.name + ')' : '') + ' via ' + f.via + who + (when ? ' at ' + when : '') +
        (f.explanation ? ': “' + f.explanation + '”' : '') + (i === all.length - 1 && all.length > 1 ? ' (latest: decides)' : '');
      table.appendChild(el('tr', {}, el('th', {text: i === 0 ? 'flagged by' : ''}), el('td', {text: text})));
    });
    if (q.feedback_omitted) {
      table.appendChild(el('tr', {}, el('th', {text: ''}), el('td', {className: 'muted', text: q.feedback_omitted + ' earlier feedback not listed (the latest ' + q.feedback.length + ' are)'})));
    }
    if (!(q.feedback || []).length && q.source) {
      table.appendChild(el('tr', {}, el('th', {text: 'flagged by'}), el('td', {text: q.source})));
    }
    box.appendChild(table);
  }

  function renderVerdict(view) {
    var box = clear($('verdict'));
    renderQuestion(box, view.question);
    if (view.cut) box.appendChild(el('div', {className: 'small', text: 'Graph cut: ' + view.cut.reason}));
    var v = view.verdict;
    box.classList.toggle('none', !v || !v.error_type);
    if (!v) { box.appendChild(el('div', {className: 'headline', text: 'No verdict for this case.'})); return; }
    var culprit = v.op_id ? el('button', {className: 'linklike mono', text: (v.op_name || v.op_id) + ' (' + v.op_id + ')', onclick: function () { select(v.op_id, true); }}) : null;
    box.appendChild(el('div', {className: 'headline'}, errorBadge(v.error_type), ' ', v.error_type ? 'at ' : '(abstained)', culprit));
    box.appendChild(el('div', {className: 'reason', title: v.reason || '', text: v.reason_text || v.reason || ''}));
    var small = 'method ' + v.method + ' · confidence ' + (typeof v.confidence === 'number' ? v.confidence.toFixed(2) : '?');
    if (v.system) small += ' · system ' + v.system;
    if (v.store_id) small += ' · store ' + v.store_id;
    if ((v.evidence_refs || []).length) small += ' · evidence ' + v.evidence_refs.join(', ');
    box.appendChild(el('div', {className: 'small', text: small}));
    if (report.serve) box.appendChild(reviewBox(view));
    if ((v.unchecked || []).length) box.appendChild(el('div', {className: 'small', text: 'not checked: ' + v.unchecked.join('; ')}));
    if ((v.missing_traces || []).length) box.appendChild(el('div', {className: 'small', text: 'linked traces not loaded: ' + v.missing_traces.join(', ')}));
    if (view.label) {
      var l = view.label;
      var ok = v.error_type && v.error_type === l.error_type;
      box.appendChild(el('div', {className: 'small'},
        'label: ', errorBadge(l.error_type), l.op_name ? ' at ' + l.op_name : '', l.op_id ? ' (' + l.op_id + ')' : '',
        ' ', el('span', {className: 'match ' + (ok ? 'yes' : 'no'), text: ok ? '✓ error type matches' : '✗ error type differs'}),
        l.op_id ? el('span', {className: 'match ' + (l.op_id === v.op_id ? 'yes' : 'no'), text: l.op_id === v.op_id ? ' ✓ op matches' : ' ✗ op differs'}) : null,
        l.source ? ' · from ' + l.source : ''));
    }
  }

  // ---------------------------------------------------------------------------------------------
  // reviews (memtrace serve only): confirm, reject, or name the right op

  function token() {
    if (report.serve.token) return report.serve.token;
    var held = sessionStorage.getItem('memtrace-token');
    if (!held) { held = window.prompt('token for writes (memtrace serve --write-token)') || ''; sessionStorage.setItem('memtrace-token', held); }
    return held;
  }

  function post(path, body) {
    return fetch(path, {method: 'POST', headers: {'Content-Type': 'application/json', 'X-Memtrace-Token': token()}, body: JSON.stringify(body)})
      .then(function (r) { return r.json().then(function (j) { return {ok: r.ok, data: j}; }); });
  }

  function reviewBox(view) {
    var box = el('div', {className: 'review'});
    box.id = 'review';
    var v = view.verdict;
    var status = el('span', {className: 'muted'});
    status.id = 'review-status';
    if (!report.serve.reviews) { status.textContent = 'reviews are off: no OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)'; box.appendChild(status); return box; }
    if (!(report.serve.reviewable || {})[view.case_id]) {
      status.textContent = 'no verdict span for this case in the sources: send it (memtrace attribute --write-back), then reload';
      box.appendChild(status);
      return box;
    }
    function send(label) {
      var body = {case_id: view.case_id, label: label};
      if (label === 'other_op') {
        var chosen = state.current && state.current.selected;
        var n = chosen && state.current.byId[chosen];
        if (!n || n.type !== 'op' || chosen === v.op_id) { status.textContent = 'select the right op in the graph first'; return; }
        body.op_id = chosen;
      }
      status.textContent = 'sending…';
      post('api/review', body).then(function (r) {
        status.textContent = r.ok ? 'review sent (' + label + '): reload to count it' : 'not sent: ' + r.data.error;
        document.documentElement.setAttribute('data-review', r.ok ? 'sent' : 'failed');
      }, function (e) { status.textContent = 'not sent: ' + e; });
    }
    box.appendChild(el('span', {className: 'muted', text: 'review this verdict: '}));
    box.appendChild(el('button', {type: 'button', 'data-review': 'confirmed', text: '✓ confirm', onclick: function () { send('confirmed'); }}));
    box.appendChild(el('button', {type: 'button', 'data-review': 'rejected', text: '✗ reject', onclick: function () { send('rejected'); }}));
    box.appendChild(el('button', {type: 'button', 'data-review': 'other_op', text: 'the selected op is the culprit', onclick: function () { send('other_op'); }}));
    box.appendChild(status);
    return box;
  }

  function reload() {
    $('reload').disabled = true;
    post('api/reload', {}).then(function () { location.reload(); }, function () { $('reload').disabled = false; });
  }

  function renderStageToggles() {
    var current = state.current;
    var box = clear($('stage-toggles'));
    var counts = {};
    current.view.nodes.forEach(function (n) { counts[n.stage] = (counts[n.stage] || 0) + 1; });
    current.view.stages.forEach(function (stage) {
      var input = el('input', {type: 'checkbox', 'data-stage': stage});
      input.checked = !current.collapsed[stage];
      input.addEventListener('change', function () { setCollapsed(stage, !input.checked); });
      box.appendChild(el('label', {title: 'uncheck to fold this stage into one counted group (the evidence path and the answer stay)'}, input, ' ' + stage + ' (' + counts[stage] + ') '));
    });
  }

  /* Collapse or expand one stage, or all of them (stage null), and redraw once. */
  function setCollapsed(stage, collapsed) {
    var current = state.current;
    (stage === null ? current.view.stages : [stage]).forEach(function (s) {
      if (collapsed) current.collapsed[s] = true;
      else delete current.collapsed[s];
    });
    renderStageToggles();
    draw();
    if (current.selected && cy.getElementById(current.selected).length) cy.getElementById(current.selected).select();
  }

  /* The elements to draw: nodes of collapsed stages (except focus nodes) fold into one node
   * per stage, and their edges are redirected to it. */
  function elements() {
    var current = state.current;
    var view = current.view;
    var stageOf = {};
    var hidden = {};
    var nodes = [];
    // A record rewritten many times carries the evidence through a run of its versions: in a
    // collapsed stage the run shows its first and last version and one counted node between.
    var chains = {};
    var runs = {};
    view.nodes.forEach(function (n) {
      if (n.type !== 'variable' || !n.path || n.culprit || !current.collapsed[n.stage] || n.var_id === null || n.var_id === undefined) return;
      (runs[n.stage + '|' + n.var_id] = runs[n.stage + '|' + n.var_id] || []).push(n);
    });
    Object.keys(runs).forEach(function (k) {
      var run = runs[k];
      if (run.length <= 3) return;
      run.slice(1, -1).forEach(function (n) { chains[n.id] = {group: 'chain:' + k, first: run[0], last: run[run.length - 1], count: run.length - 2}; });
    });
    var chainNodes = {};
    view.nodes.forEach(function (n) {
      if (chains[n.id]) {
        var c = chains[n.id];
        stageOf[n.id] = c.group;
        if (!chainNodes[c.group]) {
          chainNodes[c.group] = true;
          nodes.push({group: 'nodes', data: {
            id: c.group, type: 'chain', order: n.order, stage: n.stage,
            label: c.count + ' more versions of\n' + c.first.var_id + '\n(click to expand)'
          }, classes: 'chain-group path'});
        }
        return;
      }
      if (current.collapsed[n.stage] && !n.core) {
        var group = 'stage:' + n.stage;
        stageOf[n.id] = group;
        if (!hidden[n.stage]) hidden[n.stage] = {count: 0, order: n.order};
        hidden[n.stage].count += 1;
        return;
      }
      var classes = [n.type];
      if (n.path) classes.push('path');
      if (n.culprit) classes.push('culprit');
      if (n.type === 'op' && n.case === view.case_id) classes.push('case');
      if (n.external) classes.push('external');
      if (n.deleted) classes.push('deleted');
      if (n.type === 'op' && n.status === 'ERROR') classes.push('error');
      var label = n.label;
      if (n.culprit && view.verdict) label = '✖ ' + (view.verdict.error_type || 'culprit') + '\n' + n.label;
      nodes.push({group: 'nodes', data: {id: n.id, label: label, type: n.type, order: n.order}, classes: classes.join(' ')});
    });
    Object.keys(hidden).forEach(function (stage) {
      nodes.push({group: 'nodes', data: {
        id: 'stage:' + stage, stage: stage, type: 'stage', order: hidden[stage].order,
        label: stage + ': ' + hidden[stage].count + ' more\n(click to expand)'
      }, classes: 'stage-group'});
    });
    nodes.sort(function (a, b) { return a.data.order - b.data.order; });
    var edges = [];
    var seen = {};
    view.edges.forEach(function (e, i) {
      var s = stageOf[e.source] || e.source;
      var t = stageOf[e.target] || e.target;
      if (s === t) return;
      var folded = s !== e.source || t !== e.target;
      var id = folded ? 'f|' + s + '|' + t : 'e' + i;
      if (seen[id]) return;
      seen[id] = true;
      var classes = [e.key];
      var a = current.byId[e.source], b = current.byId[e.target];
      if (!folded && a && b && a.path && b.path) classes.push('path');
      if (folded) classes.push('folded');
      edges.push({group: 'edges', data: {id: id, source: s, target: t}, classes: classes.join(' ')});
    });
    return nodes.concat(edges);
  }

  function graphStyle(big) {
    return [
      {selector: 'node', style: {
        'label': 'data(label)', 'font-size': FONT, 'text-wrap': 'wrap', 'text-max-width': 150,
        'text-valign': 'center', 'text-halign': 'center', 'width': 160, 'height': 42,
        'background-color': '#ffffff', 'border-width': 1, 'border-color': '#7f8c8d',
        'min-zoomed-font-size': big ? 9 : 6, 'color': '#1c2833'
      }},
      {selector: 'node.op', style: {'shape': 'round-rectangle', 'background-color': '#dfe9f3', 'font-weight': 'bold'}},
      {selector: 'node.variable', style: {'shape': 'ellipse'}},
      {selector: 'node.external', style: {'border-style': 'dashed'}},
      {selector: 'node.deleted', style: {'background-color': '#eeeeee', 'color': '#7f8c8d', 'border-style': 'dotted'}},
      {selector: 'node.case', style: {'border-width': 2, 'border-color': '#34495e'}},
      {selector: 'node.error', style: {'border-color': '#922b21', 'border-width': 2}},
      {selector: 'node.path', style: {'border-width': 3, 'border-color': '#e67e22', 'background-color': '#fdebd0'}},
      {selector: 'node.culprit', style: {
        'border-width': 6, 'border-color': '#c0392b', 'background-color': '#f5b7b1', 'height': 54,
        'font-size': FONT, 'color': '#641e16', 'z-index': 10
      }},
      {selector: 'node.stage-group', style: {
        'shape': 'round-rectangle', 'background-color': '#f2f3f4', 'border-style': 'dashed',
        'border-width': 2, 'color': '#566573', 'width': 180, 'height': 50
      }},
      {selector: 'node.chain-group', style: {
        'shape': 'round-rectangle', 'background-color': '#fdebd0', 'border-style': 'dashed',
        'border-width': 2, 'border-color': '#e67e22', 'width': 180, 'height': 54
      }},
      {selector: 'node:selected', style: {'overlay-color': '#2e86c1', 'overlay-opacity': 0.16, 'overlay-padding': 8}},
      // Big graphs get cytoscape's cheapest edges (no arrowheads: time runs left to right anyway)
      // and labels only once zoomed in far enough to read them.
      {selector: 'edge', style: {
        'curve-style': big ? 'haystack' : 'bezier', 'target-arrow-shape': big ? 'none' : 'triangle',
        'arrow-scale': 0.8, 'width': 1, 'line-color': '#aab7b8', 'target-arrow-color': '#aab7b8'
      }},
      {selector: 'edge.version', style: {'line-style': 'dotted'}},
      {selector: 'edge.folded', style: {'line-style': 'dashed', 'line-color': '#d5d8dc', 'target-arrow-color': '#d5d8dc'}},
      {selector: 'edge.path', style: {'width': 3, 'line-color': '#e67e22', 'target-arrow-color': '#e67e22', 'z-index': 5}}
    ];
  }

  function draw() {
    var current = state.current;
    var started = performance.now();
    var els = elements();
    var nodeCount = els.filter(function (e) { return e.group === 'nodes'; }).length;
    var big = els.length > BIG_GRAPH;
    if (cy) cy.destroy();
    cy = cytoscape({
      container: $('graph'),
      elements: els,
      style: graphStyle(big),
      layout: {name: 'preset'},
      minZoom: 0.02,
      maxZoom: 4,
      boxSelectionEnabled: false,
      selectionType: 'single',
      textureOnViewport: big,
      hideEdgesOnViewport: big,
      motionBlur: false,
      pixelRatio: big ? 1 : 'auto'
    });
    var layoutName = current.layout === 'auto' ? (nodeCount <= DAGRE_MAX_NODES ? 'dagre' : 'breadthfirst') : current.layout;
    var layoutStarted = performance.now();
    cy.layout(layoutOptions(layoutName)).run();
    // A layered drawing too wide to read once fitted: wrap the nodes in execution order instead
    // (left to right, then the next row right to left), so every label stays legible after fit.
    if (current.layout === 'auto' && cy.zoom() < READABLE_ZOOM && nodeCount <= rowsCapacity()) {
      layoutName = 'rows';
      cy.layout(rowsLayout()).run();
    }
    state.timings.layoutMs = performance.now() - layoutStarted;
    state.timings.layout = layoutName;
    state.timings.drawMs = performance.now() - started;
    state.timings.visibleNodes = nodeCount;
    state.draws = (state.draws || 0) + 1;
    document.documentElement.setAttribute('data-draws', String(state.draws));
    cy.on('tap', 'node', function (evt) {
      var node = evt.target;
      if (node.data('type') === 'stage' || node.data('type') === 'chain') setCollapsed(node.data('stage'), false);
      else select(node.id(), false);
    });
    var hiddenCount = current.view.nodes.length - els.filter(function (e) { return e.group === 'nodes' && e.data.type !== 'stage'; }).length;
    $('graph-status').textContent = nodeCount + ' nodes shown' + (hiddenCount ? ', ' + hiddenCount + ' in collapsed stages' : '') +
      ' · layout ' + layoutName + ' ' + Math.round(state.timings.layoutMs) + ' ms' +
      (current.view.cut ? ' · CUT: ' + current.view.cut.reason : '');
    document.documentElement.setAttribute('data-layout', layoutName);
    renderPathList();
  }

  /* How many nodes the rows layout can show at a legible zoom in this container. */
  function rowsCapacity() {
    var box = $('graph');
    var cols = Math.max(1, Math.floor((box.clientWidth - 40) / (ROW_CELL_W * READABLE_ZOOM)));
    var rows = Math.max(1, Math.floor((box.clientHeight - 40) / (ROW_CELL_H * READABLE_ZOOM)));
    return cols * rows;
  }

  function rowsLayout() {
    var box = $('graph');
    var nodes = cy.nodes().sort(byOrder);
    var count = nodes.length;
    // At zoom 1 a cell is ROW_CELL_W x ROW_CELL_H screen pixels: as many columns as fit, and
    // no more rows than needed.
    var cols = Math.max(1, Math.min(count, Math.floor((box.clientWidth - 40) / ROW_CELL_W)));
    var positions = {};
    nodes.forEach(function (node, i) {
      var row = Math.floor(i / cols), col = i % cols;
      if (row % 2 === 1) col = cols - 1 - col; // snake: consecutive nodes stay side by side
      positions[node.id()] = {x: col * ROW_CELL_W, y: row * ROW_CELL_H};
    });
    return {name: 'preset', positions: function (node) { return positions[node.id()]; }, fit: true, padding: 20, animate: false};
  }

  /* Where even the rows layout cannot show the path legibly, the path is also a list. */
  function renderPathList() {
    var current = state.current;
    var list = clear($('path-list'));
    var legible = cy.zoom() >= READABLE_ZOOM;
    show(list, !legible);
    document.documentElement.setAttribute('data-path-list', legible ? 'false' : 'true');
    if (legible) return;
    current.view.nodes.forEach(function (n) {
      if (!n.path && !n.culprit) return;
      var text = (n.culprit ? '✖ ' : '') + n.label.replace('\n', ' · ');
      list.appendChild(el('li', {'data-ref': n.id, className: n.culprit ? 'culprit' : ''},
        el('button', {className: 'linklike', text: text, onclick: function () { select(n.id, true); }})));
    });
  }

  function byOrder(a, b) {
    // cytoscape's breadthfirst can hand over emptied slots (null) when it moves nodes down.
    var x = a ? a.data('order') : Infinity, y = b ? b.data('order') : Infinity;
    return x === y ? 0 : (x < y ? -1 : 1);
  }

  function layoutOptions(name) {
    if (name === 'dagre') {
      return {name: 'dagre', rankDir: 'LR', nodeSep: 14, rankSep: 70, edgeSep: 8, fit: true, padding: 20, animate: false};
    }
    // Depth runs down in breadthfirst; transposed so that, as with dagre, time runs left to right.
    return {
      name: 'breadthfirst', directed: true, maximal: true, roots: cy.nodes().roots(), depthSort: byOrder,
      spacingFactor: 1, avoidOverlap: true, fit: true, padding: 20, animate: false,
      transform: function (node, pos) { return {x: pos.y * 2.2, y: pos.x / 2.2}; }
    };
  }

  function select(id, center) {
    var current = state.current;
    var n = current.byId[id];
    if (!n) return;
    if (!cy.getElementById(id).length && current.collapsed[n.stage]) setCollapsed(n.stage, false);
    current.selected = id;
    var node = cy.getElementById(id);
    cy.$(':selected').unselect();
    node.select();
    if (center) {
      cy.zoom(Math.max(cy.zoom(), 0.85));
      cy.center(node);
    }
    renderDetail(n);
  }

  // ---------------------------------------------------------------------------------------------
  // detail panel

  function refLink(ref) {
    return el('button', {className: 'linklike mono', text: ref, onclick: function () { select(ref, true); }});
  }

  function dl(pairs) {
    var list = el('dl');
    pairs.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || p[1] === '') return;
      list.appendChild(el('dt', {text: p[0]}));
      list.appendChild(el('dd', {}, typeof p[1] === 'object' && p[1].nodeType ? p[1] : String(p[1])));
    });
    return list;
  }

  function refList(refs, seen) {
    var current = state.current;
    var list = el('ul', {className: 'refs'});
    refs.forEach(function (ref) {
      var v = current.byId[ref] || {};
      var item = el('li', {'data-ref': ref}, refLink(ref));
      if (v.category) item.appendChild(el('span', {className: 'badge', text: v.category}));
      if (v.path) item.appendChild(el('span', {className: 'badge path', text: 'evidence path'}));
      if (v.deleted) item.appendChild(el('span', {className: 'badge', text: 'deleted'}));
      var shown = seen && Object.prototype.hasOwnProperty.call(seen, ref) ? seen[ref] : v.value;
      if (shown !== null && shown !== undefined) item.appendChild(el('pre', {text: valueText(shown)}));
      else if (v.digest) item.appendChild(el('div', {className: 'mono muted', text: 'digest ' + v.digest}));
      list.appendChild(item);
    });
    if (!refs.length) list.appendChild(el('li', {className: 'muted', text: 'none'}));
    return list;
  }

  function renderDetail(n) {
    var box = clear($('detail'));
    box.setAttribute('data-node', n.id);
    var view = state.current.view;
    var badges = el('div');
    if (n.culprit) badges.appendChild(el('span', {className: 'badge culprit', text: 'culprit'}));
    if (n.path) badges.appendChild(el('span', {className: 'badge path', text: 'evidence path'}));
    badges.appendChild(el('span', {className: 'badge', text: n.stage}));
    if (n.type === 'op') {
      box.appendChild(el('h3', {text: n.name}));
      badges.appendChild(el('span', {className: 'badge', text: n.kind}));
      if (n.status) badges.appendChild(el('span', {className: 'badge', text: 'status ' + n.status}));
      box.appendChild(badges);
      if (n.culprit && view.verdict) {
        box.appendChild(el('div', {className: 'culprit-box'},
          errorBadge(view.verdict.error_type), ' ', el('span', {text: view.verdict.reason || ''})));
      }
      var links = el('div', {className: 'links'});
      if (n.links && n.links.jaeger) links.appendChild(el('a', {href: n.links.jaeger, target: '_blank', rel: 'noopener noreferrer', text: 'span in Jaeger ↗'}));
      if (n.links && n.links.tempo) links.appendChild(el('a', {href: n.links.tempo, target: '_blank', rel: 'noopener noreferrer', text: 'span in Tempo ↗'}));
      if (links.childNodes.length) box.appendChild(links);
      box.appendChild(el('h4', {text: 'Inputs (' + n.inputs.length + ')'}));
      box.appendChild(refList(n.inputs, n.seen));
      box.appendChild(el('h4', {text: 'Outputs (' + n.outputs.length + ')'}));
      box.appendChild(refList(n.outputs, n.seen));
      box.appendChild(el('h4', {text: 'Span'}));
      box.appendChild(dl([
        ['span id', n.span_id], ['trace id', n.trace_id], ['parent', n.parent_span_id],
        ['start', n.start], ['end', n.end],
        ['duration', typeof n.duration_ms === 'number' ? n.duration_ms.toFixed(3) + ' ms' : null],
        ['span name', n.span_name], ['system', n.system], ['store', n.store], ['case', n.case],
        ['service', n.service], ['prompt', n.prompt_ref], ['judge verdict', n.judge_verdict]
      ]));
      var attrs = Object.keys(n.attributes || {}).sort();
      box.appendChild(el('h4', {text: 'Attributes (' + attrs.length + ')'}));
      box.appendChild(dl(attrs.map(function (k) { return [k, valueText(n.attributes[k])]; })));
    } else {
      box.appendChild(el('h3', {text: n.id}));
      if (n.category) badges.appendChild(el('span', {className: 'badge', text: n.category}));
      if (n.external) badges.appendChild(el('span', {className: 'badge', text: 'external'}));
      if (n.deleted) badges.appendChild(el('span', {className: 'badge', text: 'deleted'}));
      if (n.truncated) badges.appendChild(el('span', {className: 'badge', text: 'truncated at capture'}));
      box.appendChild(badges);
      box.appendChild(el('h4', {text: 'Value'}));
      if (n.value !== null && n.value !== undefined) {
        box.appendChild(el('pre', {className: 'value', text: valueText(n.value)}));
        if (n.value_cut) box.appendChild(el('div', {className: 'muted', text: 'cut short in this report; the trace holds the captured value'}));
      } else {
        box.appendChild(el('div', {className: 'muted', text: 'not captured'}));
      }
      box.appendChild(dl([
        ['digest', n.digest], ['variable', n.var_id], ['version', n.version], ['time', n.time],
        ['written by', n.writer ? refLink(n.writer) : 'nothing loaded (external)']
      ]));
      if (n.meta !== null && n.meta !== undefined) {
        box.appendChild(el('h4', {text: 'Meta'}));
        box.appendChild(el('pre', {text: valueText(n.meta)}));
      }
      box.appendChild(el('h4', {text: 'Read by (' + n.readers.length + ')'}));
      var readers = el('ul', {className: 'refs'});
      n.readers.forEach(function (op) {
        var o = state.current.byId[op] || {};
        readers.appendChild(el('li', {}, refLink(op), ' ', el('span', {className: 'muted', text: (o.name || '') + (o.kind ? ' (' + o.kind + ')' : '')})));
      });
      box.appendChild(readers);
    }
    var anomalies = (view.anomalies || []).filter(function (a) {
      return a.ref === n.id || (a.span_ids || []).indexOf(n.id) >= 0;
    });
    if (anomalies.length) {
      box.appendChild(el('h4', {text: 'Anomalies'}));
      var list = el('ul');
      anomalies.forEach(function (a) { list.appendChild(el('li', {text: a.type + ': ' + (a.detail || '')})); });
      box.appendChild(list);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // wiring

  function find(text) {
    var current = state.current;
    if (!current || !text) return;
    text = text.toLowerCase();
    var hit = current.view.nodes.filter(function (n) {
      return n.id.toLowerCase().indexOf(text) >= 0 || String(n.name || '').toLowerCase().indexOf(text) >= 0;
    })[0];
    if (hit) select(hit.id, true);
    else $('graph-status').textContent = 'no node matches ' + JSON.stringify(text);
  }

  function wire() {
    $('filter').addEventListener('input', function () { state.filterText = this.value; renderList(); });
    $('clear-filter').addEventListener('click', function () {
      state.facet = null; state.filterText = ''; $('filter').value = ''; renderList();
    });
    $('back').addEventListener('click', function () { location.hash = ''; });
    $('prev').addEventListener('click', function () { step(-1); });
    $('next').addEventListener('click', function () { step(1); });
    $('fit').addEventListener('click', function () { if (cy) { cy.fit(undefined, 20); renderPathList(); } });
    $('expand-all').addEventListener('click', function () { if (state.current) setCollapsed(null, false); });
    $('collapse-all').addEventListener('click', function () { if (state.current) setCollapsed(null, true); });
    $('to-culprit').addEventListener('click', function () {
      var v = state.current && state.current.view.verdict;
      if (v && v.op_id) select(v.op_id, true);
    });
    $('layout').addEventListener('change', function () {
      if (state.current) { state.current.layout = this.value; draw(); }
    });
    $('find').addEventListener('keydown', function (e) { if (e.key === 'Enter') find(this.value); });
    if (report.serve) { show($('reload'), true); $('reload').addEventListener('click', reload); }
    window.addEventListener('hashchange', route);
  }

  function step(delta) {
    if (!state.current) return;
    var keys = state.rows.map(function (r) { return r.key; });
    var index = keys.indexOf(state.current.key);
    if (index >= 0 && keys[index + delta] !== undefined) go(keys[index + delta]);
  }

  function start() {
    var started = performance.now();
    if (typeof cytoscapeDagre !== 'undefined') cytoscape.use(cytoscapeDagre);
    renderSummary();
    renderList();
    if (!report.single) renderTimelines();
    wire();
    if (report.single && report.cases.length) {
      openCase(report.cases[0].key);
    } else {
      route();
    }
    state.timings.startMs = performance.now() - started;
    document.documentElement.setAttribute('data-ready', 'true');
  }

  // For people poking at a report in the console, and for the browser tests.
  window.memtraceReport = {
    state: state,
    timings: state.timings,
    get cy() { return cy; },
    openCase: go,
    select: function (id) { select(id, true); },
    setCollapsed: setCollapsed
  };

  start();
})();
