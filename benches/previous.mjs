// The previous version of the library, built from its commit beside this
// one, so that a table can set its figures beside ours from the same run on
// the same machine. Its bench Worker is built once per commit under
// target/previous/ (the build's stamp skips it after), from `git archive`: it
// needs the repository's history, as a clone has.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import path from "node:path";
import { root, start } from "../tests/e2e/harness.mjs";

/**
 * The code before the issue that brought the cost table (the D1 bill at the
 * floor): its bench Worker has the `sealing` route, which meters the immediate
 * and the drained paths with the outbox's defaults (rollups on).
 */
export const PREVIOUS = { commit: "420847d", name: "previous version (420847d)" };

/** Builds the previous version's bench Worker if its build is missing; its directory. */
export function buildPrevious(log) {
  const dir = path.join(root, "target", "previous", PREVIOUS.commit);
  if (!existsSync(path.join(dir, "Cargo.toml"))) {
    mkdirSync(dir, { recursive: true });
    log(`the ${PREVIOUS.name}: extracting ${PREVIOUS.commit} into ${path.relative(root, dir)}`);
    const archive = execFileSync("git", ["-C", root, "archive", "--format=tar", PREVIOUS.commit], { maxBuffer: 1 << 30 });
    execFileSync("tar", ["-x", "-C", dir], { input: archive });
  }
  log(`the ${PREVIOUS.name}: building its bench Worker (once per commit)`);
  execFileSync("bash", ["scripts/build-worker.sh", "benches/outbox-bench"], {
    cwd: dir,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, WASM_OPT_BIN: path.join(root, "node_modules", ".bin", "wasm-opt") },
  });
  return dir;
}

/** A bench Worker's routes in `mf`: `call(route, params)` gives `{ body, wallMs }`, and throws on a status other than 200. */
export function benchCaller(mf) {
  return async function call(route, params = {}) {
    const query = new URLSearchParams(params).toString();
    const started = performance.now();
    const response = await mf.dispatchFetch(`http://bench/${route}?${query}`, { method: "POST" });
    const body = await response.json();
    if (response.status !== 200) throw new Error(`${route} ${query}: ${JSON.stringify(body)}`);
    return { body, wallMs: performance.now() - started };
  };
}

/** The options every bench Worker runs with: its own D1, a sink that accepts every request, the wake-up objects. */
export const benchWorkerOptions = (sink = () => new Response(null, { status: 202 })) => ({
  migrate: false,
  outboundService: sink,
  durableObjects: { WAKE: { className: "WakeObject", useSQLite: true } },
});

/** Runs `use` with the previous version's bench Worker (built if missing): `use(call)`, `call` as `benchCaller`'s. */
export async function withPreviousWorker(log, use) {
  const dir = buildPrevious(log);
  const mf = await start(path.relative(root, path.join(dir, "benches", "outbox-bench")), benchWorkerOptions());
  try {
    return await use(benchCaller(mf));
  } finally {
    await mf.dispose();
  }
}

/**
 * The previous version's cost per path, in `runCost`'s shape, through its
 * Worker's `call`: sign-up mails without subjects, clear, through its
 * immediate path and through enqueue (100 a batch) then drain at batch 100.
 */
export async function previousCost(call, messages) {
  const { body: run } = await call("sealing", { sealed: false, subjects: false, messages });
  const rows = (meter) => ({ rows_written: meter.rows_written, rows_read: meter.rows_read });
  const none = { rows_written: 0, rows_read: 0 };
  return [
    { algorithm: "previous", path: "immediate", messages, enqueue: rows(run.immediate.meter), deliver: none },
    { algorithm: "previous", path: "drained", messages, enqueue: rows(run.enqueue.meter), deliver: rows(run.drain.meter) },
  ];
}
