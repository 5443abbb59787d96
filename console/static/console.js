// simba console: live updates by server-sent events, relative times, and
// operations behind a confirmation. No inline script, no external code:
// the Content-Security-Policy allows this file only.
'use strict';
(() => {
  const body = document.body;
  const main = document.getElementById('view');
  const live = document.getElementById('live');
  const tokenKey = 'simba-console-token';
  const operatorKey = 'simba-console-operator';

  // Relative times: "12s ago", "in 3s".
  const fmt = (ms) => {
    const s = Math.round(Math.abs(ms) / 1000);
    let t;
    if (s < 1) return 'now';
    if (s < 90) t = s + 's';
    else if (s < 5400) t = Math.round(s / 60) + 'm';
    else if (s < 129600) t = Math.round(s / 3600) + 'h';
    else t = Math.round(s / 86400) + 'd';
    return ms < 0 ? 'in ' + t : t + ' ago';
  };
  const refreshTimes = () => {
    const now = Date.now();
    for (const el of main.querySelectorAll('time[data-rel]')) {
      const at = Date.parse(el.getAttribute('datetime'));
      if (!Number.isNaN(at)) el.textContent = fmt(now - at);
    }
  };
  refreshTimes();
  setInterval(refreshTimes, 1000);

  // Live updates: the server sends the page's main part when it changes,
  // whether the backend can be read ("backend") when that changes, and a
  // "ping" every 10s. The indicator says "live" only while the stream is
  // open and the backend's last read worked.
  const clock = (iso) => {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return '?';
    return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false, timeZoneName: 'short' });
  };
  const setLive = (state, text, title) => {
    live.dataset.state = state;
    live.textContent = text || state;
    live.title = title || 'live updates';
  };
  const silence = 35000; // three pings missed: the stream is dead
  let es = null;
  let heard = 0;
  let retry = 0;
  const connect = () => {
    const stream = new EventSource('/events?view=' + encodeURIComponent(body.dataset.view));
    es = stream;
    const mine = (f) => (ev) => {
      if (es !== stream) return; // a stream given up on
      heard = Date.now();
      f(ev);
    };
    stream.addEventListener('open', mine(() => setLive('waiting', 'connected, reading the backend')));
    stream.addEventListener('ping', mine(() => {}));
    stream.addEventListener('backend', mine((ev) => {
      let b;
      try { b = JSON.parse(ev.data); } catch (err) { return; }
      const name = b.backend ? 'backend (' + b.backend + ')' : 'backend';
      if (b.ok) {
        setLive('live', 'live', name + ' reachable since ' + clock(b.since));
      } else {
        setLive('unreachable', 'backend unreachable since ' + clock(b.since), name + ': ' + (b.error || 'unreachable') + '; retrying');
      }
      live.dataset.since = b.since;
    }));
    stream.addEventListener('view', mine((ev) => {
      main.innerHTML = ev.data; // rendered and escaped by the server's templates
      refreshTimes();
      body.dataset.updates = String(Number(body.dataset.updates || 0) + 1);
    }));
    stream.addEventListener('error', () => {
      if (es !== stream) return;
      if (stream.readyState === EventSource.CLOSED) {
        setLive('offline', 'console unreachable, retrying');
        clearTimeout(retry);
        retry = setTimeout(connect, 3000);
      } else {
        setLive('reconnecting', 'console unreachable, reconnecting');
      }
    });
  };
  // A stream that went silent (the console stopped, a connection cut without
  // a word) is given up on and opened anew.
  setInterval(() => {
    if (es && es.readyState === EventSource.OPEN && Date.now() - heard > silence) {
      es.close();
      setLive('reconnecting', 'no word from the console, reconnecting');
      connect();
    }
  }, 5000);
  connect();

  // The audit page's filter: the policy allows no form submission, so the
  // script goes to the filtered page itself.
  const filter = document.getElementById('audit-filter');
  if (filter) {
    filter.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const name = filter.elements.name.value.trim();
      location.assign('/audit' + (name ? '?name=' + encodeURIComponent(name) : ''));
    });
  }

  // Notices.
  const notice = document.getElementById('notice');
  let noticeTimer = 0;
  const say = (text, kind) => {
    notice.textContent = text;
    notice.className = kind;
    notice.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { notice.hidden = true; }, 8000);
  };

  // Operations, behind a confirmation.
  const dlg = document.getElementById('confirm');
  if (!dlg) return; // read-only
  const $ = (id) => document.getElementById(id);
  const title = $('confirm-title'), text = $('confirm-text'), explain = $('confirm-explain');
  const reasonField = $('reason-field'), reason = $('reason');
  const argsField = $('args-field'), argsInput = $('args');
  // A trigger's arguments: key=value, one a line; blank lines are
  // skipped, the rest sent as they are, for the console to check.
  const argLines = () => argsInput.value.split('\n').map((l) => l.replace(/\r$/, '')).filter((l) => l.trim() !== '');
  const tokenField = $('token-field'), tokenInput = $('token');
  const operatorField = $('operator-field'), operatorInput = $('operator');
  const error = $('confirm-error'), ok = $('confirm-ok'), cancel = $('confirm-cancel');
  const tokenButton = $('token-button');
  const stored = () => sessionStorage.getItem(tokenKey) || '';
  const showTokenState = () => {
    tokenButton.textContent = stored() ? 'token ✓' : 'set token';
  };
  showTokenState();
  let pending = null;

  const open = (p) => {
    pending = p;
    error.hidden = true;
    reason.value = '';
    argsInput.value = '';
    tokenInput.value = '';
    operatorInput.value = sessionStorage.getItem(operatorKey) || '';
    if (p) {
      title.textContent = p.label + ' ' + p.what + '?';
      text.textContent = p.token ? 'Only the term with token ' + p.token + ': if it is over already, nothing happens.' : '';
      text.hidden = !p.token;
      explain.textContent = p.explain;
      ok.textContent = p.label;
      ok.className = 'danger';
      reasonField.hidden = false;
      argsField.hidden = p.op !== 'trigger';
      tokenField.hidden = stored() !== '';
      operatorField.hidden = tokenField.hidden;
    } else {
      title.textContent = 'Operations token';
      text.hidden = false;
      text.textContent = stored() ? 'A token is kept for this tab. Enter another, or save an empty field to forget it.' : 'Enter the token the console was started with.';
      explain.textContent = 'It is kept in this tab only (sessionStorage) and sent with each operation.';
      ok.textContent = 'Save';
      ok.className = '';
      reasonField.hidden = true;
      argsField.hidden = true;
      tokenField.hidden = false;
      operatorField.hidden = false;
    }
    dlg.showModal();
    (tokenField.hidden ? (reasonField.hidden ? ok : reason) : tokenInput).focus();
  };
  const fail = (msg) => {
    error.textContent = msg;
    error.hidden = false;
  };

  document.addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-op]');
    if (!b) return;
    open({
      op: b.dataset.op,
      target: b.dataset.target,
      token: b.dataset.token ? Number(b.dataset.token) : 0,
      what: b.dataset.what,
      label: b.dataset.label,
      explain: b.dataset.explain,
    });
  });
  tokenButton.addEventListener('click', () => open(null));
  cancel.addEventListener('click', () => dlg.close());
  dlg.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && ev.target.tagName === 'INPUT') {
      ev.preventDefault();
      ok.click();
    }
  });

  ok.addEventListener('click', async () => {
    const typed = tokenInput.value.trim();
    if (!operatorField.hidden) {
      const who = operatorInput.value.trim();
      if (who) sessionStorage.setItem(operatorKey, who);
      else sessionStorage.removeItem(operatorKey);
    }
    if (!pending) {
      if (typed) sessionStorage.setItem(tokenKey, typed);
      else sessionStorage.removeItem(tokenKey);
      showTokenState();
      dlg.close();
      say(typed ? 'Token kept for this tab.' : 'Token forgotten.', 'ok');
      return;
    }
    if (typed) sessionStorage.setItem(tokenKey, typed);
    const token = stored();
    if (!token) {
      tokenField.hidden = false;
      operatorField.hidden = false;
      fail('Enter the operations token.');
      tokenInput.focus();
      return;
    }
    const p = pending;
    ok.disabled = true;
    try {
      const headers = { 'Content-Type': 'application/json', 'X-Simba-Token': token };
      const who = sessionStorage.getItem(operatorKey);
      if (who) headers['X-Simba-Operator'] = who;
      const res = await fetch('/api/ops/' + encodeURIComponent(p.op), {
        method: 'POST',
        headers,
        body: JSON.stringify({ target: p.target, token: p.token, reason: reason.value.trim(), args: p.op === 'trigger' ? argLines() : undefined }),
        credentials: 'same-origin',
        cache: 'no-store',
      });
      const data = await res.json().catch(() => ({}));
      if (res.status === 401) {
        sessionStorage.removeItem(tokenKey);
        showTokenState();
        tokenField.hidden = false;
        operatorField.hidden = false;
        tokenInput.value = '';
        tokenInput.focus();
        fail('Refused: ' + (data.error || 'wrong token') + '.');
        return;
      }
      if (!res.ok) {
        fail('Refused: ' + (data.error || res.status + ' ' + res.statusText) + '.');
        return;
      }
      showTokenState();
      dlg.close();
      say(data.message || 'Done.', 'ok');
    } catch (err) {
      fail('The console did not answer: ' + err.message);
    } finally {
      ok.disabled = false;
    }
  });
})();
