// Helpers the benchmark reports share.

/** A whole number with thousands separators, or "–" for none. */
export const int = (n) => (n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US"));

/** A function that appends a Markdown table (and a blank line) to `lines`. */
export const tableInto = (lines) => (head, rows) => {
  lines.push(`| ${head.join(" | ")} |`, `| ${head.map(() => "---").join(" | ")} |`);
  for (const row of rows) lines.push(`| ${row.join(" | ")} |`);
  lines.push("");
};
