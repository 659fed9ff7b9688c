// The gz-ia web view: the sessions list, a session's tree and timeline, live through /live (SSE).
// Plain JavaScript, no build step. Everything it reads is windowed: a page of sessions, a window of
// one session's newest events (older ones on demand), and what the live stream adds.
"use strict";

const params = new URLSearchParams(location.search);
const ROOT = params.get("root") || "";
const PAGE = 100;
const WINDOW = 500;
// The timeline is a virtual list: every span held is data, and only the rows in or near the view
// are in the page, so what a frame costs the browser does not grow with the session.
const MAX_SPANS = 20000; // spans held; past it, live spans push out the oldest
const ROW_HEIGHT = 28; // px, each timeline row's height in the stylesheet: the list's unit
const OVERSCAN = 3; // rows drawn above and below the visible ones, ready for a scroll
const MAX_PENDING = 2000; // live events queued for the next frame before they are folded without one

const $ = (selector) => document.querySelector(selector);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
};

function api(path, query = {}) {
  const search = new URLSearchParams(ROOT ? { root: ROOT } : {});
  for (const [key, value] of Object.entries(query)) {
    if (Array.isArray(value)) value.forEach((item) => search.append(key, item));
    else if (value !== undefined && value !== null && value !== "") search.set(key, value);
  }
  return fetch(`api/${path}?${search}`, { credentials: "same-origin" }).then(async (response) => {
    const body = await response.json().catch(() => ({}));
    if (response.status === 403) keyRefused(body.error);
    if (!response.ok) throw Object.assign(new Error(body.error || response.statusText), { status: response.status });
    return body;
  });
}

function liveUrl(query = {}) {
  const search = new URLSearchParams(ROOT ? { root: ROOT } : {});
  for (const [key, value] of Object.entries(query)) if (value) search.set(key, value);
  return `live?${search}`;
}

const time = (text) => (text ? new Date(text) : null);
// Dates read one way only, whatever the browser's locale: 2026-12-06 14:03:21, in the browser's
// time zone, which the header names. Built by hand: cheap enough for a row per event at a thousand
// events a second (a formatter per call is not).
const pad = (number, width = 2) => String(number).padStart(width, "0");
const clock = (date) =>
  date ? `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}` : "";
const day = (date) =>
  date
    ? `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`
    : "";
function zoneName() {
  const minutes = -new Date().getTimezoneOffset();
  const offset = `UTC${minutes < 0 ? "−" : "+"}${pad(Math.floor(Math.abs(minutes) / 60))}:${pad(Math.abs(minutes) % 60)}`;
  const name = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return name && name !== "UTC" ? `${name} (${offset})` : offset;
}
const dollars = (cost) => (cost === null || cost === undefined ? "" : "$" + cost.toFixed(cost >= 1 ? 2 : 4));
const tokenCount = (tokens) => (tokens === null || tokens === undefined ? "" : tokens.toLocaleString("en-US"));

// --- usage -------------------------------------------------------------------------------------
// What a row, a session and a tree used. Rows add up their own events (the window the page holds);
// sessions and trees take the collector's sums (the API's), never the page's partial window.

const TOKEN_KEYS = ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_creation.input_tokens"];
const PLAIN_TOKEN_KEYS = ["input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"];

// One event's usage, as gz_ia.client.usage.reading_of reads it: the reserved keys win, else the
// agents' plain keys; `hook` when it is a hook's own reading (marked, or in the plain keys only);
// null when the event records none.
function eventUsage(event) {
  const attrs = event.attrs;
  if (!attrs) return null;
  const read = (keys, costKey) => {
    let tokens = 0, found = false, cost = null;
    for (const key of keys) if (Number.isInteger(attrs[key])) ((tokens += attrs[key]), (found = true));
    if (typeof attrs[costKey] === "number") ((cost = attrs[costKey]), (found = true));
    return found ? { tokens, cost } : null;
  };
  const reserved = read(TOKEN_KEYS, "gz-ia.cost_usd");
  if (reserved) return { ...reserved, hook: attrs["gz-ia.usage_from"] === "hook" };
  const plain = read(PLAIN_TOKEN_KEYS, "cost_usd");
  return plain ? { ...plain, hook: true } : null;
}

// Whether a session's hook readings are what counts, as the API says (gz_ia.client.usage.UsageSum:
// only while the session has no other usage record); true while the page does not know.
function hooksCount(sessionId) {
  const node = (view.nodes || []).find((each) => each.session_id === sessionId);
  return !node || node.hooks_usage_counts !== false;
}

// A row's own usage (cached: addEvent clears it).
function spanUsage(s) {
  if (s.usage !== undefined) return s.usage;
  let tokens = 0, cost = null, found = false;
  for (const event of s.events) {
    const used = eventUsage(event);
    if (!used || (used.hook && !hooksCount(s.session_id))) continue;
    found = true;
    tokens += used.tokens;
    if (used.cost !== null) cost = (cost || 0) + used.cost;
  }
  return (s.usage = found ? { tokens, cost } : null);
}

// A spawning call's usage with its subagent's rows below it (a waterfall's parent span).
function rolledSpanUsage(s) {
  const own = spanUsage(s);
  let tokens = own ? own.tokens : 0, cost = own ? own.cost : null, found = own !== null;
  for (const child of s.children || []) {
    const used = rolledSpanUsage(child);
    if (!used) continue;
    found = true;
    tokens += used.tokens;
    if (used.cost !== null) cost = (cost || 0) + used.cost;
  }
  return found ? { tokens, cost } : null;
}

// A session's own usage, as the API sums it ({tokens, cost} or null).
function sessionUsage(node) {
  if (!node || (node.tokens === null && node.cost_usd === null)) return null;
  return { tokens: node.tokens || 0, cost: node.cost_usd, partial: node.usage_partial };
}

// A session's usage with every subagent below it: the API's per-session sums added up over the
// tree's nodes (flattened depth first, so a node's subtree is the run of deeper nodes after it).
function rolledUsage(nodes, sessionId) {
  const start = nodes.findIndex((node) => node.session_id === sessionId);
  if (start < 0) return null;
  let tokens = 0, cost = null, found = false, partial = false;
  for (let index = start; index < nodes.length; index++) {
    if (index > start && nodes[index].depth <= nodes[start].depth) break;
    const used = sessionUsage(nodes[index]);
    if (!used) continue;
    found = true;
    tokens += used.tokens;
    partial = partial || used.partial;
    if (used.cost !== null && used.cost !== undefined) cost = (cost || 0) + used.cost;
  }
  return found ? { tokens, cost, partial } : null;
}

const usageText = (used) => (used ? `${tokenCount(used.tokens)}${used.partial ? "+" : ""} tokens` + (used.cost !== null && used.cost !== undefined ? ` · ${dollars(used.cost)}` : "") : "");
function span(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${(seconds / 3600).toFixed(1)} h`;
}
const badge = (status) => el("span", { class: `badge ${status}`, text: status });

// --- live connection ------------------------------------------------------------------------
// The browser's EventSource retries a lost connection by itself, but gives up for good on an
// answer that is not a stream (a refusal, a collector half started): the page then asks the
// collector why, says what to do when only the user can act (the key changed), and otherwise
// opens the stream again itself. A collector restarted (a new epoch) may have written meanwhile:
// the view reloads what it shows.

const LIVE_RETRY_MAX = 10_000; // ms between two attempts, at most
const LIVE_PATIENCE = 5_000; // ms without a stream before the pill says what to check

const live = { refused: false, downSince: null };

function liveState(state, detail) {
  const pill = $("#live");
  if (state === "on") live.downSince = null;
  else if (live.downSince === null) live.downSince = Date.now();
  const long = live.downSince !== null && Date.now() - live.downSince > LIVE_PATIENCE;
  pill.textContent =
    state === "on" ? "live"
    : state === "refused" ? "open the page again: gz-ia ui"
    : long ? "collector unreachable: retrying (gz-ia status)"
    : "reconnecting…";
  pill.title = detail || (long ? "The page reconnects by itself once the collector runs again (gz-ia status says whether it does)." : "Live updates from the collector");
  pill.classList.toggle("on", state === "on");
  pill.classList.toggle("refused", state === "refused");
}

// The collector no longer takes this page's cookie (a new key, or the browser forgot it): nothing
// the page can do, so it says what the user can, and stops retrying.
function keyRefused(why) {
  live.refused = true;
  const notice = $("#notice");
  notice.replaceChildren(
    el("strong", { text: "The collector no longer recognises this page. " }),
    "Run ",
    el("code", { text: "gz-ia ui" }),
    " in the workspace (or open the address ",
    el("code", { text: "gz-ia ui --no-browser" }),
    " prints) to open it again.",
    why ? el("span", { class: "muted", text: ` (${why})` }) : "",
  );
  notice.hidden = false;
  liveState("refused", why);
}

function showNotice(text) {
  $("#notice").replaceChildren(el("strong", { text }));
  $("#notice").hidden = false;
}

// A live stream that recovers by itself: handlers.message / handlers[eventName] get its events,
// handlers.restarted() is called when the collector answering is another start than before.
function liveLink(query, handlers) {
  const link = { source: null, timer: null, epoch: null, attempts: 0, closed: false };
  const open = () => {
    link.timer = null;
    if (link.closed || live.refused) return;
    const source = (link.source = new EventSource(liveUrl(query)));
    source.onopen = () => ((link.attempts = 0), liveState("on"));
    source.addEventListener("subscribed", (message) => {
      const epoch = JSON.parse(message.data).epoch;
      if (link.epoch !== null && epoch !== link.epoch && handlers.restarted) handlers.restarted();
      link.epoch = epoch;
    });
    // Messages go to the link's onmessage, read at each one: a wrapper set on it later (a probe) holds.
    source.onmessage = (message) => outside.onmessage && outside.onmessage(message);
    for (const [name, handler] of Object.entries(handlers)) {
      if (name !== "message" && name !== "restarted") source.addEventListener(name, handler);
    }
    source.onerror = () => {
      if (link.closed || link.source !== source) return;
      liveState("reconnecting");
      if (source.readyState === EventSource.CLOSED) diagnose(source); // the browser gave up
    };
  };
  const diagnose = async (source) => {
    source.close();
    try {
      await api("sessions", { limit: 1 }); // a refused key says so (keyRefused) as it answers
    } catch (error) {
      if (error.status === 400 || error.status === 404) {
        // A root this collector will not show: retrying changes nothing.
        showNotice(error.message);
        liveState("refused", error.message);
        return;
      }
    }
    if (link.closed || live.refused) return;
    const wait = Math.min(LIVE_RETRY_MAX, 500 * 2 ** link.attempts++);
    link.timer = setTimeout(open, wait);
    setTimeout(() => !link.closed && link.timer && liveState("reconnecting"), LIVE_PATIENCE + 100);
  };
  const outside = {
    onmessage: handlers.message || null,
    close() {
      link.closed = true;
      if (link.timer) clearTimeout(link.timer);
      if (link.source) link.source.close();
    },
  };
  open();
  return outside;
}

// --- sessions list ---------------------------------------------------------------------------

const list = { offset: 0, total: 0, hung: 0, source: null, timer: null };

function listQuery() {
  const words = $("#query").value.trim().split(/\s+/).filter(Boolean);
  return {
    match: words.filter((word) => /^[A-Za-z_.]+=/.test(word)),
    q: words.filter((word) => !/^[A-Za-z_.]+=/.test(word)).join(" "),
  };
}

async function loadList() {
  const { match, q } = listQuery();
  try {
    const page = await api("sessions", { offset: list.offset, limit: PAGE, q, match, hung: hungAfter() });
    $("#list-error").hidden = true;
    list.total = page.total;
    list.hung = page.hung_sessions;
    renderList(page.sessions);
  } catch (error) {
    $("#list-error").textContent = error.message;
    $("#list-error").hidden = false;
  }
}

// A session as people name it: its title (first prompt or first action), its id below, small; on a
// fleet hub, the machine it ran on, which filters the list to that machine when clicked.
function sessionLabel(s) {
  const id = el("div", { class: "id", title: s.session_id, text: s.session_id });
  if (s.host) {
    const machine = el("button", { class: "host", type: "button", title: "only this machine's sessions", text: s.host });
    machine.addEventListener("click", (event) => {
      event.stopPropagation();
      const others = $("#query").value.trim().split(/\s+/).filter((word) => word && !word.startsWith("host="));
      $("#query").value = [`host=${s.host}`, ...others].join(" ");
      list.offset = 0;
      loadList();
    });
    id.prepend(machine);
  }
  return el(
    "div",
    { class: "label" },
    el("div", { class: "title", title: s.title || "", text: (s.parent_session_id ? "↳ " : "") + (s.title || "(no action yet)") }),
    id,
  );
}

function renderList(sessions) {
  const body = $("#sessions tbody");
  body.replaceChildren(
    ...sessions.map((s) => {
      const row = el(
        "tr",
        { class: s.status, "data-session": s.session_id },
        el("td", { title: (s.hung || []).map((c) => `${c.action} ${c.stage} for ${span(c.open_for_s)}`).join("\n") }, badge(s.status)),
        el("td", { class: "session" }, sessionLabel(s)),
        el("td", { text: s.agent || "" }),
        el("td", { text: s.role || "" }),
        el("td", { text: day(time(s.first_time)) }),
        el("td", { class: "num", text: span(s.duration_s) }),
        el("td", { class: "num", text: s.open_actions || "" }),
        el("td", { class: "num", text: s.failures || "" }),
        el("td", { class: "num", text: s.events }),
        el("td", { class: "num", text: s.tokens === null ? "" : tokenCount(s.tokens) + (s.usage_partial ? "+" : "") }),
        el("td", { class: "num", text: s.cost_usd === null ? "" : dollars(s.cost_usd) }),
      );
      row.addEventListener("click", () => (location.hash = `#/s/${encodeURIComponent(s.session_id)}`));
      return row;
    }),
  );
  const last = Math.min(list.offset + sessions.length, list.total);
  $("#page-info").textContent =
    (list.total ? `${list.offset + 1}–${last} of ${list.total}` : "no sessions") + (list.hung ? ` · ${list.hung} hung` : "");
  $("#prev").disabled = list.offset === 0;
  $("#next").disabled = last >= list.total;
}

function showList() {
  closeSession();
  $("#session-view").hidden = true;
  $("#list-view").hidden = false;
  loadList();
  if (!list.source) {
    // Any write in the root may change the page: the stream says so (ticks, not the events
    // themselves) at most twice a second, and the page refreshes. A root with no event yet is
    // waited for: its first write is its first tick.
    const refresh = () => {
      if (list.timer === null) list.timer = setTimeout(() => ((list.timer = null), loadList()), 100);
    };
    list.source = liveLink({ ticks: "1" }, { written: refresh, restarted: refresh });
  }
}

function hideListLive() {
  if (list.source) list.source.close();
  list.source = null;
}

// --- one session ------------------------------------------------------------------------------

const view = {
  top: null, selected: null, source: null, spans: new Map(), order: [], older: null,
  events: 0, treeTimer: null, ticker: null, detail: null, frame: null, pending: [],
  // The sessions the timeline shows (the selected one and its subagents), each one's parent, the
  // newest seq of each read or queued (seq counts per session), and the call that names a subagent.
  family: new Set(), parents: new Map(), seen: new Map(), loaded: new Map(), spawned: new Map(),
  orderDirty: false, nodes: [], topLast: -Infinity,
  origin: Date.now(), scaleLast: 0, changed: new Set(), freshRows: new Set(),
  freshSpans: new Set(), drawn: [], following: true, gapAbove: null, gapBelow: null, droppedAbove: 0,
};

function spanKey(event) {
  return `${event.session_id}\u0000${event.action}\u0000${event.cycle || ""}`;
}

// Fold one event (in seq order) into the action spans: READ / PENDING open a span, FINISH closes it.
function addEvent(event, fresh) {
  let key = spanKey(event);
  let current = view.spans.get(key);
  if (current && current.finished && event.stage !== "FINISH") {
    // The same action name starts a new cycle once the last one finished.
    current.key = `${key}\u0000${current.first_seq}`;
    view.spans.delete(key);
    view.spans.set(current.key, current);
    current = null;
  }
  if (!current) {
    current = { key, action: event.action, session_id: event.session_id, start: time(event.timestamp), read: null, pending: null, end: null, status: null, error: null, first_seq: event.seq, events: [], finished: false, fresh, depth: 0, model: false, spawns: SPAWNING.has(event.action) };
    view.spans.set(key, current);
    view.order.push(current);
    // The usual case, a cycle of the selected session that starts last, goes at the end as it is;
    // anything else (a late batch, a subagent's cycle) has the order rebuilt before the next draw.
    if (event.session_id === view.selected && current.start.getTime() >= view.topLast) {
      view.topLast = current.start.getTime();
      current.parent = null;
      current.children = null;
    } else view.orderDirty = true;
  }
  const at = time(event.timestamp);
  current.events.push(event);
  current.usage = undefined;
  if (event.parent_session_id) view.parents.set(event.session_id, event.parent_session_id);
  const attrs = event.attrs;
  if (attrs) {
    if (typeof attrs.child_session_id === "string") {
      view.spawned.set(attrs.child_session_id, current);
      view.orderDirty = true;
    }
    if (attrs.subagent_type) current.spawns = true;
    if (attrs["gen_ai.request.model"] || eventUsage(event)) current.model = true;
  }
  if (event.action.startsWith("model ")) current.model = true;
  if (event.stage === "READ" && !current.read) current.read = at;
  if (event.stage === "PENDING" && !current.pending) current.pending = at;
  if (event.stage === "FINISH") {
    current.end = at;
    current.status = event.status;
    current.error = event.error || null;
    current.finished = true;
    current.duration_ms = event.duration_ms;
    // As the collector's model: the duration the agent measured makes the bar at least that long.
    if (typeof event.duration_ms === "number" && at.getTime() - event.duration_ms < current.start.getTime()) {
      current.start = new Date(at.getTime() - event.duration_ms);
      view.orderDirty = true;
    }
  }
  current.last = at;
  current.fresh = current.fresh || fresh;
  if (fresh) {
    view.changed.add(current);
    view.freshSpans.add(current);
  }
  view.events += 1;
}

// --- the waterfall ---------------------------------------------------------------------------
// Rows in the order their cycles started, not the order their events arrived (an agent's telemetry
// comes in batches, late): each session's cycles by start time, and a subagent's cycles right
// below the call that spawned it, one level deeper. That call is the one whose events name the
// subagent (attrs.child_session_id, as Claude Code's Agent call does), else the parent's Agent or
// Task call (or a call with a subagent_type) running when the subagent began, else the parent's
// innermost action running then.

const SPAWNING = new Set(["Agent", "Task"]);
const LIFECYCLE = new Set(["session", "prompt", "subagent", "turn failure"]);

function spawnerOf(sessionId, startOf, bySession) {
  const named = view.spawned.get(sessionId);
  if (named && view.spans.get(named.key) === named && named.session_id !== sessionId) return named;
  const parent = view.parents.get(sessionId);
  const candidates = parent && parent !== sessionId ? bySession.get(parent) : null;
  if (!candidates) return null;
  const start = startOf.get(sessionId);
  let best = null;
  let bestRank = 0;
  for (const s of candidates) {
    if (s.start.getTime() > start || (s.end && s.end.getTime() < start)) continue;
    const rank = s.spawns ? 2 : LIFECYCLE.has(s.action) ? 0 : 1;
    if (rank > bestRank || (rank === bestRank && rank > 0 && s.start >= best.start)) {
      best = s;
      bestRank = rank;
    }
  }
  return best;
}

function byStart(a, b) {
  return a.start - b.start || (a.session_id < b.session_id ? -1 : a.session_id > b.session_id ? 1 : a.first_seq - b.first_seq);
}

// view.order again from the spans held: the tree of calls, flattened depth first.
function rebuildOrder() {
  view.orderDirty = false;
  view.topLast = -Infinity;
  const bySession = new Map();
  const startOf = new Map();
  for (const s of view.spans.values()) {
    let spans = bySession.get(s.session_id);
    if (!spans) bySession.set(s.session_id, (spans = []));
    spans.push(s);
    const at = s.start.getTime();
    if (!(startOf.get(s.session_id) <= at)) startOf.set(s.session_id, at);
  }
  const under = new Map(); // a span (null: the top) -> the spans drawn below it
  for (const [sessionId, spans] of bySession) {
    const spawner = sessionId === view.selected ? null : spawnerOf(sessionId, startOf, bySession);
    const list = under.get(spawner);
    if (list) list.push(...spans);
    else under.set(spawner, spans);
  }
  const order = [];
  const placed = new Set();
  const visit = (parent, depth) => {
    const spans = under.get(parent);
    if (!spans) return;
    spans.sort(byStart);
    if (parent) parent.children = spans;
    for (const s of spans) {
      if (placed.has(s)) continue;
      placed.add(s);
      s.parent = parent;
      s.children = null;
      // A subagent whose spawning call is not held still reads as one: a level in.
      s.depth = parent === null && s.session_id !== view.selected ? 1 : depth;
      if (parent === null && s.start.getTime() > view.topLast) view.topLast = s.start.getTime();
      order.push(s);
      visit(s, s.depth + 1);
    }
  };
  visit(null, 0);
  if (order.length < view.spans.size) {
    // Sessions that name each other as parents (data no agent should write): shown, at the end.
    for (const s of [...view.spans.values()].sort(byStart)) if (!placed.has(s)) order.push(s);
  }
  view.order = order;
}

function hungAfter() {
  return Number($("#hung").value || 300);
}

// The bars are placed by the stylesheet from each piece's times (--from, --to) and the timeline's
// scale (--first, --width, --now on the table's body), all in ms after view.origin: a new row is
// drawn alone, and the scale moves every bar at once without the page touching each row.
function placeBars() {
  const now = Date.now();
  let first = Infinity;
  let end = 0;
  let open = false;
  for (const s of view.order) {
    const from = s.start.getTime();
    const to = (s.end || s.last).getTime();
    if (from < first) first = from;
    if (to > end) end = to;
    if (!s.finished) open = true;
  }
  // A session still running is scaled to now, with slack so that rows arriving before the next
  // tick still fit; one whose cycles are all finished to its own span, so that its bars keep their
  // size however long ago it ran.
  const finished = view.order.length > 0 && !open;
  if (first === Infinity) first = now;
  const stop = finished ? end : now;
  const last = stop + (finished ? Math.max(1, (stop - first) / 50) : Math.max(1000, (now - first) / 20));
  view.finished = finished;
  view.scaleLast = last;
  const style = $("#timeline tbody").style;
  style.setProperty("--first", String(first - view.origin));
  style.setProperty("--width", String(Math.max(1, last - first)));
  style.setProperty("--now", String(now - view.origin));
}

function spanState(s) {
  const open = !s.finished;
  const elapsed = ((s.end || new Date()) - s.start) / 1000;
  const hung = open && elapsed > hungAfter();
  const state = open ? (hung ? "hung" : "running") : s.status === "FAILED" ? "failed" : "ok";
  const duration = span(s.duration_ms !== undefined && s.duration_ms !== null ? s.duration_ms / 1000 : elapsed);
  return { state, duration };
}

function rowOf(s) {
  const open = !s.finished;
  const { state, duration } = spanState(s);
  const bar = el("div", { class: "bar" });
  // A piece without an end runs to now: the stylesheet's --now, moved by placeBars.
  const piece = (cls, from, to) => {
    if (!from) return;
    const part = el("span", { class: to ? cls : `${cls} to-now` });
    part.style.setProperty("--from", String(from.getTime() - view.origin));
    if (to) part.style.setProperty("--to", String(to.getTime() - view.origin));
    bar.append(part);
  };
  piece("read", s.read, s.pending || s.end || (open ? null : s.last));
  piece(open ? "open" : "pending", s.pending, s.end);
  if (s.end) piece(`finish ${s.status === "FAILED" ? "failed" : ""}`, s.end, s.end);
  const own = spanUsage(s);
  const used = s.children ? rolledSpanUsage(s) : own;
  const rolled = used !== own; // a spawning call: its subagent's usage added, shown as such
  const name = el("td", { class: "action", title: `${s.action}\n${s.session_id}` });
  name.style.paddingLeft = `${0.5 + s.depth * 1.3}em`; // through the CSSOM: the CSP allows no inline styles
  if (s.depth) name.append(el("span", { class: "branch", text: "└ " }));
  if (s.model) name.append(el("span", { class: "kind", text: "model" }));
  name.append(s.model ? s.action.replace(/^model /, "") : s.action);
  const row = el(
    "tr",
    { class: `${state}${s.fresh ? " fresh" : ""}${s.model ? " model" : ""}`, "data-action": s.action, "data-state": state, "data-session": s.session_id, "data-depth": String(s.depth) },
    name,
    el("td", {}, bar),
    el("td", { text: clock(s.start) }),
    el("td", { class: "num", text: duration }),
    el("td", { class: `num tokens${rolled ? " rolled" : ""}`, title: rolled ? "with the calls below it" : "", text: used ? tokenCount(used.tokens) : "" }),
    el("td", { class: `num cost${rolled ? " rolled" : ""}`, title: rolled ? "with the calls below it" : "", text: used ? dollars(used.cost) : "" }),
    el("td", {}, badge(state), s.error ? el("span", { class: "error", title: s.error, text: "  " + s.error }) : ""),
  );
  if (s.fresh) view.freshRows.add(row);
  s.fresh = false;
  row.addEventListener("click", () => showDetails(s));
  return row;
}

// Past MAX_SPANS the oldest spans go, rows and events, as live ones arrive: the page never holds
// a whole long session. Loading older events drops nothing: what the user asked for stays.
function dropOldest() {
  if (view.order.length <= MAX_SPANS) return;
  if (view.orderDirty) rebuildOrder();
  view.droppedAbove += view.order.length - MAX_SPANS;
  for (const dropped of view.order.splice(0, view.order.length - MAX_SPANS)) {
    view.spans.delete(dropped.key);
    view.changed.delete(dropped);
    view.freshSpans.delete(dropped);
    view.events -= dropped.events.length;
    if (dropped.row) dropped.row.remove();
    dropped.row = null;
  }
}

function windowInfo() {
  $("#window-info").textContent = `${view.events} events shown` + (view.older ? " (older events not loaded)" : "");
  $("#older").hidden = !view.older;
}

// A row spanning the table, as tall as the rows it stands for: the scroll height stays that of
// every span held, the rows themselves are drawn only near the view.
function gapRow() {
  const row = el("tr", { class: "gap", "aria-hidden": "true" }, el("td", { colspan: "7" }));
  row.style.height = "0px"; // through the CSSOM: the CSP allows no inline styles
  return row;
}

// Draw the rows in or near the view, between the two gaps; rows already drawn stay as they are.
// While the view follows the tail (scrolled to the end, as it opens) it stays at the newest row.
// The sizes are read first, before this frame writes anything, so that reading them costs no layout.
function drawRows() {
  if (view.orderDirty) rebuildOrder();
  const box = $("#timeline-scroll");
  const height = box.clientHeight;
  const total = view.order.length;
  // Spans dropped above the view since the last frame: scrolled back by as much, it stays put.
  const shift = view.droppedAbove * ROW_HEIGHT;
  view.droppedAbove = 0;
  const top = view.following ? Math.max(0, total * ROW_HEIGHT - height) : Math.max(0, box.scrollTop - shift);
  const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
  const last = Math.min(total, Math.ceil((top + height) / ROW_HEIGHT) + OVERSCAN);
  const wanted = view.order.slice(first, last);
  const keep = new Set(wanted);
  for (const s of view.drawn) {
    if (!keep.has(s) && s.row) {
      s.row.remove();
      s.row = null;
    }
  }
  // The rows kept are in the order wanted: walk them, putting each new row before the next kept one.
  const body = view.gapAbove.parentNode;
  let next = view.gapAbove.nextSibling;
  for (const s of wanted) {
    if (s.row && s.row === next) {
      next = next.nextSibling;
      continue;
    }
    if (!s.row) s.row = rowOf(s);
    body.insertBefore(s.row, next);
  }
  view.drawn = wanted;
  view.gapAbove.style.height = `${first * ROW_HEIGHT}px`;
  view.gapBelow.style.height = `${(total - last) * ROW_HEIGHT}px`;
  if (view.following) box.scrollTop = box.scrollHeight;
  else if (shift) box.scrollTop = top;
}

// Every row drawn again: a new window, another hung threshold.
function renderTimeline() {
  view.changed.clear();
  view.freshRows.clear();
  view.freshSpans.clear();
  for (const s of view.drawn) s.row = null;
  view.drawn = [];
  view.gapAbove = gapRow();
  view.gapBelow = gapRow();
  $("#timeline tbody").replaceChildren(view.gapAbove, view.gapBelow);
  placeBars();
  drawRows();
  windowInfo();
}

// The spans live events touched: a drawn one's row is replaced, and the rows near the view drawn.
function renderChanged() {
  dropOldest();
  if (view.orderDirty) rebuildOrder(); // the parents of new rows are known from here
  let newest = 0;
  for (const s of [...view.changed]) for (let up = s.parent; up; up = up.parent) view.changed.add(up);
  for (const s of view.changed) {
    if (view.spans.get(s.key) !== s) continue; // dropped meanwhile
    if (s.row) s.row.replaceWith((s.row = rowOf(s)));
    newest = Math.max(newest, (s.end || s.last).getTime());
  }
  view.changed.clear();
  if (newest > view.scaleLast) placeBars();
  drawRows();
  windowInfo();
}

// Once a second: the scale follows now, open rows their elapsed time (and turn hung), and the
// rows drawn fresh since the last tick lose their highlight.
function tick() {
  placeBars();
  for (const row of view.freshRows) row.classList.remove("fresh");
  view.freshRows.clear();
  for (const s of view.freshSpans) s.fresh = false; // not drawn meanwhile: not fresh when scrolled to
  view.freshSpans.clear();
  for (const s of view.drawn) {
    if (s.finished || !s.row) continue;
    const { state, duration } = spanState(s);
    if (s.row.dataset.state !== state) {
      s.row.replaceWith((s.row = rowOf(s)));
      continue;
    }
    const cell = s.row.children[3];
    if (cell.textContent !== duration) cell.textContent = duration;
  }
}

// Fold the live events queued into the spans, the oldest going past MAX_SPANS.
function foldPending() {
  if (!view.windowLoaded) return; // loadWindow draws, then folds what came meanwhile
  for (const event of view.pending.splice(0)) if (event.seq > (view.loaded.get(event.session_id) || 0)) addEvent(event, true);
  dropOldest();
}

// Events are folded in and drawn once per frame, just before the browser paints: whatever arrived
// since the last frame is drawn together, and the message handler only parses and queues.
function scheduleRender() {
  if (view.frame) return;
  view.frame = requestAnimationFrame(() => {
    view.frame = null;
    if (!view.windowLoaded) return;
    foldPending();
    const detail = view.detail && view.changed.has(view.detail);
    renderChanged();
    if (detail && view.spans.get(view.detail.key) === view.detail) showDetails(view.detail);
  });
}

function showDetails(s) {
  view.detail = s;
  $("#session-body").classList.add("with-details");
  $("#details").hidden = false;
  $("#details-title").textContent = `${s.action} — ${s.session_id}`;
  const body = $("#details-body");
  const used = s.children ? rolledSpanUsage(s) : spanUsage(s);
  const model = s.events.map((event) => event.attrs && (event.attrs["gen_ai.request.model"] || event.attrs.model)).find(Boolean);
  const facts = [`started ${day(s.start)}.${pad(s.start.getMilliseconds(), 3)}`, model ? `model ${model}` : "", used ? usageText(used) + (s.children ? " (with the calls below it)" : "") : ""];
  body.replaceChildren(
    el("p", { class: "muted facts", text: facts.filter(Boolean).join(" · ") }),
    ...s.events.map((event) =>
      el(
        "div",
        { class: "event-line" },
        el("div", { text: `#${event.seq} ${clock(time(event.timestamp))} ${event.stage} ${event.status}${event.duration_ms !== undefined ? ` ${event.duration_ms} ms` : ""}` }),
        event.error ? el("div", { class: "error", text: event.error }) : "",
        el("pre", { text: JSON.stringify(event.attrs || {}, null, 2) }),
      ),
    ),
    el("h2", { text: "Stored events" }),
    el("pre", { class: "raw", text: s.events.map((event) => JSON.stringify(event)).join("\n") }),
  );
}

// The tree's first failure and what it cost after, at the top of the view (gz-ia session why).
async function loadWhy() {
  const box = $("#why");
  try {
    const answer = await api("why", { session: view.top });
    if (!answer.first_failure) {
      box.hidden = true;
      box.replaceChildren();
      return;
    }
    const failure = answer.first_failure;
    const after = answer.after;
    const where = el("a", { href: "#", text: failure.session_id });
    where.addEventListener("click", (event) => (event.preventDefault(), selectSession(failure.session_id)));
    box.replaceChildren(
      el("strong", { text: "First failure: " }),
      `${failure.action} in `,
      where,
      ` at ${clock(time(failure.timestamp))}${failure.error ? ": " + failure.error : ""}`,
      el("br"),
      el("span", {
        class: "muted",
        text: `After it: ${after.actions} actions, ${span(after.duration_ms / 1000) || "0 ms"}, ${after.tokens.toLocaleString()} tokens, $${after.cost_usd.toFixed(4)} · ${answer.chain.join(" › ")}`,
      }),
    );
    box.hidden = false;
  } catch (error) {
    box.hidden = true;
  }
}

async function loadTree() {
  loadWhy();
  try {
    view.treeLoad = api("tree", { session: view.top });
    const tree = await view.treeLoad;
    view.nodes = tree.nodes;
    const items = tree.nodes.map((node) => {
      const used = sessionUsage(node);
      const item = el(
        "li",
        { "data-session": node.session_id, "data-status": node.status, title: node.session_id },
        badge(node.status),
        el("span", { class: "title", text: node.title || node.session_id }),
        used ? el("span", { class: "usage", text: usageText(used) }) : "",
      );
      item.style.paddingLeft = `${node.depth * 1.2 + 0.3}em`; // through the CSSOM: the CSP allows no inline styles
      item.classList.toggle("selected", node.session_id === view.selected);
      item.addEventListener("click", () => selectSession(node.session_id));
      return item;
    });
    $("#tree ul").replaceChildren(...items);
  } catch (error) {
    view.nodes = [];
    const waiting = error.status === 404;
    $("#tree ul").replaceChildren(el("li", { class: waiting ? "muted" : "error", text: waiting ? "waiting for its first event…" : error.message }));
  }
  renderHead();
}

// The session's name, when and how long it ran, and what it used: its own and with its subagents.
function renderHead() {
  const top = view.nodes.find((node) => node.session_id === view.top);
  $("#session-title").textContent = (top && top.title) || view.top;
  const id = $("#session-id");
  id.textContent = view.top;
  id.title = "Session id (click to copy)";
  const facts = [];
  if (top) {
    facts.push(el("span", {}, badge(top.status)));
    if (top.agent) facts.push(el("span", { text: top.agent }));
    if (top.first_time) facts.push(el("span", { title: zoneName(), text: `started ${day(time(top.first_time))}` }));
    // The collector's summary spans the events in the order written; a batch that came late may have
    // started earlier or ended later: the rows held say so.
    let duration = top.duration_s;
    if (view.selected === view.top && view.order.length) {
      const held = view.order.filter((s) => s.session_id === view.top);
      if (held.length) {
        const from = Math.min(...held.map((s) => s.start.getTime()));
        const to = Math.max(...held.map((s) => (s.end || s.last).getTime()));
        duration = Math.max(duration || 0, (to - from) / 1000);
      }
    }
    if (duration !== null) facts.push(el("span", { class: "duration", text: span(duration) }));
    const own = sessionUsage(top);
    if (own) facts.push(el("span", { class: "usage", "data-usage": "session", text: usageText(own) }));
    const rolled = view.nodes.length > 1 ? rolledUsage(view.nodes, view.top) : null;
    if (rolled) facts.push(el("span", { class: "usage", "data-usage": "tree", text: `with subagents ${usageText(rolled)}` }));
  }
  $("#session-facts").replaceChildren(...facts);
  const selected = view.nodes.find((node) => node.session_id === view.selected);
  const used = selected && view.selected !== view.top ? sessionUsage(selected) : null;
  $("#timeline-title").textContent =
    view.selected === view.top ? "Timeline" : `Timeline of ${(selected && selected.title) || view.selected}` + (used ? ` · ${usageText(used)}` : "");
}

const CHILD_WINDOW = 200; // newest events read of each subagent below the selected session
const MAX_CHILDREN = 50; // subagents read with it; more join as the live stream brings them

// Note the newest seq of each session read, so that live events it already holds are not folded twice.
function noteLoaded(events) {
  for (const event of events) {
    const sid = event.session_id;
    if (event.seq > (view.loaded.get(sid) || 0)) view.loaded.set(sid, event.seq);
    if (event.seq > (view.seen.get(sid) || 0)) view.seen.set(sid, event.seq);
  }
}

async function loadWindow(before) {
  const session = view.selected;
  if (before) {
    const page = await api("events", { session, before, limit: WINDOW });
    if (session !== view.selected) return;
    // Older events go in front: rebuild the spans from all the events held, in seq order.
    const held = view.order.flatMap((s) => s.events);
    view.spans = new Map();
    view.order = [];
    view.events = 0;
    view.topLast = -Infinity;
    for (const event of [...page.events, ...held].sort((a, b) => a.seq - b.seq)) addEvent(event, false);
    // Show what was just loaded, at the top; the view follows the tail again once scrolled to the end.
    view.following = false;
    $("#timeline-scroll").scrollTop = 0;
    view.older = page.older;
    noteLoaded(page.events);
    renderTimeline();
    return;
  }
  // The selected session and its subagents: their cycles are drawn as one waterfall. The top's
  // tree (read once for the panel) holds the selected session's subtree.
  const tree = await (view.treeLoad || Promise.reject(new Error())).catch(() => ({ nodes: [] }));
  if (session !== view.selected) return;
  const at = tree.nodes.findIndex((node) => node.session_id === session);
  const nodes = at < 0 ? [] : [tree.nodes[at]];
  for (let index = at + 1; at >= 0 && index < tree.nodes.length && tree.nodes[index].depth > tree.nodes[at].depth; index++) nodes.push(tree.nodes[index]);
  for (const node of nodes) {
    view.family.add(node.session_id);
    if (node.parent_session_id) view.parents.set(node.session_id, node.parent_session_id);
  }
  const below = nodes.filter((node) => node.session_id !== session && node.events).slice(0, MAX_CHILDREN);
  const none = (error) => {
    if (error.status === 404) return { events: [], older: null }; // no event yet: the live stream brings the first
    throw error;
  };
  const [page, ...children] = await Promise.all([
    api("events", { session, limit: WINDOW }).catch(none),
    ...below.map((node) => api("events", { session: node.session_id, limit: CHILD_WINDOW }).catch(() => ({ events: [] }))),
  ]);
  if (session !== view.selected) return;
  for (const event of page.events) addEvent(event, false);
  for (const child of children) for (const event of child.events) addEvent(event, false);
  view.older = page.older;
  // Live events queued while the windows were read may be in them already: those are not folded again.
  noteLoaded(page.events);
  for (const child of children) noteLoaded(child.events);
  const transcript = page.events.find((event) => event.attrs && event.attrs.transcript_path);
  if (transcript) {
    const search = new URLSearchParams(ROOT ? { root: ROOT } : {});
    search.set("session", session);
    $("#transcript").replaceChildren(el("a", { href: `api/transcript?${search}`, target: "_blank", rel: "noopener", title: transcript.attrs.transcript_path, text: "transcript" }));
  }
  renderTimeline();
  renderHead();
  view.windowLoaded = true;
  if (view.pending.length) scheduleRender();
}

function selectSession(sessionId) {
  view.selected = sessionId;
  view.spans = new Map();
  view.order = [];
  view.events = 0;
  view.older = null;
  view.family = new Set([sessionId]);
  view.topLast = -Infinity;
  view.seen = new Map();
  view.loaded = new Map();
  view.spawned = new Map();
  view.droppedAbove = 0;
  view.windowLoaded = false;
  view.pending = [];
  view.following = true;
  $("#transcript").replaceChildren();
  for (const item of document.querySelectorAll("#tree li")) item.classList.toggle("selected", item.dataset.session === sessionId);
  renderHead();
  loadWindow(null).catch((error) => ($("#window-info").textContent = error.message));
}

// A live event of the tree: the selected session's and its subagents' go into the timeline (a
// subagent that starts now joins through its parent); any refreshes the tree at most once a second.
function onLiveEvent(message) {
  const event = JSON.parse(message.data);
  const sid = event.session_id;
  if (!view.family.has(sid) && view.family.has(event.parent_session_id)) view.family.add(sid);
  if (view.family.has(sid) && event.seq > (view.seen.get(sid) || 0)) {
    view.seen.set(sid, event.seq);
    view.pending.push(event);
    // A hidden tab runs no frames: fold there too, so that what it holds stays bounded.
    if (view.pending.length >= MAX_PENDING) foldPending();
    scheduleRender();
  }
  if (view.treeTimer === null) view.treeTimer = setTimeout(() => ((view.treeTimer = null), loadTree()), 1000);
}

function openSession(sessionId) {
  hideListLive();
  closeSession();
  $("#list-view").hidden = true;
  $("#session-view").hidden = false;
  $("#details").hidden = true;
  $("#session-body").classList.remove("with-details");
  view.top = sessionId;
  view.nodes = [];
  loadTree(); // first: the window waits for the tree it reads
  selectSession(sessionId);
  // The subtree's events as they are written, from the first one of a session not there yet.
  const reload = () => (selectSession(view.selected), loadTree()); // missed some: read the window again
  view.source = liveLink({ session: sessionId, subtree: "1" }, { message: onLiveEvent, lagged: reload, restarted: reload });
  view.ticker = setInterval(tick, 1000);
}

function closeSession() {
  if (view.source) view.source.close();
  if (view.ticker) clearInterval(view.ticker);
  view.source = null;
  view.ticker = null;
}

// --- wiring ---------------------------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/s\/(.+)$/);
  if (match) openSession(decodeURIComponent(match[1]));
  else showList();
}

$("#root").textContent = ROOT;
$("#zone").textContent = `times in ${zoneName()}`;
$("#session-id").addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText(view.top).catch(() => {}));
$("#search").addEventListener("submit", (event) => {
  event.preventDefault();
  list.offset = 0;
  loadList();
});
$("#prev").addEventListener("click", () => ((list.offset = Math.max(0, list.offset - PAGE)), loadList()));
$("#next").addEventListener("click", () => ((list.offset += PAGE), loadList()));
$("#older").addEventListener("click", () => loadWindow(view.older));
$("#timeline-scroll").addEventListener("scroll", () => {
  // Scrolled to the end (by the user or by drawRows), the view follows the tail; elsewhere it stays.
  const box = $("#timeline-scroll");
  view.following = box.scrollTop + box.clientHeight >= box.scrollHeight - ROW_HEIGHT / 2;
  scheduleRender();
}, { passive: true });
$("#details-close").addEventListener("click", () => {
  view.detail = null;
  $("#details").hidden = true;
  $("#session-body").classList.remove("with-details");
});
$("#hung").value = params.get("hung") || "300";
$("#hung").addEventListener("change", renderTimeline);
window.addEventListener("hashchange", route);
route();
