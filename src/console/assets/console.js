// The outbox console's page. Every text that comes from the API (topics,
// subjects, errors, payloads) is written as text nodes, never as markup,
// with its control and bidirectional-formatting characters made visible.
"use strict";

const api = new URL("api/", document.baseURI);
// The token is kept per origin (a new tab is signed in too); it is sent
// only as a header, so the cross-site rules are what they were.
// Keyed by the console's path: two consoles of one origin keep their own.
const TOKEN_KEY = `outbox-console-token:${api.pathname}`;
// A tenant's portal link (`#portal=<token>`): kept for this tab only, and
// taken out of the address, so a copied address carries no token.
const PORTAL_KEY = `outbox-portal-token:${api.pathname}`;
function takePortalLink() {
  if (!location.hash.startsWith("#portal=")) return false;
  const token = location.hash.slice("#portal=".length);
  let decoded = token;
  try {
    decoded = decodeURIComponent(token);
  } catch {
    // Kept as it is: the console refuses it, and the page says so.
  }
  sessionStorage.setItem(PORTAL_KEY, decoded);
  history.replaceState(null, "", location.pathname + location.search);
  return true;
}
takePortalLink();
// A link opened in a tab already on the page changes only the fragment.
addEventListener("hashchange", () => takePortalLink() && location.reload());
const portalToken = () => sessionStorage.getItem(PORTAL_KEY);
const UTC_KEY = "outbox-console-utc";
// `pageStart`: the cursor the shown page of messages began at (a refresh
// shows the same page); `after`: where the next page begins.
const state = { session: null, outbox: null, pageStart: null, after: null, timer: null, paused: new Map(), series: new Map(), counted: null, refreshFailed: false };

const $ = (id) => document.getElementById(id);

// Control and format characters (bidirectional embeddings, overrides,
// isolates and marks among them), line and paragraph separators, and every
// character meant to be invisible: each is shown as its code point, but
// tab and line feed, which are kept.
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}]/gu;
const KEPT = new Set(["\t", "\n"]);
const codePoint = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;

/** `text` with each hidden character written as its code point, for attributes. */
const visible = (text) => String(text).replace(HIDDEN, (c) => (KEPT.has(c) ? c : `⟨${codePoint(c)}⟩`));

/** Appends `text` to `node` as text, each hidden character as a marked code point. */
function appendText(node, value) {
  const text = String(value);
  let last = 0;
  for (const match of text.matchAll(HIDDEN)) {
    if (KEPT.has(match[0])) continue;
    node.append(document.createTextNode(text.slice(last, match.index)));
    node.append(Object.assign(document.createElement("span"), { className: "ctl", textContent: codePoint(match[0]) }));
    last = match.index + match[0].length;
  }
  node.append(document.createTextNode(text.slice(last)));
}

/** An element with text and attributes; children appended as they are. */
function el(tag, text, attributes = {}, children = []) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) appendText(node, String(text));
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, visible(value));
  for (const child of children) node.append(child);
  return node;
}

/** A list's cell: one line, cut with an ellipsis, whole in its title. */
const cell = (text, attributes = {}) => el("td", text, { title: String(text), ...attributes });

/** A time with its zone: UTC when the switch says so, else the browser's. */
function when(ms) {
  if (ms === null || ms === undefined) return "–";
  const parts = new Intl.DateTimeFormat("en-CA", {
    timeZone: $("utc").checked ? "UTC" : undefined,
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short",
  }).formatToParts(new Date(ms));
  const part = (type) => parts.find((p) => p.type === type)?.value ?? "";
  return `${part("year")}-${part("month")}-${part("day")} ${part("hour")}:${part("minute")}:${part("second")} ${part("timeZoneName")}`;
}

function headers(changes) {
  const result = { accept: "application/json" };
  const token = localStorage.getItem(TOKEN_KEY);
  if (portalToken()) result["x-outbox-portal"] = portalToken();
  else if (token) result.authorization = `Bearer ${token}`;
  if (changes) {
    result["content-type"] = "application/json";
    result["x-outbox-console"] = "1";
  }
  return result;
}

class Unauthorized extends Error {}

async function call(path, { method = "GET", body } = {}) {
  const response = await fetch(new URL(path, api), {
    method,
    headers: headers(method !== "GET"),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const answer = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (response.status === 401) throw new Unauthorized(answer.error);
  if (!response.ok) throw new Error(answer.error ?? `HTTP ${response.status}`);
  // A change is in the audit log now: the next refresh reads it.
  if (method !== "GET") state.auditStale = true;
  return answer;
}

function say(text) {
  $("status").replaceChildren();
  appendText($("status"), text);
}

function showSignIn(why) {
  clearInterval(state.timer);
  if (state.portal || portalToken()) {
    // A portal link has no sign-in: a new link is the way back.
    sessionStorage.removeItem(PORTAL_KEY);
    $("console").hidden = true;
    $("signin").hidden = false;
    $("signin-form").hidden = true;
    $("signin-why").textContent = "This link has expired or is not valid: ask for a new one.";
    return;
  }
  $("console").hidden = true;
  $("signout").hidden = true;
  $("signin").hidden = false;
  $("signin-why").replaceChildren();
  appendText($("signin-why"), why ?? "");
}

async function start() {
  if (portalToken()) return startPortal();
  // Asked quietly first: no credentials is an answer, not a 401.
  let probe;
  try {
    probe = await call("probe");
  } catch (error) {
    return say(error.message);
  }
  if (!probe.role) {
    const stale = localStorage.getItem(TOKEN_KEY) !== null;
    localStorage.removeItem(TOKEN_KEY);
    return showSignIn(stale ? "That token is not (or no longer) accepted." : "");
  }
  try {
    state.session = await call("session");
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    return say(error.message);
  }
  if (state.session.portal) return startPortal(state.session);
  $("signin").hidden = true;
  $("console").hidden = false;
  $("signout").hidden = localStorage.getItem(TOKEN_KEY) === null;
  $("role").replaceChildren();
  appendText($("role"), `signed in as ${state.session.role} (${state.session.identity})`);
  document.body.classList.toggle("viewer", state.session.role !== "operator");
  const nav = $("outboxes");
  nav.replaceChildren();
  for (const name of state.session.outboxes) {
    const button = el("button", name, { type: "button", "aria-pressed": "false" });
    button.addEventListener("click", () => choose(name));
    nav.append(button);
  }
  const inboxes = $("inbox-name");
  inboxes.replaceChildren(...state.session.inboxes.map((name) => el("option", name)));
  $("inbox-section").hidden = state.session.inboxes.length === 0;
  $("subject-section").hidden = state.session.role !== "operator";
  $("audit-section").hidden = state.session.role !== "operator";
  $("fleet-section").hidden = !state.session.fleet;
  document.body.classList.toggle("fleet-only", state.session.outboxes.length === 0 && state.session.fleet);
  if (state.session.fleet) await fleet("first").catch((error) => say(error.message));
  const linked = linkedMessage();
  const first = linked && state.session.outboxes.includes(linked.outbox) ? linked.outbox : state.session.outboxes[0];
  if (first !== undefined) await choose(first);
  if (linked && linked.outbox === state.outbox) await openDetail(linked.key);
  scheduleRefresh();
}

/**
 * A tenant's portal: its own endpoints, their deliveries and attempts, and nothing else.
 * `session`: the one already read, for a grant scoped by another authorizer than a link.
 */
async function startPortal(session) {
  try {
    state.session = session ?? (await call("session"));
  } catch (error) {
    return showSignIn(error.message);
  }
  state.portal = true;
  document.body.classList.add("portal");
  $("signin").hidden = true;
  $("console").hidden = false;
  $("signout").hidden = true;
  $("role").replaceChildren();
  const until = state.session.expires_ms ? ` · this link works until ${when(state.session.expires_ms)}` : "";
  appendText($("role"), `${state.session.owner}'s endpoints${until}`);
  const nav = $("outboxes");
  nav.replaceChildren();
  for (const name of state.session.endpoints) {
    const button = el("button", name, { type: "button", "aria-pressed": "false" });
    button.addEventListener("click", () => choose(name));
    nav.append(button);
  }
  if (state.session.endpoints[0] !== undefined) await choose(state.session.endpoints[0]);
  scheduleRefresh();
}

/** The message the address names (`#message=<outbox>/<key>`), if any. */
function linkedMessage() {
  const match = /^#message=([^/]+)\/(.+)$/.exec(location.hash);
  if (!match) return null;
  try {
    return { outbox: decodeURIComponent(match[1]), key: decodeURIComponent(match[2]) };
  } catch {
    return null;
  }
}

async function choose(name) {
  if (state.outbox !== name) {
    // Nothing read of one outbox may be acted on in another.
    state.bulk = null;
    $("bulk-replay").disabled = $("bulk-purge").disabled = true;
    $("bulk-note").textContent = "";
    $("messages").replaceChildren();
    $("groups").replaceChildren();
    $("detail").hidden = true;
    $("endpoint").hidden = true;
    state.endpoint = null;
    state.endpointsFrom = null;
  }
  state.outbox = name;
  $("endpoints-section").hidden = !hasEndpoints();
  for (const button of $("outboxes").children) {
    button.setAttribute("aria-pressed", String(button.textContent === name));
  }
  state.pageStart = null;
  state.after = null;
  state.auditStale = true;
  await refresh();
  // Read on choosing and after an action, not on each refresh: a list of
  // endpoints changes when someone changes it (a portal's refresh reads it).
  if (!state.portal) await endpoints("same").catch((error) => say(error.message));
}

const outboxPath = (rest) => `outboxes/${encodeURIComponent(state.outbox)}${rest ? `/${rest}` : ""}`;

async function refresh() {
  if (!state.portal && state.session?.fleet) {
    await fleet("same").catch((error) => {
      if (error instanceof Unauthorized) return showSignIn(error.message);
      say(error.message);
    });
    if (!state.outbox) $("updated").textContent = `updated ${when(Date.now())}`;
  }
  if (!state.outbox) return;
  if (state.portal) {
    try {
      await endpoints("same");
      $("updated").textContent = `updated ${when(Date.now())}`;
    } catch (error) {
      if (error instanceof Unauthorized) return startPortal();
      say(error.message);
    }
    return;
  }
  try {
    // The topics table shows the pause switches the overview read.
    await overview();
    await Promise.all([topics(), groups(), inboxCount(), keepSelection() ? null : messages("same")]);
    // Read when the outbox is chosen and after a change, not on each refresh.
    await freshAudit();
    // A refresh clears only its own earlier failure, never an action's report.
    if (state.refreshFailed) say("");
    state.refreshFailed = false;
    $("updated").textContent = `updated ${when(Date.now())}`;
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    state.refreshFailed = true;
    say(error.message);
  }
}

function countText(count) {
  return count.capped ? `≥ ${count.count.toLocaleString()}` : count.count.toLocaleString();
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

async function overview() {
  const body = await call(outboxPath(""));
  const counts = $("counts");
  counts.replaceChildren(
    ...["due", "scheduled", "leased", "waiting", "dead"].map((name) =>
      el("div", undefined, { "data-state": name }, [el("dt", name), el("dd", countText(body.counts[name]))]),
    ),
  );
  state.counted = {
    at: Date.now(),
    capped: Object.values(body.counts).some((count) => count && count.capped),
    cap: body.count_cap,
  };
  state.paused = new Map(body.paused.map((p) => [p.topic, p]));
  showOldest(body.counts.oldest_due_age_ms);
}

/**
 * An auto-refresh: the messages due now (counted up to a small cap), how
 * overdue the oldest is, the paused topics and the last two minutes of the
 * charts, about a hundred rows read, where a full refresh (on choosing an
 * outbox, after an action, or "Refresh now") counts every state and reads
 * the lists again.
 */
async function live() {
  const outbox = state.outbox;
  const body = await call(outboxPath("live"));
  // Another outbox chosen meanwhile: these numbers are not its.
  if (state.outbox !== outbox) return;
  const due = document.querySelector('#counts [data-state="due"] dd');
  if (due) due.textContent = countText(body.live.due);
  state.paused = new Map(body.paused.map((p) => [p.topic, p]));
  showOldest(body.live.oldest_due_age_ms);
  const recent = await call(`${outboxPath("rollups")}?minutes=2`);
  if (state.outbox !== outbox) return;
  for (const point of recent.series) state.series.set(point.at_ms, point);
  charts();
}

/** The line under the counts: how overdue the oldest due message is, the paused topics, and when the counts were read. */
function showOldest(oldestMs) {
  const paused = [...state.paused.keys()];
  const counted = state.counted;
  $("oldest").replaceChildren();
  appendText(
    $("oldest"),
    `Oldest due message: ${oldestMs === null ? "none due" : `${duration(oldestMs)} overdue`}` +
      (paused.length > 0 ? ` · paused, their messages held: ${paused.join(", ")}` : "") +
      (counted ? ` · states counted ${when(counted.at)}, due counted live` : "") +
      (counted?.capped ? ` · counts stop at ${counted.cap.toLocaleString()} rows each` : ""),
  );
}

/** Bars of `values` (one per minute from `from`), with the largest value on the y axis, the window's start on the x axis, each bar's minute and value on hover, and `empty` when all are zero. */
function bars(svg, values, kind, from, empty) {
  const max = Math.max(0, ...values);
  const width = 600 / Math.max(1, values.length);
  svg.replaceChildren();
  values.forEach((value, index) => {
    if (value === 0) return;
    const height = Math.max(1, (value / max) * 118);
    const rect = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    rect.setAttribute("class", kind);
    rect.setAttribute("x", String(index * width));
    rect.setAttribute("y", String(120 - height));
    rect.setAttribute("width", String(Math.max(1, width - 1)));
    rect.setAttribute("height", String(height));
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = `${when(from + index * 60_000)}: ${value.toLocaleString()}`;
    rect.append(title);
    svg.append(rect);
  });
  const chart = svg.closest(".chart");
  chart.querySelector(".y-max").textContent = max > 0 ? max.toLocaleString() : "";
  chart.querySelector(".empty").textContent = empty;
  chart.querySelector(".empty").hidden = max > 0;
  chart.parentElement.querySelector(".x-axis .from").textContent = when(from);
}

/** The charts of the window's minutes (`state.series`), empty minutes at zero. */
function charts() {
  const minutes = Number($("window").value);
  const now = Date.now();
  const first = Math.floor((now - minutes * 60_000) / 60_000) * 60_000;
  const series = [];
  for (let at = first; at <= now; at += 60_000) series.push(state.series.get(at));
  const pick = (f) => series.map((point) => (point ? f(point) : 0));
  bars($("chart-delivered"), pick((p) => p.delivered), "delivered", first, "nothing delivered in this window");
  bars($("chart-failures"), pick((p) => p.retried + p.deferred + p.dead), "failures", first, "no failure in this window");
  bars($("chart-lateness"), pick((p) => p.lateness.p99_ms ?? 0), "lateness", first, "nothing delivered late or on time in this window");
}

async function topics() {
  const minutes = Number($("window").value);
  const body = await call(`${outboxPath("rollups")}?minutes=${minutes}`);
  state.series = new Map(body.series.map((point) => [point.at_ms, point]));
  charts();

  const names = new Set([...Object.keys(body.topics), ...state.paused.keys()]);
  const rows = [...names].sort().map((topic) => {
    const t = body.topics[topic];
    const paused = state.paused.get(topic);
    const switchButton = el("button", paused ? "Resume" : "Pause", { type: "button", class: "operator" });
    switchButton.addEventListener("click", () =>
      act(paused ? "resume" : "pause", outboxPath(`topics/${paused ? "resume" : "pause"}`), { topic }),
    );
    const stateCell = paused
      ? el("td", undefined, {}, [el("span", "paused", { class: "paused" }), el("div", paused.reason, { class: "muted" }), el("div", `since ${when(paused.paused_at_ms)}`, { class: "muted" })])
      : el("td", "running");
    return el("tr", undefined, { "data-topic": topic }, [
      el("td", topic),
      stateCell,
      el("td", t ? t.delivered : 0),
      el("td", t ? t.retried : 0),
      el("td", t ? t.deferred : 0),
      el("td", t ? t.dead : 0),
      el("td", t ? t.breaker_trips : 0),
      el("td", t ? `${duration(t.lateness.p50_ms)} / ${duration(t.lateness.p99_ms)}` : "–"),
      el("td", undefined, {}, [switchButton]),
    ]);
  });
  $("topics").replaceChildren(...rows);
}

async function groups() {
  const body = await call(outboxPath("dead/groups"));
  $("groups").replaceChildren(
    ...body.groups.map((group) => {
      // Only what the operator saw: dead letters of this outbox that died by the time of this listing.
      const selection = { topic: group.topic, error_class: group.error_class, died_by_ms: body.read_at_ms };
      const outbox = state.outbox;
      const replay = el("button", "Replay group", { type: "button", class: "operator" });
      replay.addEventListener("click", () => actOnSelection("replay", outbox, selection, group.count));
      const purge = el("button", "Purge group", { type: "button", class: "operator danger" });
      purge.addEventListener("click", () => actOnSelection("purge", outbox, selection, group.count));
      return el("tr", undefined, {}, [
        cell(group.topic),
        cell(group.error_class, { class: "error" }),
        el("td", group.count),
        el("td", when(group.first_died_at_ms)),
        el("td", undefined, { class: "actions" }, [replay, purge]),
      ]);
    }),
  );
  $("groups-note").textContent = body.complete
    ? `${body.scanned} dead letters`
    : `grouped from the oldest ${body.scanned} dead letters`;
}

/** Whether a refresh must leave the list alone: an operator is selecting in it. */
function keepSelection() {
  return document.querySelector("#messages input[type=checkbox]:checked") !== null;
}

/** Shows the first page ("first"), the page shown again ("same") or the next one ("next"). */
async function messages(which) {
  const params = new URLSearchParams({ state: $("state").value, limit: "50" });
  for (const [name, id] of [["topic", "f-topic"], ["subject", "f-subject"], ["id", "f-id"]]) {
    if ($(id).value) params.set(name, $(id).value);
  }
  const from = $("f-from").value;
  if (from) params.set("from_ms", String(inputTime("f-from")));
  const start = which === "next" ? state.after : which === "same" ? state.pageStart : null;
  if (start) params.set("after", start);
  const body = await call(`${outboxPath("messages")}?${params}`);
  const listed = $("state").value;
  // Dead letters are replayed or purged, scheduled messages made due now.
  const selectable = listed === "dead" || listed === "scheduled";
  $("messages").replaceChildren(
    ...body.messages.map((message) => {
      const key = `${message.due_at}.${message.id}`;
      const box = el("input", undefined, { type: "checkbox", "data-id": message.id, "data-key": key, "aria-label": `select ${message.id}` });
      box.disabled = !selectable;
      const open = el("button", message.id, { type: "button", class: "link", title: `open ${message.id}` });
      open.addEventListener("click", () => openDetail(key).catch((error) => say(error.message)));
      const due = message.paused
        ? cell(`paused: ${message.paused.reason}`, { class: "paused" })
        : cell(when(message.due_at));
      return el("tr", undefined, { "data-id": message.id }, [
        el("td", undefined, {}, [box]),
        el("td", undefined, { title: message.id }, [open]),
        cell(message.topic),
        cell(message.subject ?? "–"),
        el("td", message.attempts),
        cell(message.last_error ?? "–", { class: "error" }),
        due,
      ]);
    }),
  );
  state.pageStart = start;
  state.after = body.next;
  $("next-page").hidden = !body.next;
  $("replay-selected").hidden = $("purge-selected").hidden = listed !== "dead";
  $("reschedule-selected").hidden = listed !== "scheduled";
  $("page-note").textContent =
    body.messages.length === 0 && body.next
      ? `no match among the next ${body.scan} rows: go on with the next page`
      : `${body.messages.length} shown`;
}

/** Shows the message at `key` of the chosen outbox: every field, its payload, its attempts. */
async function openDetail(key) {
  let body;
  try {
    body = await call(`${outboxPath("message")}?${new URLSearchParams({ key })}`);
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    return say(error.message);
  }
  const m = body.message;
  history.replaceState(null, "", `#message=${encodeURIComponent(state.outbox)}/${encodeURIComponent(key)}`);
  $("detail-title").textContent = "";
  appendText($("detail-title"), `Message ${m.id}`);
  const hidden = "(hidden: the console shows it only with show_payloads)";
  const fields = [
    ["id", m.id],
    ["outbox", state.outbox],
    ["topic", m.topic],
    ["state", m.paused ? `${m.state}, held by the pause of its topic: ${m.paused.reason} (since ${when(m.paused.paused_at_ms)})` : m.state],
    [m.state === "dead" ? "died" : m.state === "leased" ? "lease ends" : "due", when(m.due_at)],
    ["created", when(m.created_at)],
    ["subject", m.subject ?? "–"],
    ["attempts", m.attempts],
    ["unsettled leases", m.unsettled_leases],
    ["deferrals", m.deferrals],
    ["last error", m.last_error ?? "–"],
    ["ordering key", m.keys_hidden ? hidden : m.ordering_key ?? "–"],
    ...(m.waits_on ? [["waits on", `${m.waits_on.id} (${m.waits_on.state})`]] : []),
    ["dedup key", m.keys_hidden ? hidden : m.dedup_key ?? "–"],
    ["trace id", m.trace_id ?? "–"],
  ];
  $("detail-fields").replaceChildren(...fields.flatMap(([name, value]) => [el("dt", name), el("dd", value, { "data-field": name })]));
  let payload = `${m.payload_bytes.toLocaleString()} bytes ${hidden}`;
  if (m.unopened) {
    payload = `sealed, ${m.payload_bytes.toLocaleString()} bytes: it cannot be opened (${m.unopened})`;
  } else if (m.payload !== null) {
    try {
      payload = JSON.stringify(JSON.parse(m.payload), null, 2);
    } catch {
      payload = m.payload;
    }
  }
  $("detail-payload").replaceChildren();
  appendText($("detail-payload"), payload);
  $("detail-attempts").replaceChildren(
    ...body.attempts.map((a) =>
      el("tr", undefined, {}, [
        el("td", a.attempt),
        el("td", when(a.at_ms)),
        el("td", a.status ?? "–"),
        el("td", duration(a.duration_ms)),
        el("td", a.outcome),
        el("td", a.error ?? "–", { class: "error" }),
        el("td", a.body || "–"),
      ]),
    ),
  );
  $("detail-note").textContent =
    body.attempts.length === 0
      ? "No attempt logged: none yet, or its deliverer logs none (the log keeps failures by default)."
      : `The last ${body.attempts.length} logged attempt(s), oldest first.`;
  $("detail").hidden = false;
  $("detail").scrollIntoView({ block: "start" });
}

function closeDetail() {
  $("detail").hidden = true;
  history.replaceState(null, "", location.pathname + location.search);
}

/** The chosen outbox's audit log, newest first, a page at a time. */
async function auditLog(which) {
  if (which === "first") state.auditBefore = null;
  else state.auditBefore = state.auditNext;
  const params = new URLSearchParams();
  if (state.auditBefore) params.set("before", state.auditBefore);
  const page = await call(`${outboxPath("audit")}?${params}`);
  state.auditNext = page.next_before;
  const compact = (value) => (value === null || value === undefined ? "–" : JSON.stringify(value));
  $("audit").replaceChildren(
    ...page.entries.map((entry) =>
      el("tr", undefined, { "data-audit": entry.id }, [
        cell(when(entry.at_ms)),
        cell(entry.who),
        cell(entry.role),
        cell(entry.action),
        cell(compact(entry.selection)),
        cell(entry.result === null ? "(not recorded)" : compact(entry.result)),
      ]),
    ),
  );
  $("audit-next").hidden = !page.next_before;
  $("audit-note").textContent = page.entries.length === 0 ? "No change made through the console yet." : "";
}

/** A count as a member reported it: past the cap, "more than the cap". */
const fleetCount = (n, cap) => (n > cap ? `> ${cap.toLocaleString()}` : n.toLocaleString());

/** A path of this host, as the server builds a member's console link; anything else is not linked. */
const ownPath = (link) => typeof link === "string" && link.startsWith("/") && !link.startsWith("//") && !link.includes("\\");

/** The members' outboxes a page at a time, in the order chosen. */
async function fleet(which) {
  if (which === "first") state.fleetFrom = null;
  if (which === "next") state.fleetFrom = state.fleetNext;
  const params = new URLSearchParams({ order: $("fleet-order").value });
  if (state.fleetFrom) params.set("after", state.fleetFrom);
  const page = await call(`fleet?${params}`);
  state.fleetNext = page.next;
  const now = Date.now();
  $("fleet").replaceChildren(
    ...page.members.map((m) => {
      const link = ownPath(m.console) ? el("a", "console", { href: m.console }) : el("span", "–");
      return el("tr", undefined, { "data-member": m.member }, [
        cell(m.member),
        cell(fleetCount(m.dead, page.count_cap), m.dead > 0 ? { class: "error" } : {}),
        cell(fleetCount(m.backlog, page.count_cap)),
        cell(m.last_error ?? "–", m.last_error ? { class: "error" } : {}),
        cell(m.oldest_due_at_ms === null ? "–" : `${when(m.oldest_due_at_ms)} (${duration(now - m.oldest_due_at_ms)} ago)`),
        cell(`${duration(now - m.reported_at_ms)} ago`, { title: when(m.reported_at_ms) }),
        cell(m.outbox),
        el("td", undefined, {}, [link]),
      ]);
    }),
  );
  $("fleet-next").hidden = !page.next;
  const empty = {
    name: "No member has reported yet: a member's row appears after its first drain.",
    dead: "No member has dead letters.",
    oldest_due: "No member has a message due.",
  };
  $("fleet-note").textContent = page.members.length === 0 ? empty[page.order] : "";
}

const hasEndpoints = () => state.session.endpoints.includes(state.outbox);

/** Every owner's endpoints a page at a time, or one owner's. */
async function endpoints(which) {
  if (!hasEndpoints()) return;
  const owner = $("e-owner").value.trim();
  if (which === "first") state.endpointsFrom = null;
  if (which === "next") state.endpointsFrom = state.endpointsNext;
  const params = new URLSearchParams();
  if (owner) params.set("owner", owner);
  else if (state.endpointsFrom) params.set("after", state.endpointsFrom);
  const page = await call(`${outboxPath("endpoints")}?${params}`);
  state.endpointsNext = page.next_after;
  $("endpoints").replaceChildren(
    ...page.endpoints.map((e) => {
      const open = el("button", e.id, { type: "button", class: "link" });
      open.addEventListener("click", () => openEndpoint(e.owner, e.id).catch((error) => say(error.message)));
      return el("tr", undefined, { "data-endpoint": e.id }, [
        el("td", undefined, { title: e.id }, [open]),
        cell(e.owner),
        cell(e.url),
        cell(endpointState(e), { class: e.state === "enabled" ? "" : "paused" }),
        cell(e.event_types.join(", ")),
        cell(when(e.previous_secret_expires_ms)),
      ]);
    }),
  );
  $("endpoints-next").hidden = !page.next_after;
  $("endpoints-note").textContent =
    page.endpoints.length === 0
      ? state.portal ? "You have no endpoint yet." : owner ? "This owner has no endpoint." : "No endpoint yet."
      : `${page.endpoints.length} endpoint(s)${owner ? "" : page.next_after ? ", more on the next page" : ""}.${page.endpoints[0].details_hidden ? " URLs show their origin only (paths often hold a token): the console shows them whole only with show_payloads." : ""}`;
}

function endpointState(e) {
  return e.state === "enabled" ? "enabled" : `${e.state}: ${e.reason} (since ${when(e.since_ms)})`;
}

/** Shows one endpoint: its fields (never a secret) and its latest attempts. */
async function openEndpoint(owner, id) {
  const body = await call(`${outboxPath("endpoint")}?${new URLSearchParams({ owner, id })}`);
  const e = body.endpoint;
  state.endpoint = { owner, id };
  $("endpoint-title").replaceChildren();
  appendText($("endpoint-title"), `Endpoint ${e.id}`);
  const fields = [
    ["id", e.id],
    ["owner", e.owner],
    ["URL", e.url],
    ["kind", e.kind],
    ["state", endpointState(e)],
    ["event types", e.event_types.join(", ")],
    ["filter", e.filter ? `${e.filter.field} = ${e.filter.equals}` : "–"],
    ["rate limit", e.rate_limit_per_second ? `${e.rate_limit_per_second} a second` : "–"],
    ["body", e.body],
    ["previous secret", e.previous_secret_expires_ms ? `signs until ${when(e.previous_secret_expires_ms)}` : "none: one secret signs"],
    ...(state.portal ? [] : [["metadata", e.details_hidden ? "(hidden: the console shows it only with show_payloads)" : JSON.stringify(e.metadata)]]),
    ["created", when(e.created_ms)],
    ["updated", when(e.updated_ms)],
  ];
  $("endpoint-fields").replaceChildren(...fields.flatMap(([name, value]) => [el("dt", name), el("dd", value, { "data-field": name })]));
  $("ep-enable").disabled = e.state === "enabled";
  $("ep-pause").disabled = e.state === "paused";
  $("ep-disable").disabled = e.state === "disabled";
  $("endpoint-attempts").replaceChildren(
    ...body.attempts.map((a) =>
      el("tr", undefined, {}, [
        cell(when(a.at_ms)),
        cell(a.event_id ?? a.message_id),
        cell(a.attempt),
        cell(a.status ?? "–"),
        cell(duration(a.duration_ms)),
        cell(a.outcome),
        cell(a.error ?? "–", { class: "error" }),
        cell(a.body || "–"),
      ]),
    ),
  );
  $("endpoint-note").textContent =
    body.attempts.length === 0 ? "No attempt logged yet." : `The latest ${body.attempts.length} logged attempt(s), newest first.`;
  $("endpoint").hidden = false;
  await deliveries();
}

/** The open endpoint's deliveries in the chosen state. */
async function deliveries() {
  const target = state.endpoint;
  if (!target) return;
  const params = new URLSearchParams({ owner: target.owner, endpoint: target.id, state: $("ep-state").value });
  const page = await call(`${outboxPath("deliveries")}?${params}`);
  $("endpoint-deliveries").replaceChildren(
    ...page.messages.map((m) =>
      el("tr", undefined, { "data-id": m.id }, [
        // A delivery's id is `<event id>:<endpoint id>`.
        cell(m.id.split(":")[0], { title: m.id }),
        cell(m.attempts),
        cell(m.last_error ?? "–", { class: "error" }),
        cell(when(m.due_at)),
      ]),
    ),
  );
  const which = $("ep-state").value;
  const cut = page.walk_cut ? ` The console looks through the first ${state.session.scan} ${which} messages of the outbox only: older ones may be beyond.` : "";
  $("deliveries-note").textContent =
    (page.messages.length === 0 ? `No ${which} delivery found.` : `${page.messages.length} ${which} deliver${page.messages.length === 1 ? "y" : "ies"}${page.next ? ", more after these" : ""}.`) + cut;
}

async function replayDeliveries() {
  const target = state.endpoint;
  if (!target || !confirm(`Replay the dead deliveries of ${target.id}?`)) return;
  try {
    const answer = await call(`${outboxPath("deliveries")}/replay`, { method: "POST", body: { owner: target.owner, endpoint: target.id } });
    say(`${target.id}: ${answer.done} dead deliver${answer.done === 1 ? "y" : "ies"} replayed${answer.more ? "; more remain: replay again" : ""}`);
    await deliveries();
  } catch (error) {
    if (error instanceof Unauthorized) return start();
    say(`replay failed: ${error.message}`);
  }
}

/** Does `verb` to the open endpoint, then reads it and the list again. */
async function endpointAction(verb, extra = {}) {
  const target = state.endpoint;
  if (!target) return;
  try {
    const answer = await call(`${outboxPath("endpoint")}/${verb}`, { method: "POST", body: { ...target, ...extra } });
    const done = {
      enable: "enabled",
      pause: "paused",
      disable: "disabled",
      test: `sent a test event (${answer.event_id}): the next drain delivers it`,
      recover: `${answer.deliveries} event(s) to send again${answer.next_since_ms ? `; more since ${when(answer.next_since_ms)}: recover again from there` : ""}`,
      rotate: "secret rotated",
    }[verb];
    say(`${target.id}: ${done}`);
    await openEndpoint(target.owner, target.id);
    await endpoints("same");
    await freshAudit();
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    say(`${verb} failed: ${error.message}`);
  }
}

/** A new signing secret, made in the browser: 32 random bytes. */
function newSecret() {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return `whsec_${btoa(String.fromCharCode(...bytes))}`;
}

async function rotateSecret() {
  const target = state.endpoint;
  if (!target || !confirm(`Rotate the secret of ${target.id}? The old one still signs for ${$("ep-overlap").selectedOptions[0].textContent}.`)) return;
  const secret = newSecret();
  $("ep-secret").hidden = true;
  await endpointAction("rotate", { secret, overlap_s: Number($("ep-overlap").value) });
  if ($("status").textContent.endsWith("secret rotated")) {
    $("ep-secret-value").textContent = secret;
    $("ep-secret").hidden = false;
  }
}

async function inboxCount() {
  if (state.session.inboxes.length === 0) return;
  const name = $("inbox-name").value;
  const body = await call(`inboxes/${encodeURIComponent(name)}`);
  $("inbox-count").textContent = `${name}: ${countText(body.keys)} keys processed`;
}

/** Shows what the console's outboxes, inboxes and application hold of a subject. */
async function exportSubject() {
  const subject = $("subject").value;
  try {
    const body = await call(`subjects?${new URLSearchParams({ subject })}`);
    const parts = [
      ...Object.entries(body.outboxes).map(([name, rows]) => `${rows.length} message(s) in ${name}`),
      ...Object.entries(body.inboxes).map(([name, rows]) => `${rows.length} key(s) in ${name}`),
    ];
    if (body.erased_at_ms !== null) parts.push(`erased ${when(body.erased_at_ms)}`);
    $("subject-summary").replaceChildren();
    appendText($("subject-summary"), `${subject}: ${parts.join(", ")}`);
    $("subject-export").replaceChildren();
    appendText($("subject-export"), JSON.stringify(body, null, 2));
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    $("subject-summary").replaceChildren();
    appendText($("subject-summary"), error.message);
  }
}

async function eraseSubject() {
  const subject = $("subject").value;
  if (!subject || !confirm(`erase everything stored about ${subject}? This cannot be undone.`)) return;
  try {
    const body = await call("subjects/erase", { method: "POST", body: { subject } });
    $("subject-export").textContent = "";
    const counted = (rows) => Object.entries(rows ?? {}).map(([name, count]) => `${count} in ${name}`);
    $("subject-summary").replaceChildren();
    appendText(
      $("subject-summary"),
      `${subject} erased: ${[...counted(body.outboxes), ...counted(body.inboxes), ...counted(body.application)].join(", ") || "nothing was stored"}`,
    );
    await refresh();
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    $("subject-summary").replaceChildren();
    appendText($("subject-summary"), `erasure failed: ${error.message}`);
  }
}

/** A time of a datetime-local input in ms (as UTC when the switch says so), or undefined. */
function inputTime(id) {
  const value = $(id).value;
  if (!value) return undefined;
  return new Date($("utc").checked ? `${value}Z` : value).getTime();
}

/** Counts the dead letters the bulk form matches, and offers to act on them. */
async function countMatching() {
  const selection = {};
  for (const [name, id] of [["topic", "b-topic"], ["error_class", "b-class"], ["subject", "b-subject"]]) {
    if ($(id).value) selection[name] = $(id).value;
  }
  const params = new URLSearchParams(selection);
  const from = inputTime("b-from");
  const to = inputTime("b-to");
  if (from !== undefined) params.set("from_ms", String(from));
  if (to !== undefined) params.set("to_ms", String(to));
  try {
    const body = await call(`${outboxPath("dead/count")}?${params}`);
    if (from !== undefined) selection.from_ms = from;
    // What died after the count is left alone.
    selection.died_by_ms = to === undefined ? body.read_at_ms : Math.min(to, body.read_at_ms);
    state.bulk = { outbox: state.outbox, selection, count: body.count };
    $("bulk-note").textContent = body.complete
      ? `${body.count} dead letter(s) match`
      : `${body.count} dead letter(s) match among the oldest ${body.scanned} read: act, then count again for more`;
    $("bulk-replay").disabled = $("bulk-purge").disabled = body.count === 0;
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    $("bulk-note").replaceChildren();
    appendText($("bulk-note"), error.message);
  }
}

/** Unchecks the list's boxes: what they named has been acted on. */
function clearSelection() {
  for (const box of document.querySelectorAll("#messages input[type=checkbox]:checked")) box.checked = false;
}

/** What an action's answer means, in words. */
function report(verb, answer) {
  if ("paused" in answer) {
    return `${answer.topic}: ${answer.paused ? "paused" : "resumed"}${answer.changed ? "" : ` (it was ${answer.paused ? "paused" : "running"} already)`}`;
  }
  if ("selected" in answer) return `${verb}: ${answer.done} of ${answer.selected} selected done`;
  return `${verb}: done`;
}

async function act(verb, path, body) {
  try {
    const answer = await call(path, { method: "POST", body });
    clearSelection();
    say(report(verb, answer));
    await refresh();
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    say(`${verb} failed: ${error.message}`);
  }
}

/** Pauses a topic; one the server has not seen settle lately only once the operator confirms it is meant. */
async function pauseTopic(topic, reason) {
  const path = outboxPath("topics/pause");
  try {
    await call(path, { method: "POST", body: { topic, reason } });
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    if (!error.message.includes('"unseen": true')) return say(`pause failed: ${error.message}`);
    if (!confirm(`${visible(topic)} is not paused and had no message settled in the last hour. Pause it all the same?`)) {
      return say(`pause of ${topic} not sent`);
    }
    return act("pause", path, { topic, reason, unseen: true });
  }
  say(`${topic}: paused`);
  await refresh();
}

/** A selection's criteria, in words. */
function describe(selection) {
  const said = [
    ["topic", selection.topic],
    ["error class", selection.error_class],
    ["subject", selection.subject],
    ["died from", selection.from_ms === undefined ? undefined : when(selection.from_ms)],
    ["died by", selection.died_by_ms === undefined ? undefined : when(selection.died_by_ms)],
  ].filter(([, value]) => value !== undefined);
  // Each value isolated: right-to-left text in it cannot reorder the words around it.
  return said.map(([name, value]) => `${name} \u2068${visible(value)}\u2069`).join(", ");
}

/** Replays or purges the `count` dead letters of `outbox` that `selection` matched, in batches the server bounds, never past the count confirmed. */
async function actOnSelection(verb, outbox, selection, count) {
  if (!confirm(`${verb} ${count} dead letter(s) of ${visible(outbox)} matching ${describe(selection)}?`)) return;
  const path = `outboxes/${encodeURIComponent(outbox)}/dead/${verb}`;
  let done = 0;
  try {
    // In batches of at most the server's selection, and never past the count confirmed.
    while (done < count) {
      const answer = await call(path, {
        method: "POST",
        body: { ...selection, limit: Math.min(count - done, state.session.max_selection) },
      });
      done += answer.done;
      say(`${verb}: ${done} of ${count}…`);
      if (!answer.more || answer.done === 0) break;
    }
    say(`${verb}: ${done} done`);
  } catch (error) {
    say(`${verb} stopped after ${done}: ${error.message}`);
  }
  clearSelection();
  await refresh();
}

function selectedIds() {
  return [...document.querySelectorAll("#messages input[type=checkbox]:checked")].map((box) => box.dataset.id);
}

/** The selected messages' keys (`<due_at>.<id>`): what a reschedule finds them by. */
function selectedKeys() {
  return [...document.querySelectorAll("#messages input[type=checkbox]:checked")].map((box) => box.dataset.key);
}

function scheduleRefresh() {
  clearInterval(state.timer);
  const seconds = Number($("refresh").value);
  if (seconds > 0) {
    state.timer = setInterval(() => {
      if (!document.hidden) autoRefresh();
    }, seconds * 1000);
  }
}

/** The audit log's first page, when a change was made since it was read (an operator's view only). */
async function freshAudit() {
  if (!state.auditStale || state.portal || state.session?.role !== "operator") return;
  state.auditStale = false;
  await auditLog("first");
}

/** What the timer reads: an outbox's live numbers (see `live`); the fleet's page and a portal's endpoints as a full refresh does. */
async function autoRefresh() {
  if (state.portal || !state.outbox) return refresh();
  try {
    await live();
    await freshAudit();
    if (state.refreshFailed) say("");
    state.refreshFailed = false;
    $("updated").textContent = `updated ${when(Date.now())}`;
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    state.refreshFailed = true;
    say(error.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("utc").checked = localStorage.getItem(UTC_KEY) === "1";
  $("utc").addEventListener("change", () => {
    localStorage.setItem(UTC_KEY, $("utc").checked ? "1" : "0");
    refresh();
  });
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("token").value);
    $("token").value = "";
    start();
  });
  $("signout").addEventListener("click", () => {
    localStorage.removeItem(TOKEN_KEY);
    showSignIn("Signed out.");
  });
  // Signed in or out in another tab: this one follows.
  window.addEventListener("storage", (event) => {
    if (event.key === TOKEN_KEY) start();
  });
  $("detail-close").addEventListener("click", closeDetail);
  $("endpoints-form").addEventListener("submit", (event) => {
    event.preventDefault();
    endpoints("first").catch((error) => say(error.message));
  });
  $("fleet-order").addEventListener("change", () => fleet("first").catch((error) => say(error.message)));
  $("fleet-next").addEventListener("click", () => fleet("next").catch((error) => say(error.message)));
  $("audit-next").addEventListener("click", () => auditLog("next").catch((error) => say(error.message)));
  $("endpoints-next").addEventListener("click", () => endpoints("next").catch((error) => say(error.message)));
  $("endpoint-close").addEventListener("click", () => {
    $("endpoint").hidden = true;
    $("ep-secret").hidden = true;
    state.endpoint = null;
  });
  $("ep-enable").addEventListener("click", () => endpointAction("enable"));
  $("ep-state").addEventListener("change", () => deliveries().catch((error) => say(error.message)));
  $("ep-replay").addEventListener("click", replayDeliveries);
  $("ep-test").addEventListener("click", () => endpointAction("test"));
  for (const verb of ["pause", "disable"]) {
    $(`ep-${verb}`).addEventListener("click", () => {
      const reason = prompt(`Why ${verb} ${state.endpoint?.id}? (its owner may see this)`, `${verb}d by an operator`);
      if (reason !== null) endpointAction(verb, { reason });
    });
  }
  $("ep-recover").addEventListener("submit", (event) => {
    event.preventDefault();
    const since_ms = inputTime("ep-since");
    if (since_ms !== undefined) endpointAction("recover", { since_ms });
  });
  $("ep-rotate").addEventListener("submit", (event) => {
    event.preventDefault();
    rotateSecret();
  });
  $("bulk-form").addEventListener("submit", (event) => {
    event.preventDefault();
    countMatching();
  });
  for (const input of document.querySelectorAll("#bulk-form input")) {
    // A changed filter must be counted again before it is acted on.
    input.addEventListener("input", () => ($("bulk-replay").disabled = $("bulk-purge").disabled = true));
  }
  for (const verb of ["replay", "purge"]) {
    $(`bulk-${verb}`).addEventListener("click", async () => {
      if (!state.bulk) return;
      await actOnSelection(verb, state.bulk.outbox, state.bulk.selection, state.bulk.count);
      $("bulk-replay").disabled = $("bulk-purge").disabled = true;
      $("bulk-note").textContent = "";
    });
  }
  $("refresh").addEventListener("change", scheduleRefresh);
  $("refresh-now").addEventListener("click", () => refresh());
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && Number($("refresh").value) > 0) autoRefresh();
  });
  $("window").addEventListener("change", () => topics().catch((error) => say(error.message)));
  $("filter").addEventListener("submit", (event) => {
    event.preventDefault();
    messages("first").catch((error) => say(error.message));
  });
  $("next-page").addEventListener("click", () => messages("next").catch((error) => say(error.message)));
  $("replay-selected").addEventListener("click", () => {
    const ids = selectedIds();
    if (ids.length > 0) act("replay", outboxPath("dead/replay"), { ids });
  });
  $("purge-selected").addEventListener("click", () => {
    const ids = selectedIds();
    if (ids.length > 0 && confirm(`purge ${ids.length} dead letter(s)?`)) act("purge", outboxPath("dead/purge"), { ids });
  });
  $("reschedule-selected").addEventListener("click", () => {
    const keys = selectedKeys();
    if (keys.length > 0) act("reschedule", outboxPath("messages/reschedule"), { keys });
  });
  $("inbox-name").addEventListener("change", () => inboxCount().catch((error) => say(error.message)));
  $("subject-form").addEventListener("submit", (event) => {
    event.preventDefault();
    exportSubject();
  });
  $("erase-subject").addEventListener("click", eraseSubject);
  $("pause-form").addEventListener("submit", (event) => {
    event.preventDefault();
    pauseTopic($("pause-topic").value, $("pause-reason").value);
  });
  $("inbox-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = encodeURIComponent($("inbox-name").value);
    try {
      const body = await call(`inboxes/${name}/keys?${new URLSearchParams({ key: $("inbox-key").value })}`);
      $("inbox-result").replaceChildren();
      appendText($("inbox-result"), `${body.key}: ${body.seen ? "processed" : "not seen"}`);
    } catch (error) {
      $("inbox-result").replaceChildren();
      appendText($("inbox-result"), error.message);
    }
  });
  start();
});
