// The context-length chart: inline SVG from /api/chart points (no KV arithmetic here).
import { clear, el } from "./dom.js";

// ---------- 3. chart (inline SVG from API points; no arithmetic on KV here) ----------
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

export function drawChart(box, data) {
  clear(box);
  const points = data.points || [];
  if (points.length === 0) { box.appendChild(el("p", "No points to draw.")); return; }
  const W = 760, H = 320, L = 70, R = 70, T = 30, B = 46;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", id: "chart-svg" });
  root.appendChild(svg("title", {}, data.title || "KV bytes and maximum concurrency against context length"));
  const n = points.length;
  const xAt = (i) => L + (n === 1 ? 0 : (i * (W - L - R)) / (n - 1));
  const maxGib = Math.max(...points.map((p) => p.kv_gib), 1e-9);
  const concs = points.map((p) => (p.max_concurrency === null ? 0 : p.max_concurrency));
  const maxConc = Math.max(...concs, 1e-9);
  const yGib = (v) => T + (H - T - B) * (1 - v / maxGib);
  const yConc = (v) => T + (H - T - B) * (1 - v / maxConc);
  for (let k = 0; k <= 4; k++) {
    const y = T + ((H - T - B) * k) / 4;
    root.appendChild(svg("line", { x1: L, x2: W - R, y1: y, y2: y, class: "gridline" }));
    root.appendChild(svg("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, (maxGib * (1 - k / 4)).toPrecision(3)));
    if (data.has_concurrency) {
      root.appendChild(svg("text", { x: W - R + 6, y: y + 4 }, (maxConc * (1 - k / 4)).toPrecision(3)));
    }
  }
  root.appendChild(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
  root.appendChild(svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
  points.forEach((p, i) => {
    root.appendChild(svg("text", { x: xAt(i), y: H - B + 16, "text-anchor": "middle" }, p.context_label));
  });
  root.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" }, "context length (tokens per sequence)"));
  root.appendChild(svg("text", { x: L, y: T - 12, class: "legend-bytes" }, `KV GiB per sequence (${data.label || "computed"})`));
  const bytesPath = points.map((p, i) => `${i ? "L" : "M"}${xAt(i).toFixed(1)},${yGib(p.kv_gib).toFixed(1)}`).join(" ");
  root.appendChild(svg("path", { d: bytesPath, class: "s-bytes" }));
  points.forEach((p, i) => {
    const dot = svg("circle", { cx: xAt(i), cy: yGib(p.kv_gib), r: 3, class: "dot-bytes" });
    dot.appendChild(svg("title", {}, `${p.context_tokens} tokens: ${p.kv_display}`));
    root.appendChild(dot);
  });
  if (data.has_concurrency) {
    root.appendChild(svg("text", { x: W - R, y: T - 12, class: "legend-conc", "text-anchor": "end" }, "max concurrency (sequences)"));
    const concPath = points.map((p, i) => `${i ? "L" : "M"}${xAt(i).toFixed(1)},${yConc(concs[i]).toFixed(1)}`).join(" ");
    root.appendChild(svg("path", { d: concPath, class: "s-conc" }));
    points.forEach((p, i) => {
      const dot = svg("circle", { cx: xAt(i), cy: yConc(concs[i]), r: 3, class: "dot-conc" });
      dot.appendChild(svg("title", {}, `${p.context_tokens} tokens: ${p.max_concurrency === null ? "does not fit" : p.max_concurrency} sequences`));
      root.appendChild(dot);
    });
  }
  box.appendChild(root);
}
