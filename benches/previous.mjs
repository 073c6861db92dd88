// The previous version of the library, built from its commit beside this
// one, so that a table can set its figures beside ours from the same run on
// the same machine. Its bench Worker is built under target/previous/ from
// `git archive` (the repository's history is needed, as a clone has it);
// the build's stamp skips a build already made.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import path from "node:path";
import { root, start } from "../tests/e2e/harness.mjs";
import { benchCaller, benchWorkerOptions } from "./bench_worker.mjs";

/**
 * The last commit before this version's work on D1's bill (no release was
 * tagged between): its bench Worker has the `sealing` route, which meters the
 * immediate and the drained paths with the outbox's defaults (rollups on),
 * and the `console` route, the console's requests on a seeded table.
 */
export const PREVIOUS = { commit: "420847d", name: "previous version (420847d)" };

/** Where its tree is extracted and its bench Worker built. */
const DIR = path.join(root, "target", "previous", PREVIOUS.commit);

/** Builds the previous version's bench Worker unless built. Call it before measuring: it fails early where the history is missing. */
export function buildPrevious(log) {
  if (!existsSync(DIR)) {
    // Extracted beside, then moved in whole: an interrupted extraction is not taken for a tree.
    const partial = `${DIR}.partial`;
    rmSync(partial, { recursive: true, force: true });
    mkdirSync(partial, { recursive: true });
    log(`the ${PREVIOUS.name}: extracting ${PREVIOUS.commit} into ${path.relative(root, DIR)}`);
    const archive = execFileSync("git", ["-C", root, "archive", "--format=tar", PREVIOUS.commit], { maxBuffer: 1 << 30 });
    execFileSync("tar", ["-x", "-C", partial], { input: archive });
    renameSync(partial, DIR);
  }
  const env = { ...process.env, WASM_OPT_BIN: path.join(root, "node_modules", ".bin", "wasm-opt") };
  delete env.FORCE_BUILD;
  // Its output goes to stderr: stdout carries the benches' results.
  execFileSync("bash", ["scripts/build-worker.sh", "benches/outbox-bench"], { cwd: DIR, stdio: ["ignore", 2, "inherit"], env });
}

/** Runs `use` with the previous version's bench Worker, which `buildPrevious` built: `use(call)`, `call` as `benchCaller`'s. */
export async function withPreviousWorker(use) {
  const mf = await start(path.relative(root, path.join(DIR, "benches", "outbox-bench")), benchWorkerOptions());
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
