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
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  });
}

function liveUrl(query = {}) {
  const search = new URLSearchParams(ROOT ? { root: ROOT } : {});
  for (const [key, value] of Object.entries(query)) if (value) search.set(key, value);
  return `live?${search}`;
}

const time = (text) => (text ? new Date(text) : null);
// One formatter each, made once: toLocale*String builds a formatter per call, too slow for a row
// per event at a thousand events a second.
const CLOCK = new Intl.DateTimeFormat([], { hour12: false, hour: "2-digit", minute: "2-digit", second: "2-digit" });
const DAY = new Intl.DateTimeFormat([], { hour12: false, dateStyle: "short", timeStyle: "medium" });
const clock = (date) => (date ? CLOCK.format(date) + "." + String(date.getMilliseconds()).padStart(3, "0") : "");
const day = (date) => (date ? DAY.format(date) : "");
function span(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${(seconds / 3600).toFixed(1)} h`;
}
const badge = (status) => el("span", { class: `badge ${status}`, text: status });

// --- live status pill ------------------------------------------------------------------------

function liveState(on) {
  const pill = $("#live");
  pill.textContent = on ? "live" : "reconnecting…";
  pill.classList.toggle("on", on);
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

function renderList(sessions) {
  const body = $("#sessions tbody");
  body.replaceChildren(
    ...sessions.map((s) => {
      const row = el(
        "tr",
        { class: s.status, "data-session": s.session_id },
        el("td", { title: (s.hung || []).map((c) => `${c.action} ${c.stage} for ${span(c.open_for_s)}`).join("\n") }, badge(s.status)),
        el("td", { class: "id", title: s.session_id, text: (s.parent_session_id ? "↳ " : "") + s.session_id }),
        el("td", { text: s.agent || "" }),
        el("td", { text: s.role || "" }),
        el("td", { text: day(time(s.first_time)) }),
        el("td", { class: "num", text: span(s.duration_s) }),
        el("td", { class: "num", text: s.open_actions || "" }),
        el("td", { class: "num", text: s.failures || "" }),
        el("td", { class: "num", text: s.events }),
        el("td", { class: "num", text: s.tokens === null ? "" : s.tokens.toLocaleString() + (s.usage_partial ? "+" : "") }),
        el("td", { class: "num", text: s.cost_usd === null ? "" : "$" + s.cost_usd.toFixed(4) }),
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
    // themselves) at most twice a second, and the page refreshes.
    list.source = new EventSource(liveUrl({ ticks: "1" }));
    list.source.onopen = () => liveState(true);
    list.source.onerror = () => liveState(false);
    list.source.addEventListener("written", () => {
      if (list.timer === null) list.timer = setTimeout(() => ((list.timer = null), loadList()), 100);
    });
  }
}

function hideListLive() {
  if (list.source) list.source.close();
  list.source = null;
}

// --- one session ------------------------------------------------------------------------------

const view = {
  top: null, selected: null, source: null, spans: new Map(), order: [], older: null,
  events: 0, treeTimer: null, ticker: null, detail: null, frame: null, pending: [], loadedSeq: 0,
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
    current = { key, action: event.action, session_id: event.session_id, start: time(event.timestamp), read: null, pending: null, end: null, status: null, error: null, first_seq: event.seq, events: [], finished: false, fresh };
    view.spans.set(key, current);
    view.order.push(current);
  }
  const at = time(event.timestamp);
  current.events.push(event);
  if (event.stage === "READ" && !current.read) current.read = at;
  if (event.stage === "PENDING" && !current.pending) current.pending = at;
  if (event.stage === "FINISH") {
    current.end = at;
    current.status = event.status;
    current.error = event.error || null;
    current.finished = true;
    current.duration_ms = event.duration_ms;
  }
  current.last = at;
  current.fresh = current.fresh || fresh;
  if (fresh) {
    view.changed.add(current);
    view.freshSpans.add(current);
  }
  view.events += 1;
}

function hungAfter() {
  return Number($("#hung").value || 300);
}

// The bars are placed by the stylesheet from each piece's times (--from, --to) and the timeline's
// scale (--first, --width, --now on the table's body), all in ms after view.origin: a new row is
// drawn alone, and the scale moves every bar at once without the page touching each row.
function placeBars() {
  const now = Date.now();
  let first = now;
  for (const s of view.order) if (s.start.getTime() < first) first = s.start.getTime();
  // Slack past now, so that rows arriving before the next tick still fit in the scale.
  const last = now + Math.max(1000, (now - first) / 20);
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
  const row = el(
    "tr",
    { class: `${state}${s.fresh ? " fresh" : ""}`, "data-action": s.action, "data-state": state },
    el("td", { title: s.session_id, text: s.action + (s.session_id !== view.selected ? `  (${s.session_id})` : "") }),
    el("td", {}, bar),
    el("td", { text: clock(s.start) }),
    el("td", { class: "num", text: duration }),
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
  const row = el("tr", { class: "gap", "aria-hidden": "true" }, el("td", { colspan: "5" }));
  row.style.height = "0px"; // through the CSSOM: the CSP allows no inline styles
  return row;
}

// Draw the rows in or near the view, between the two gaps; rows already drawn stay as they are.
// While the view follows the tail (scrolled to the end, as it opens) it stays at the newest row.
// The sizes are read first, before this frame writes anything, so that reading them costs no layout.
function drawRows() {
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
  let newest = 0;
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
  for (const event of view.pending.splice(0)) if (event.seq > view.loadedSeq) addEvent(event, true);
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
  body.replaceChildren(
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
    const tree = await api("tree", { session: view.top });
    const items = tree.nodes.map((node) => {
      const item = el("li", { "data-session": node.session_id, "data-status": node.status }, badge(node.status), node.session_id);
      item.style.paddingLeft = `${node.depth * 1.2 + 0.3}em`; // through the CSSOM: the CSP allows no inline styles
      item.classList.toggle("selected", node.session_id === view.selected);
      item.addEventListener("click", () => selectSession(node.session_id));
      return item;
    });
    $("#tree ul").replaceChildren(...items);
  } catch (error) {
    $("#tree ul").replaceChildren(el("li", { class: "error", text: error.message }));
  }
}

async function loadWindow(before) {
  const session = view.selected;
  const page = await api("events", { session, before, limit: WINDOW });
  if (session !== view.selected) return;
  if (before) {
    // Older events go in front: rebuild the spans from all the events held, in seq order.
    const held = view.order.flatMap((s) => s.events);
    view.spans = new Map();
    view.order = [];
    view.events = 0;
    for (const event of [...page.events, ...held].sort((a, b) => a.seq - b.seq)) addEvent(event, false);
    // Show what was just loaded, at the top; the view follows the tail again once scrolled to the end.
    view.following = false;
    $("#timeline-scroll").scrollTop = 0;
  } else {
    for (const event of page.events) addEvent(event, false);
  }
  view.older = page.older;
  // Live events queued while the window was read may be in it already: those are not folded again.
  view.loadedSeq = Math.max(view.loadedSeq, ...page.events.map((event) => event.seq));
  view.lastSeq = Math.max(view.lastSeq || 0, view.loadedSeq);
  const transcript = page.events.find((event) => event.attrs && event.attrs.transcript_path);
  if (transcript) {
    const search = new URLSearchParams(ROOT ? { root: ROOT } : {});
    search.set("session", session);
    $("#transcript").replaceChildren(el("a", { href: `api/transcript?${search}`, target: "_blank", rel: "noopener", title: transcript.attrs.transcript_path, text: "transcript" }));
  }
  renderTimeline();
  view.windowLoaded = true;
  if (view.pending.length) scheduleRender();
}

function selectSession(sessionId) {
  view.selected = sessionId;
  view.spans = new Map();
  view.order = [];
  view.events = 0;
  view.older = null;
  view.lastSeq = 0;
  view.loadedSeq = 0;
  view.droppedAbove = 0;
  view.windowLoaded = false;
  view.pending = [];
  view.following = true;
  $("#transcript").replaceChildren();
  $("#timeline-title").textContent = `Timeline of ${sessionId}`;
  for (const item of document.querySelectorAll("#tree li")) item.classList.toggle("selected", item.dataset.session === sessionId);
  loadWindow(null).catch((error) => ($("#window-info").textContent = error.message));
}

function openSession(sessionId) {
  hideListLive();
  closeSession();
  $("#list-view").hidden = true;
  $("#session-view").hidden = false;
  $("#session-title").textContent = sessionId;
  $("#details").hidden = true;
  $("#session-body").classList.remove("with-details");
  view.top = sessionId;
  selectSession(sessionId);
  loadTree();
  // The subtree's events as they are written: the selected session's go into its timeline, any
  // event of the tree refreshes the tree (new subagents, statuses) at most once a second.
  view.source = new EventSource(liveUrl({ session: sessionId, subtree: "1" }));
  view.source.onopen = () => liveState(true);
  view.source.onerror = () => liveState(false);
  view.source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    if (event.session_id === view.selected && event.seq > (view.lastSeq || 0)) {
      view.lastSeq = event.seq;
      view.pending.push(event);
      // A hidden tab runs no frames: fold there too, so that what it holds stays bounded.
      if (view.pending.length >= MAX_PENDING) foldPending();
      scheduleRender();
    }
    if (view.treeTimer === null) view.treeTimer = setTimeout(() => ((view.treeTimer = null), loadTree()), 1000);
  };
  view.source.addEventListener("lagged", () => selectSession(view.selected)); // missed some: reload the window
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
