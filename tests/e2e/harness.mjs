// Shared Miniflare setup for the end-to-end tests: a built Worker with an
// in-memory D1, the repository's migrations applied.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import net from "node:net";
import path from "node:path";
import { Miniflare } from "miniflare";

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const compatibilityDate = "2026-04-01";

/** The Miniflare options that load the worker-build output in `crate` (relative to the repo root). */
export function builtWorker(crate) {
  const build = path.join(root, crate, "build");
  return {
    modules: true,
    scriptPath: path.join(build, "index.js"),
    modulesRoot: build,
    modulesRules: [
      { type: "ESModule", include: ["**/*.js"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
  };
}

/**
 * A Miniflare running the worker-build output in `crate` (relative to the repo
 * root). `durableObjects` maps bindings to `{ className, useSQLite }`.
 */
export async function start(
  crate,
  {
    bindings = {},
    durableObjects = {},
    queueProducers,
    queueConsumers,
    hyperdrives,
    outboundService,
    analyticsEngineDatasets,
    email,
    log,
    migrate = true,
    migrations = "migrations",
    onLog,
  } = {},
) {
  const mf = await hyperdriveProxiesWithErrorListeners(hyperdrives !== undefined, async () => {
    const mf = new Miniflare({
      ...builtWorker(crate),
      compatibilityDate,
      d1Databases: { DB: "test-db" },
      durableObjects,
      queueProducers,
      queueConsumers,
      hyperdrives,
      bindings,
      outboundService,
      analyticsEngineDatasets,
      email,
      log,
      // The Worker's log lines (drain reports) go to `onLog`, and to the
      // terminal only with E2E_VERBOSE=1.
      handleRuntimeStdio(stdout, stderr) {
        for (const stream of [stdout, stderr]) {
          if (process.env.E2E_VERBOSE) stream.pipe(stream === stdout ? process.stdout : process.stderr);
          stream.on("data", (chunk) => onLog?.(chunk.toString()));
          stream.resume();
        }
      },
    });
    await mf.ready;
    return mf;
  });
  if (migrate) await applyMigrations(mf, migrations);
  return mf;
}

/** Socket errors of Miniflare's Hyperdrive proxies that the harness kept from failing the run, so far. */
export const hyperdriveProxy = { errors: 0 };

// How many `hyperdriveProxiesWithErrorListeners` are under way, and the
// `net.createServer` they replaced while any is.
let guarding = 0;
let unguardedCreateServer;

/**
 * Runs `create` (which builds a Miniflare and awaits its readiness) so that,
 * when `hyperdrive` is set, the sockets of Miniflare's Hyperdrive proxy have
 * an error listener. The proxy pipes workerd's connection to Postgres and back
 * with none (cloudflare/workers-sdk#15768): when workerd closes a connection
 * while Postgres is still answering on it, the write into the closed socket
 * fails with EPIPE, unhandled, and the test runner fails the file though every
 * case passed. An error on either socket destroys the other, so the Worker
 * sees its connection fail, as it would without a proxy, and a case it
 * concerns fails on its own. The errors are counted in `hyperdriveProxy`, and
 * shown with E2E_VERBOSE=1.
 */
export async function hyperdriveProxiesWithErrorListeners(hyperdrive, create) {
  if (!hyperdrive) return create();
  if (guarding++ === 0) {
    unguardedCreateServer = net.createServer;
    net.createServer = guardedCreateServer(unguardedCreateServer);
  }
  try {
    return await create();
  } finally {
    if (--guarding === 0) net.createServer = unguardedCreateServer;
  }
}

/**
 * `createServer` whose connection listener gives the connection's socket, and
 * any socket the listener opens synchronously, error listeners that destroy
 * the other. Miniflare creates the proxy's server while it gets ready, and the
 * proxy opens its Postgres socket synchronously in that listener, both through
 * the `net` module's own functions. (With an `sslmode` other than `disable`
 * the proxy opens its socket to Postgres after an await, out of this pair,
 * with a listener of its own; no test sets one.)
 */
function guardedCreateServer(createServer) {
  return function (...args) {
    const index = args.findIndex((arg) => typeof arg === "function");
    if (index >= 0) {
      const listener = args[index];
      args[index] = function (socket) {
        const opened = [];
        const connect = net.connect;
        net.connect = (...connectArgs) => {
          const other = connect(...connectArgs);
          opened.push(other);
          return other;
        };
        try {
          return listener.call(this, socket);
        } finally {
          net.connect = connect;
          const sockets = [socket, ...opened];
          for (const one of sockets) {
            one.on("error", (error) => {
              hyperdriveProxy.errors += 1;
              if (process.env.E2E_VERBOSE) console.error(`Hyperdrive proxy socket: ${error.message}`);
              for (const other of sockets) if (other !== one) other.destroy();
            });
          }
        }
      };
    }
    return createServer.apply(this, args);
  };
}

/** Applies `<dir>/*.sql` (`migrations/` unless told) in order, as `wrangler d1 migrations apply` does. */
export async function applyMigrations(mf, dir = "migrations") {
  const db = await mf.getD1Database("DB");
  dir = path.join(root, dir);
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".sql")).sort()) {
    const sql = readFileSync(path.join(dir, file), "utf8");
    const statements = [];
    let statement = "";
    for (const piece of sql
      .split("\n")
      .filter((line) => !line.trim().startsWith("--"))
      .join("\n")
      .split(/(?<=;)/)) {
      statement += piece;
      // As wrangler splits: a trigger's body (BEGIN … END) stays in its statement.
      const upper = statement.trim().toUpperCase();
      if (upper.startsWith("CREATE TRIGGER") && !/\bEND;?$/.test(upper)) continue;
      const text = statement.trim().replace(/;$/, "").trim();
      statement = "";
      if (text) statements.push(text);
    }
    await db.batch(statements.map((s) => db.prepare(s)));
  }
  return db;
}

/**
 * Polls `probe` until it returns a truthy value or `timeoutMs` passes, on the
 * monotonic clock: a step of the wall clock (seen on this machine kind) must
 * not end the wait early.
 */
export async function eventually(probe, { timeoutMs = 5000, everyMs = 20 } = {}) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (performance.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/**
 * An outbox's counts per state, read from the operator console's API at
 * `prefix` with an operator's bearer `token`; `pending` is what is neither
 * delivered, dead nor leased.
 */
export async function outboxCounts(mf, token, outbox = "mail", prefix = "/console") {
  const response = await mf.dispatchFetch(`http://example.test${prefix}/api/outboxes/${outbox}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  if (!response.ok) throw new Error(`console answered ${response.status}: ${await response.text()}`);
  const { counts, paused } = await response.json();
  const count = (state) => counts[state].count;
  return {
    due: count("due"),
    scheduled: count("scheduled"),
    leased: count("leased"),
    waiting: count("waiting"),
    dead: count("dead"),
    pending: count("due") + count("scheduled") + count("waiting"),
    paused,
  };
}

/** A request that changes something through the console's API (operator `token`). */
export function consoleChange(mf, token, path, body, prefix = "/console") {
  return mf.dispatchFetch(`http://example.test${prefix}/api/${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "x-outbox-console": "1", "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/** Debian's Chromium (or `CHROMIUM`), driven by playwright-core; fails, saying how to install it, when it is missing. */
export async function launchChromium() {
  const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
  if (!existsSync(executablePath)) {
    throw new Error(`no browser at ${executablePath}: run \`bash scripts/setup.sh\` (it installs Debian's chromium), or set CHROMIUM`);
  }
  const { chromium } = await import("playwright-core");
  return chromium.launch({
    executablePath,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
}
