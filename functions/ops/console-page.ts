/**
 * The operator console: one self-contained HTML page (no framework, no external asset), served at
 * GET /ferry/console by the local stack and the deployed HTTP API alike. It reads GET /ferry/ops
 * (relative to itself) every second with the token from its address (`#token=...`, kept in the
 * tab's sessionStorage) and redraws: operations in flight with a live progress bar, rate (from its
 * own successive samples, as `ferry watch`) and ETA; recent failures with their reasons; the volume
 * backends with their replication state and lag; the last audit.
 */
const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2530}
header{background:#1d2530;color:#fff;padding:10px 20px;display:flex;gap:16px;align-items:baseline}
header h1{font-size:18px;margin:0}header span{opacity:.8}
main{padding:12px 20px;display:grid;gap:16px}
section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:10px 14px}
h2{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:4px 8px;border-top:1px solid #eef0f3;vertical-align:top}
th{font-weight:600;color:#556;border-top:0}
.bar{width:180px;height:12px;background:#e6e9ee;border-radius:6px;overflow:hidden;display:inline-block;vertical-align:middle}
.bar>div{height:100%;background:#2f7de1;transition:width .4s}
.bar.unknown>div{width:30%;background:#9bb8e6;animation:slide 1.2s infinite alternate}
@keyframes slide{from{margin-left:0}to{margin-left:70%}}
.failed{color:#b3261e}.waiting{color:#8a5a00}.ok{color:#1e7b34}.muted{color:#778}.mono{font-family:ui-monospace,monospace;font-size:12px}
#error{color:#b3261e}
.nowrap,.percent,.rate,.eta{white-space:nowrap}
`;

const SCRIPT = `
const params = new URLSearchParams(location.hash.slice(1));
if (params.get('token')) sessionStorage.setItem('ferryToken', params.get('token'));
const token = sessionStorage.getItem('ferryToken') || '';
const interval = Number(params.get('interval')) || 1000;
const samples = new Map();
const esc = (s) => String(s ?? '').replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const bytes = (n) => { const u = ['B','KiB','MiB','GiB','TiB']; let i = 0; while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; } return i ? n.toFixed(1) + ' ' + u[i] : n + ' B'; };
const amount = (p) => !p || p.unit === 'percent' ? '' : (p.unit === 'bytes' ? bytes(p.done) + ' of ' + bytes(p.total) : p.done + ' of ' + p.total + ' ' + p.unit) + (p.filesTotal ? ', ' + p.filesDone + ' of ' + p.filesTotal + ' files' : '');
const dur = (s) => { s = Math.max(0, Math.round(s)); const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), x = String(s % 60).padStart(2, '0'); return h ? h + ':' + String(m).padStart(2, '0') + ':' + x : m + ':' + x; };
const ago = (t) => { const s = (Date.now() - (typeof t === 'number' ? t : Date.parse(t))) / 1000; return s < 90 ? Math.round(s) + ' s ago' : s < 5400 ? Math.round(s / 60) + ' min ago' : Math.round(s / 3600) + ' h ago'; };
/** Units per second over the last 10 s of this page's own samples (functions/ops/rate.ts does the same for ferry watch). */
function rateOf(v) {
  const p = v.progress; if (!p) return v.rate;
  const key = v.ref + ' ' + p.total + ' ' + p.unit;
  const list = samples.get(key) || []; list.push({ at: Date.now(), done: p.done });
  while (list.length > 1 && list[list.length - 1].at - list[0].at > 10000) list.shift();
  samples.set(key, list);
  if (list.length < 2) return v.rate;
  const s = (list[list.length - 1].at - list[0].at) / 1000;
  return s > 0 ? Math.max(0, (list[list.length - 1].done - list[0].done) / s) : v.rate;
}
function rateText(r, unit) { if (r == null || !unit) return ''; return unit === 'bytes' ? bytes(r) + '/s' : unit === 'percent' ? r.toFixed(1) + ' %/s' : r.toFixed(r >= 10 ? 0 : 1) + ' ' + unit + '/s'; }
function opRow(v) {
  const pct = v.fraction == null ? null : Math.floor(v.fraction * 100);
  const rate = v.status === 'running' ? rateOf(v) : null;
  const p = v.progress;
  const eta = v.status === 'running' && p && rate > 0 ? dur((p.total - p.done) / rate) : '';
  const bar = '<span class="bar' + (pct == null ? ' unknown' : '') + '"><div style="width:' + (pct == null ? 30 : pct) + '%"></div></span>';
  return '<tr data-ref="' + esc(v.ref) + '" data-status="' + esc(v.status) + '"><td>' + esc(v.kind) + '<div class="mono muted">' + esc(v.ref) + '</div></td><td>' + esc(v.resource) +
    '</td><td><span class="nowrap">' + bar + ' <b class="percent">' + (pct == null ? '?' : pct) + ' %</b></span><div class="muted">' + esc(amount(p)) + '</div></td><td class="rate">' + esc(rateText(rate, p && p.unit)) +
    '</td><td class="eta">' + esc(eta) + '</td><td class="step ' + (v.status === 'waiting' ? 'waiting' : '') + '">' + esc(v.step) + '</td></tr>';
}
function failRow(v) {
  return '<tr data-ref="' + esc(v.ref) + '"><td>' + esc(v.kind) + '<div class="mono muted">' + esc(v.ref) + '</div></td><td>' + esc(v.resource) + '</td><td class="failed reason">' + esc(v.status) + ': ' + esc(v.reason || v.step) + '</td><td class="muted">' + esc(ago(v.endedAt || v.updatedAt)) + '</td></tr>';
}
function backendRow(b) {
  const s = b.service || {};
  const lag = b.replicationLag ? b.replicationLag.targets.map((t) => esc(t.targetBackendId) + ': ' + (t.volumes === 0 ? 'no replicated volumes' : t.replicated + ' of ' + t.volumes + ' replicated, lag ' + (t.maxLagMs == null ? 'unknown' : dur(t.maxLagMs / 1000)))).join('<br>') + '<div class="muted">measured ' + esc(ago(b.replicationLag.at)) + '</div>' : (b.replicated ? '<span class="muted">not measured yet</span>' : '');
  const status = s.replicationStatus || '';
  return '<tr data-backend="' + esc(b.host) + '"><td>' + esc(b.host) + '</td><td class="' + (/error/.test(status) ? 'failed' : '') + '">' + esc(status) + (s.activeBackendId ? ' on ' + esc(s.activeBackendId) : '') + (s.frozen ? ', frozen' : '') + (s.disabled ? ', disabled' : '') + '</td><td>' + lag + '</td></tr>';
}
function render(data) {
  const snap = data.operations;
  document.getElementById('inflight').innerHTML = snap.inFlight.length ? snap.inFlight.map(opRow).join('') : '<tr><td class="muted" colspan="6">nothing in flight</td></tr>';
  document.getElementById('failures').innerHTML = snap.recentFailures.length ? snap.recentFailures.map(failRow).join('') : '<tr><td class="muted ok" colspan="4">no failure since ' + esc(snap.since) + '</td></tr>';
  document.getElementById('backends').innerHTML = data.backends.map(backendRow).join('');
  const a = data.lastAudit;
  document.getElementById('audit').innerHTML = a ? '<p><b class="' + (a.findingCount ? 'failed' : 'ok') + '">' + a.findingCount + ' finding' + (a.findingCount === 1 ? '' : 's') + '</b>, ' + a.repaired + ' repaired, ' + a.left + ' left, ' + esc(ago(a.at)) + ' <span class="muted">(checked ' + (Object.entries(a.checked).filter(([, n]) => n > 0).map(([k, n]) => n + ' ' + esc(k)).join(', ') || 'nothing') + ')</span></p>' +
    (a.findings.length ? '<table>' + a.findings.map((f) => '<tr><td class="mono">' + esc(f.kind) + '</td><td>' + esc(f.resource) + '</td><td>' + esc(f.detail) + '</td></tr>').join('') + '</table>' : '') : '<p class="muted">no audit has run yet</p>';
  document.getElementById('updated').textContent = 'updated ' + new Date(snap.at).toLocaleTimeString();
}
async function refresh() {
  try {
    const res = await fetch('ops' + location.search, { headers: { 'X-Auth-Token': token, Accept: 'application/json' } });
    const body = await res.json();
    if (!res.ok) throw new Error(res.status === 401 ? 'not signed in: open this page as console#token=YOUR_TOKEN' : JSON.stringify(body));
    document.getElementById('error').textContent = '';
    render(body);
  } catch (e) {
    document.getElementById('error').textContent = String(e.message || e);
  } finally {
    setTimeout(refresh, interval);
  }
}
refresh();
`;

export const CONSOLE_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Ferry console</title><style>${STYLE}</style></head>
<body><header><h1>Ferry</h1><span>operations console</span><span id="updated"></span><span id="error"></span></header>
<main>
<section><h2>In flight</h2><table><thead><tr><th>operation</th><th>resource</th><th>progress</th><th>rate</th><th>ETA</th><th>step</th></tr></thead><tbody id="inflight"></tbody></table></section>
<section><h2>Recent failures</h2><table><thead><tr><th>operation</th><th>resource</th><th>reason</th><th>when</th></tr></thead><tbody id="failures"></tbody></table></section>
<section><h2>Volume backends</h2><table><thead><tr><th>backend</th><th>replication</th><th>replicas and lag</th></tr></thead><tbody id="backends"></tbody></table></section>
<section><h2>Last audit</h2><div id="audit"></div></section>
</main><script>${SCRIPT}</script></body></html>`;
