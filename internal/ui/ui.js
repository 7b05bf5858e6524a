// converge ui: the page is rendered by the server; this script only swaps in
// each new rendering the server pushes (Server-Sent Events) and lets a
// person fold subtrees. No polling, no framework, no build step.
(function () {
  'use strict';
  var token = new URLSearchParams(location.search).get('token') || '';
  var graph = document.getElementById('graph');
  var live = document.getElementById('live');
  var folded = {}; // data-key of folded nodes, kept across updates

  function setState(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }

  function applyFolds() {
    var nodes = graph.querySelectorAll('li.node');
    for (var i = 0; i < nodes.length; i++) {
      nodes[i].classList.toggle('folded', !!folded[nodes[i].dataset.key]);
    }
  }

  graph.addEventListener('click', function (ev) {
    var row = ev.target.closest('.row');
    if (!row) { return; }
    var li = row.parentElement;
    if (!li.querySelector('ul')) { return; }
    var k = li.dataset.key;
    if (folded[k]) { delete folded[k]; } else { folded[k] = true; }
    applyFolds();
  });

  var es = new EventSource('events?token=' + encodeURIComponent(token));
  es.addEventListener('open', function () { setState('live', 'live'); });
  es.addEventListener('error', function () { setState('down', 'disconnected, retrying…'); });
  es.addEventListener('graph', function (ev) {
    setState('live', 'live');
    if (graph.dataset.version === ev.lastEventId) { return; }
    graph.innerHTML = ev.data;
    graph.dataset.version = ev.lastEventId;
    live.dataset.updated = new Date().toISOString();
    applyFolds();
  });
})();
