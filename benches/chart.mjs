// The benchmark chart: D1 round trips per delivered message, and drain
// throughput, per batch size, ours against the baseline. Drawn with Vega,
// rasterised with resvg.
import { Resvg } from "@resvg/resvg-js";
import * as vega from "vega";

function panel(name, title, yTitle, values, x, format) {
  return {
    type: "group",
    encode: { enter: { x: { value: x }, width: { value: 360 }, height: { value: 260 } } },
    title: { text: title, fontSize: 13 },
    data: [{ name, values }],
    scales: [
      { name: "x", type: "log", domain: [1, 100], range: [0, 360] },
      { name: "y", type: "log", domain: { data: name, field: "y" }, range: [260, 0], nice: true },
      {
        name: "color",
        type: "ordinal",
        domain: ["ours, D1", "baseline, D1", "ours, SQLite", "baseline, SQLite"],
        range: ["#1f77b4", "#d62728", "#6baed6", "#fc9272"],
      },
    ],
    axes: [
      { orient: "bottom", scale: "x", title: "batch size", values: [1, 10, 50, 100] },
      { orient: "left", scale: "y", title: yTitle, grid: true, format },
    ],
    legends: [
      {
        fill: "color",
        stroke: "color",
        orient: "top-right",
        symbolType: "stroke",
        values: [...new Set(values.map((v) => v.series))],
      },
    ],
    marks: [
      {
        type: "group",
        from: { facet: { name: `${name}_series`, data: name, groupby: "series" } },
        marks: [
          {
            type: "line",
            from: { data: `${name}_series` },
            sort: { field: "datum.x" },
            encode: {
              enter: {
                x: { scale: "x", field: "x" },
                y: { scale: "y", field: "y" },
                stroke: { scale: "color", field: "series" },
                strokeWidth: { value: 2 },
              },
            },
          },
          {
            type: "symbol",
            from: { data: `${name}_series` },
            encode: {
              enter: {
                x: { scale: "x", field: "x" },
                y: { scale: "y", field: "y" },
                fill: { scale: "color", field: "series" },
                size: { value: 30 },
              },
            },
          },
        ],
      },
    ],
  };
}

/** A PNG of the round-trip and throughput figures in `results`. */
export async function renderChart(results) {
  const series = (list, backend) =>
    list.map((x) => ({ series: `${x.algo}, ${backend}`, x: x.batch, trips: x.calls / x.messages, rate: x.msgsPerSecond }));
  const d1 = series(results.d1.drain, "D1");
  const sqlite = series(results.sqlite.drain, "SQLite");
  const spec = {
    $schema: "https://vega.github.io/schema/vega/v6.json",
    width: 860,
    height: 300,
    padding: 16,
    background: "white",
    marks: [
      panel("trips", "D1 round trips per delivered message", "round trips / message", d1.map((p) => ({ ...p, y: p.trips })), 0, "~g"),
      panel("rate", "Drain throughput (no-op delivery)", "messages / second", [...d1, ...sqlite].map((p) => ({ ...p, y: p.rate })), 480, "~s"),
    ],
  };
  const view = new vega.View(vega.parse(spec), { renderer: "none" });
  const svg = await view.toSVG();
  return new Resvg(svg, { font: { loadSystemFonts: true, defaultFontFamily: "DejaVu Sans" }, background: "white" })
    .render()
    .asPng();
}
