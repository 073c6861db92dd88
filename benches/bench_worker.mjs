// What every run of a bench Worker shares: the options it runs with and how
// its routes are called.

/** The options a bench Worker runs with: its own D1, `sink` for its outbound requests (every one accepted unless told), the wake-up objects. */
export const benchWorkerOptions = (sink = () => new Response(null, { status: 202 })) => ({
  migrate: false,
  outboundService: sink,
  durableObjects: { WAKE: { className: "WakeObject", useSQLite: true } },
});

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
