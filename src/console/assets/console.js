// The outbox console's page. Every text that comes from the API (topics,
// subjects, errors, payloads) is written with textContent: never as markup.
"use strict";

const api = new URL("api/", document.baseURI);
const TOKEN_KEY = "outbox-console-token";
// `pageStart`: the cursor the shown page of messages began at (a refresh
// shows the same page); `after`: where the next page begins.
const state = { session: null, outbox: null, pageStart: null, after: null, timer: null, paused: new Map(), refreshFailed: false };

const $ = (id) => document.getElementById(id);

/** An element with text and attributes; children appended as they are. */
function el(tag, text, attributes = {}, children = []) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

function headers(changes) {
  const result = { accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) result.authorization = `Bearer ${token}`;
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
  return answer;
}

const say = (text) => ($("status").textContent = text);

function showSignIn(why) {
  $("console").hidden = true;
  $("signin").hidden = false;
  $("signin-why").textContent = why ?? "";
}

async function start() {
  try {
    state.session = await call("session");
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    return say(error.message);
  }
  $("signin").hidden = true;
  $("console").hidden = false;
  $("role").textContent = `signed in as ${state.session.role}`;
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
  if (state.session.outboxes.length > 0) await choose(state.session.outboxes[0]);
  scheduleRefresh();
}

async function choose(name) {
  state.outbox = name;
  for (const button of $("outboxes").children) {
    button.setAttribute("aria-pressed", String(button.textContent === name));
  }
  state.pageStart = null;
  state.after = null;
  await refresh();
}

const outboxPath = (rest) => `outboxes/${encodeURIComponent(state.outbox)}${rest ? `/${rest}` : ""}`;

async function refresh() {
  if (!state.outbox) return;
  try {
    // The topics table shows the pause switches the overview read.
    await overview();
    await Promise.all([topics(), groups(), inboxCount(), keepSelection() ? null : messages("same")]);
    // A refresh clears only its own earlier failure, never an action's report.
    if (state.refreshFailed) say("");
    state.refreshFailed = false;
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
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
  const capped = Object.values(body.counts).some((count) => count && count.capped);
  $("oldest").textContent =
    `Oldest due message: ${body.counts.oldest_due_age_ms === null ? "none due" : `${duration(body.counts.oldest_due_age_ms)} overdue`}` +
    (capped ? ` · counts stop at ${body.count_cap.toLocaleString()} rows each` : "");
  state.paused = new Map(body.paused.map((p) => [p.topic, p]));
}

function bars(svg, values, kind) {
  const max = Math.max(1, ...values);
  const width = 600 / Math.max(1, values.length);
  svg.replaceChildren();
  values.forEach((value, index) => {
    const height = (value / max) * 118;
    const rect = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    rect.setAttribute("class", kind);
    rect.setAttribute("x", String(index * width));
    rect.setAttribute("y", String(120 - height));
    rect.setAttribute("width", String(Math.max(1, width - 1)));
    rect.setAttribute("height", String(height));
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = String(value);
    rect.append(title);
    svg.append(rect);
  });
}

async function topics() {
  const minutes = Number($("window").value);
  const body = await call(`${outboxPath("rollups")}?minutes=${minutes}`);
  // One slot per minute of the window, empty minutes at zero.
  const now = Date.now();
  const first = Math.floor((now - minutes * 60_000) / 60_000) * 60_000;
  const slots = new Map(body.series.map((point) => [point.at_ms, point]));
  const series = [];
  for (let at = first; at <= now; at += 60_000) series.push(slots.get(at));
  const pick = (f) => series.map((point) => (point ? f(point) : 0));
  bars($("chart-delivered"), pick((p) => p.delivered), "delivered");
  bars($("chart-failures"), pick((p) => p.retried + p.deferred + p.dead), "failures");
  bars($("chart-lateness"), pick((p) => p.lateness.p99_ms ?? 0), "lateness");

  const names = new Set([...Object.keys(body.topics), ...state.paused.keys()]);
  const rows = [...names].sort().map((topic) => {
    const t = body.topics[topic];
    const paused = state.paused.get(topic);
    const switchButton = el("button", paused ? "Resume" : "Pause", { type: "button", class: "operator" });
    switchButton.addEventListener("click", () =>
      act(paused ? "resume" : "pause", outboxPath(`topics/${paused ? "resume" : "pause"}`), { topic }),
    );
    const stateCell = paused
      ? el("td", undefined, {}, [el("span", "paused", { class: "paused" }), el("div", paused.reason, { class: "muted" })])
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
      // Only what the operator saw: dead letters that died by the time of this listing.
      const selection = { topic: group.topic, error_class: group.error_class, died_by_ms: body.read_at_ms };
      const replay = el("button", "Replay group", { type: "button", class: "operator" });
      replay.addEventListener("click", () => actOnGroup("replay", selection, group.count));
      const purge = el("button", "Purge group", { type: "button", class: "operator danger" });
      purge.addEventListener("click", () => actOnGroup("purge", selection, group.count));
      return el("tr", undefined, {}, [
        el("td", group.topic),
        el("td", group.error_class, { class: "error" }),
        el("td", group.count),
        el("td", new Date(group.first_died_at_ms).toLocaleString()),
        el("td", undefined, {}, [replay, purge]),
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
  if ($("f-from").value) params.set("from_ms", String(new Date($("f-from").value).getTime()));
  const start = which === "next" ? state.after : which === "same" ? state.pageStart : null;
  if (start) params.set("after", start);
  const body = await call(`${outboxPath("messages")}?${params}`);
  const listed = $("state").value;
  // Dead letters are replayed or purged, scheduled messages made due now.
  const selectable = listed === "dead" || listed === "scheduled";
  $("messages").replaceChildren(
    ...body.messages.map((message) => {
      const box = el("input", undefined, { type: "checkbox", "data-id": message.id, "data-key": `${message.due_at}.${message.id}` });
      box.disabled = !selectable;
      const details = [
        `state: ${message.state}`,
        `created: ${new Date(message.created_at).toLocaleString()}`,
        `unsettled leases: ${message.unsettled_leases}`,
        `deferrals: ${message.deferrals}`,
        `ordering key: ${message.keys_hidden ? "(hidden)" : message.ordering_key ?? "–"}`,
        ...(message.waits_on ? [`waits on: ${message.waits_on.id} (${message.waits_on.state})`] : []),
        `dedup key: ${message.keys_hidden ? "(hidden)" : message.dedup_key ?? "–"}`,
        `trace id: ${message.trace_id ?? "–"}`,
        message.payload === null ? `payload: ${message.payload_bytes} bytes (hidden)` : `payload: ${message.payload}`,
      ].join("\n");
      return el("tr", undefined, { "data-id": message.id }, [
        el("td", undefined, {}, [box]),
        el("td", message.id),
        el("td", message.topic),
        el("td", message.subject ?? "–"),
        el("td", message.attempts),
        el("td", message.last_error ?? "–", { class: "error" }),
        el("td", new Date(message.due_at).toLocaleString()),
        el("td", undefined, {}, [el("pre", details)]),
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
    if (body.erased_at_ms !== null) parts.push(`erased ${new Date(body.erased_at_ms).toLocaleString()}`);
    $("subject-summary").textContent = `${subject}: ${parts.join(", ")}`;
    $("subject-export").textContent = JSON.stringify(body, null, 2);
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    $("subject-summary").textContent = error.message;
  }
}

async function eraseSubject() {
  const subject = $("subject").value;
  if (!subject || !confirm(`erase everything stored about ${subject}? This cannot be undone.`)) return;
  try {
    const body = await call("subjects/erase", { method: "POST", body: { subject } });
    $("subject-export").textContent = "";
    $("subject-summary").textContent = `${subject} erased: ${JSON.stringify(body)}`;
    await refresh();
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    $("subject-summary").textContent = `erasure failed: ${error.message}`;
  }
}

/** Unchecks the list's boxes: what they named has been acted on. */
function clearSelection() {
  for (const box of document.querySelectorAll("#messages input[type=checkbox]:checked")) box.checked = false;
}

async function act(verb, path, body) {
  try {
    const answer = await call(path, { method: "POST", body });
    clearSelection();
    say(`${verb}: ${JSON.stringify(answer)}`);
    await refresh();
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn(error.message);
    say(`${verb} failed: ${error.message}`);
  }
}

async function actOnGroup(verb, selection, count) {
  if (!confirm(`${verb} ${count} dead letter(s) of ${selection.topic} (${selection.error_class})?`)) return;
  let done = 0;
  try {
    // In batches of at most the server's selection, and never past the count confirmed.
    while (done < count) {
      const answer = await call(outboxPath(`dead/${verb}`), {
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
      if (!document.hidden) refresh();
    }, seconds * 1000);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token").value = "";
    start();
  });
  $("refresh").addEventListener("change", scheduleRefresh);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && Number($("refresh").value) > 0) refresh();
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
    act("pause", outboxPath("topics/pause"), { topic: $("pause-topic").value, reason: $("pause-reason").value });
  });
  $("inbox-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = encodeURIComponent($("inbox-name").value);
    try {
      const body = await call(`inboxes/${name}/keys?${new URLSearchParams({ key: $("inbox-key").value })}`);
      $("inbox-result").textContent = `${body.key}: ${body.seen ? "processed" : "not seen"}`;
    } catch (error) {
      $("inbox-result").textContent = error.message;
    }
  });
  start();
});
