// kvbudget web page. Vanilla JS, no external requests; all text goes in through textContent.
// The browser only validates inputs and renders; every figure comes from the /api/... JSON
// endpoints, which call the same library functions as the kvbudget command line.
"use strict";

(function () {
  const STATUS_WORDS = {
    exact: "Exact: every structural assumption holds, so the formula describes this cache byte for byte (before engine blocks and padding).",
    structural_reference: "Structural reference: at least one assumption does not hold (or was not confirmed). Treat the number as a reference for the structure, not the cache your engine allocates; use the engine's own spec and measure.",
    not_applicable: "Not applicable: the formula does not describe this structure. No number is given; measure on the engine instead.",
  };
  const MAX_DOC_BYTES = 20 * 1024 * 1024;
  const MAX_TREE_CHILDREN = 500;
  const MAX_TABLE_ROWS = 200;

  // ---------- small DOM helpers (text only) ----------
  function $(id) { return document.getElementById(id); }
  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function show(node, visible) { node.hidden = !visible; }

  // Marks the input called `name` inside `form` and writes the message next to it.
  function fieldError(form, name, message) {
    const input = form.querySelector(`[name="${CSS.escape(String(name))}"]`);
    if (!input) return false;
    input.setAttribute("aria-invalid", message ? "true" : "false");
    const box = input.closest(".field");
    const slot = box ? box.querySelector(".field-error") : null;
    if (slot) slot.textContent = message || "";
    return true;
  }

  function clearErrors(form, errorId) {
    form.querySelectorAll(".field-error").forEach((n) => { n.textContent = ""; });
    form.querySelectorAll("[aria-invalid]").forEach((n) => n.setAttribute("aria-invalid", "false"));
    $(errorId).textContent = "";
  }

  // ---------- input validation (browser side; the server validates again) ----------
  const COUNT_RE = /^\s*[0-9]+(\.[0-9]+)?\s*(k|m|ki|mi)?\s*$/i;
  function checkCount(name, label, raw, minimum) {
    const text = String(raw).trim();
    if (text === "") return `${label}: enter a whole number ≥ ${minimum}.`;
    if (!COUNT_RE.test(text)) return `${label}: "${text}" is not a whole number; type digits such as 4096 (K = ×1000, Ki = ×1024).`;
    const m = text.match(/^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*$/i);
    const mult = { "": 1, k: 1000, m: 1000000, ki: 1024, mi: 1048576 }[m[2].toLowerCase()];
    const value = Number(m[1]) * mult;
    if (!Number.isInteger(value)) return `${label}: "${text}" is not a whole number; give an integer.`;
    if (value < minimum) return `${label}: must be ≥ ${minimum}, got ${text}.`;
    if (!Number.isSafeInteger(value)) return `${label}: ${text} is too large.`;
    return null;
  }
  function checkFraction(label, raw) {
    const text = String(raw).trim();
    const value = Number(text);
    if (text === "" || !Number.isFinite(value) || value <= 0 || value > 1) {
      return `${label}: give a fraction between 0 and 1 such as 0.9, got "${text}".`;
    }
    return null;
  }

  // ---------- API ----------
  async function api(method, path, body) {
    const options = { method, headers: { Accept: "application/json" } };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, options);
    } catch (err) {
      return { ok: false, error: "NetworkError: the kvbudget server did not answer; is `kvbudget web` still running?" };
    }
    let data = null;
    try { data = await response.json(); } catch (err) { data = null; }
    if (!response.ok) {
      const error = data && typeof data.error === "string" ? data.error : `HTTP ${response.status}`;
      return { ok: false, error, field: data && data.field };
    }
    return { ok: true, data };
  }

  function showServerError(form, result, formErrorId) {
    $(formErrorId).textContent = result.error;
    if (result.field) fieldError(form, result.field, result.error);
  }

  // ---------- rendering helpers ----------
  function renderStatus(node, status, extra) {
    clear(node);
    node.className = "status " + (STATUS_WORDS[status] ? status : "");
    node.appendChild(el("span", status, "code"));
    node.appendChild(el("span", STATUS_WORDS[status] || "", "words"));
    if (extra) node.appendChild(el("span", extra, "words"));
  }

  function renderKv(tbody, rows) {
    clear(tbody);
    for (const row of rows) {
      const tr = el("tr");
      tr.appendChild(el("th", row.name));
      const td = el("td", row.display !== undefined ? row.display : row.value);
      if (row.label) td.appendChild(el("span", row.label, "label-tag " + row.label));
      tr.appendChild(td);
      tr.appendChild(el("td", row.note || "", "note"));
      tbody.appendChild(tr);
    }
  }

  // A table cell; long text wraps inside a fixed-width box instead of stretching the table.
  function cellTd(value) {
    const text = value === null || value === undefined ? "—" : String(value);
    const td = el("td");
    if (text.length > 48) td.appendChild(el("div", text, "cell-long"));
    else td.textContent = text;
    return td;
  }

  function renderGrid(thead, tbody, table) {
    clear(thead); clear(tbody);
    const columns = (table && table.columns) || [];
    const htr = el("tr");
    for (const c of columns) htr.appendChild(el("th", c));
    thead.appendChild(htr);
    for (const row of (table && table.rows) || []) {
      const tr = el("tr");
      for (const cell of row) tr.appendChild(cellTd(cell));
      tbody.appendChild(tr);
    }
  }

  function renderFigures(tbody, figures) {
    clear(tbody);
    for (const row of figures || []) {
      const tr = el("tr");
      tr.appendChild(el("th", row.name)).setAttribute("scope", "row");
      tr.appendChild(el("td", row.bytes_text));
      tr.appendChild(el("td", row.mib_text));
      tr.appendChild(el("td", row.gib_text));
      tbody.appendChild(tr);
    }
  }

  function renderReasons(ul, assumptions) {
    clear(ul);
    for (const a of assumptions || []) {
      const li = el("li", `${a.holds ? "✓" : "✗"} ${a.label}`, a.holds ? "ok" : "fail");
      if (!a.holds && a.why) li.appendChild(el("span", ` — ${a.why}`));
      ul.appendChild(li);
    }
  }

  // ---------- tabs ----------
  function selectTab(name) {
    for (const tab of document.querySelectorAll(".tab")) {
      const on = tab.dataset.tab === name;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      show($("panel-" + tab.dataset.tab), on);
    }
  }

  // ---------- 1. explicit calculator ----------
  const EXPLICIT_FIELDS = [
    ["layers", "Cached layers"], ["kv_heads", "KV heads"], ["head_dim", "Head dim"],
    ["tokens", "Tokens per sequence"], ["seqs", "Sequences"],
  ];

  function buildAssumptions(list) {
    const box = $("assumption-list");
    clear(box);
    for (const a of list) {
      const label = el("label");
      const input = el("input");
      input.type = "checkbox";
      input.id = "assume-" + a.key;
      input.name = a.key;
      input.checked = true;
      input.dataset.assumption = a.key;
      label.appendChild(input);
      label.appendChild(document.createTextNode(" " + a.label));
      if (a.detail) label.appendChild(el("span", a.detail, "why"));
      box.appendChild(label);
    }
  }

  async function submitExplicit(event) {
    event.preventDefault();
    const form = $("explicit-form");
    clearErrors(form, "explicit-error");
    const body = {};
    let bad = false;
    for (const [name, label] of EXPLICIT_FIELDS) {
      const raw = $(name).value;
      const problem = checkCount(name, label, raw, 1);
      if (problem) { fieldError(form, name, problem); bad = true; }
      body[name] = raw.trim();
    }
    body.dtype_bytes = Number($("dtype_bytes").value);
    body.assumptions = {};
    for (const box of document.querySelectorAll("[data-assumption]")) body.assumptions[box.dataset.assumption] = box.checked;
    if (bad) { $("explicit-error").textContent = "Fix the marked fields."; return; }
    $("explicit-submit").disabled = true;
    const result = await api("POST", "/api/calc/explicit", body);
    $("explicit-submit").disabled = false;
    if (!result.ok) { show($("explicit-result"), false); showServerError(form, result, "explicit-error"); return; }
    const d = result.data;
    renderStatus($("explicit-status"), d.status);
    renderFigures($("explicit-figures"), d.figures);
    $("explicit-total").textContent = d.total_display;
    renderReasons($("explicit-reasons"), d.assumptions);
    show($("explicit-result"), true);
  }

  // ---------- 2. model mode ----------
  function modelSource() { return $("source-config").checked ? "config" : "catalog"; }

  function updateSource() {
    const cfg = modelSource() === "config";
    show($("config-field"), cfg);
    show($("catalog-field"), !cfg);
  }

  async function submitModel(event) {
    event.preventDefault();
    const form = $("model-form");
    clearErrors(form, "model-error");
    $("chart-error").textContent = "";
    let bad = false;
    const body = {
      engine: $("engine").value,
      kv_dtype: $("kv_dtype").value,
      gpu: $("gpu").value,
      engine_version: $("engine_version").value.trim() || null,
      overrides: $("overrides").value.split("\n").map((x) => x.trim()).filter((x) => x !== ""),
    };
    if (body.engine_version !== null && !/^v?[0-9]+(\.[0-9]+){0,2}([.+-][0-9A-Za-z.+-]*)?$/.test(body.engine_version)) {
      fieldError(form, "engine_version", `Engine version: "${body.engine_version}" is not a version; write e.g. 0.11.0 or leave it empty.`);
      bad = true;
    }
    for (const pair of body.overrides) {
      if (!/^[A-Za-z_][\w.]*\s*=/.test(pair)) {
        fieldError(form, "overrides", `Overrides: "${pair}" is not key=value; write e.g. num_key_value_heads=8.`);
        bad = true;
      }
    }
    for (const [id, name, label, min] of [["tp", "tp", "TP", 1], ["pp", "pp", "PP", 1],
      ["max_model_len", "max_model_len", "Max model length", 1], ["m_seqs", "seqs", "Sequences", 1]]) {
      const raw = $(id).value;
      const problem = checkCount(name, label, raw, min);
      if (problem) { fieldError(form, name, problem); bad = true; }
      body[name] = raw.trim();
    }
    const util = $("gpu_memory_utilization").value;
    const utilProblem = checkFraction("GPU memory utilization", util);
    if (utilProblem) { fieldError(form, "gpu_memory_utilization", utilProblem); bad = true; }
    body.gpu_memory_utilization = Number(util);
    if (modelSource() === "config") {
      const text = $("config").value;
      if (text.trim() === "") {
        fieldError(form, "config", "config.json: paste the text of the model's config.json (a JSON object).");
        bad = true;
      } else {
        try {
          const parsed = JSON.parse(text);
          if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
            fieldError(form, "config", "config.json: expected a JSON object ({...}) such as a Hugging Face config.json.");
            bad = true;
          } else {
            body.config = parsed;
          }
        } catch (err) {
          fieldError(form, "config", `config.json: not valid JSON (${err.message}); paste the whole file, braces included.`);
          bad = true;
        }
      }
    } else {
      body.model = $("model").value;
      if (!body.model) { fieldError(form, "model", "Model: pick a catalog model."); bad = true; }
    }
    if (bad) { $("model-error").textContent = "Fix the marked fields."; show($("model-result"), false); return; }
    $("model-submit").disabled = true;
    const result = await api("POST", "/api/model", body);
    $("model-submit").disabled = false;
    if (!result.ok) { show($("model-result"), false); showServerError(form, result, "model-error"); return; }
    const d = result.data;
    renderStatus($("model-status"), d.status, d.status_note);
    $("model-layout").textContent = body.engine;
    renderFigures($("model-figures"), d.figures);
    renderKv($("model-budgets"), d.budgets);
    renderKv($("model-pool"), d.pool);
    const fit = $("model-fit");
    fit.textContent = d.fit_message || "";
    fit.className = "fit " + (d.fits ? "ok" : "bad");
    renderGrid($("model-groups-head"), $("model-groups"), d.groups);
    renderGrid($("model-pool-groups-head"), $("model-pool-groups"), d.pool_groups);
    renderGrid($("model-ledger-head"), $("model-ledger"), d.ledger);
    renderReasons($("model-reasons"), d.assumptions);
    show($("sec-figures"), d.figures.length > 0);
    show($("sec-budgets"), d.budgets.length > 0);
    show($("sec-pool"), d.pool.length > 0);
    show($("sec-groups"), d.groups.rows.length > 0);
    show($("sec-pool-groups"), d.pool_groups.rows.length > 0);
    show($("sec-chart"), Boolean(d.chart));
    show($("sec-assumptions"), d.assumptions.length > 0);
    show($("model-result"), true);
    clear($("chart"));
    if (!d.chart) return;
    const chart = await api("POST", "/api/chart", body);
    if (!chart.ok) { clear($("chart")); $("chart-error").textContent = chart.error; return; }
    drawChart($("chart"), chart.data);
  }

  // ---------- 3. chart (inline SVG from API points; no arithmetic on KV here) ----------
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function drawChart(box, data) {
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

  // ---------- 4. result document viewer ----------
  function labelTag(value) {
    if (value === "computed" || value === "simulated" || value === "measured") return el("span", value, "label-tag " + value);
    return null;
  }

  function scalarText(v) {
    if (v === null) return "null";
    if (typeof v === "string") return v;
    return JSON.stringify(v);
  }
  function isScalar(v) { return v === null || typeof v !== "object"; }

  // Objects and arrays render their children only when opened, so a large document stays fast.
  function renderTree(container, value, key, open) {
    if (isScalar(value)) {
      const div = el("div", null, "leaf");
      if (key !== null) { div.appendChild(el("span", key, "key")); div.appendChild(document.createTextNode(": ")); }
      div.appendChild(document.createTextNode(scalarText(value)));
      const tag = labelTag(value);
      if (tag) div.appendChild(tag);
      container.appendChild(div);
      return;
    }
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    const details = el("details");
    const summary = el("summary");
    if (key !== null) summary.appendChild(el("span", key, "key"));
    summary.appendChild(document.createTextNode(Array.isArray(value) ? ` [${entries.length}]` : ` {${entries.length}}`));
    details.appendChild(summary);
    let filled = false;
    const fill = () => {
      if (filled) return;
      filled = true;
      for (const [k, v] of entries.slice(0, MAX_TREE_CHILDREN)) renderTree(details, v, k, false);
      if (entries.length > MAX_TREE_CHILDREN) details.appendChild(el("div", `… ${entries.length - MAX_TREE_CHILDREN} more not shown`, "leaf"));
    };
    details.addEventListener("toggle", () => { if (details.open) fill(); });
    if (open) { fill(); details.open = true; }
    container.appendChild(details);
  }

  function verdictClass(value) {
    if (value === true || value === "pass" || value === "passed" || value === "not_triggered") return "verdict-pass";
    if (value === false || value === "fail" || value === "failed" || value === "triggered") return "verdict-fail";
    if (value === "untested" || value === "unconfirmed") return "verdict-untested";
    return "";
  }

  function docSummary(doc) {
    const rows = [];
    for (const [k, v] of Object.entries(doc)) {
      if (isScalar(v)) rows.push({ name: k, value: scalarText(v), label: labelTag(v) ? v : undefined });
    }
    return rows;
  }

  function renderArrayTables(box, doc) {
    clear(box);
    for (const [k, v] of Object.entries(doc)) {
      if (!Array.isArray(v) || v.length === 0 || v.some((r) => r === null || typeof r !== "object" || Array.isArray(r))) continue;
      const cols = [];
      for (const r of v.slice(0, MAX_TABLE_ROWS)) for (const [ck, cv] of Object.entries(r)) if (isScalar(cv) && !cols.includes(ck) && cols.length < 14) cols.push(ck);
      if (cols.length === 0) continue;
      box.appendChild(el("h3", `${k} (${v.length})`));
      const table = el("table", null, "grid");
      const thead = el("thead"); const htr = el("tr");
      for (const c of cols) htr.appendChild(el("th", c));
      thead.appendChild(htr); table.appendChild(thead);
      const tbody = el("tbody");
      for (const r of v.slice(0, MAX_TABLE_ROWS)) {
        const tr = el("tr");
        for (const c of cols) {
          const cell = r[c];
          const td = cellTd(cell === undefined ? "" : scalarText(cell));
          if (c === "verdict" || c === "passed" || c === "status") td.className = verdictClass(cell);
          const tag = labelTag(cell);
          if (tag) { td.textContent = ""; td.appendChild(tag); }
          tr.appendChild(td);
        }
        tbody.appendChild(tr);
      }
      table.appendChild(tbody);
      const wrap = el("div", null, "table-wrap");
      wrap.appendChild(table);
      box.appendChild(wrap);
      if (v.length > MAX_TABLE_ROWS) box.appendChild(el("p", `first ${MAX_TABLE_ROWS} of ${v.length} rows shown`, "hint"));
    }
  }

  async function showDocument(text) {
    $("doc-error").textContent = "";
    show($("doc-result"), false);
    if (text.length > MAX_DOC_BYTES) { $("doc-error").textContent = `Document: larger than ${MAX_DOC_BYTES / 1048576} MiB; open it with 'kvbudget report' instead.`; return; }
    let doc;
    try { doc = JSON.parse(text); } catch (err) {
      $("doc-error").textContent = `Document: not valid JSON (${err.message}); give the .json file that accept, sim or bench wrote.`;
      return;
    }
    if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
      $("doc-error").textContent = "Document: expected a JSON object with a \"kind\" field (a kvbudget result document).";
      return;
    }
    const rows = docSummary(doc);
    const checked = await api("POST", "/api/document", { document: doc });
    if (checked.ok) {
      const info = checked.data;
      rows.unshift({ name: "figures are", value: info.provenance || "not stated", label: info.provenance ? info.provenance.split(" ")[0] : undefined });
      if (info.warnings.length) $("doc-error").textContent = "Note: " + info.warnings.join("; ") + ". Showing the JSON as text.";
    } else {
      $("doc-error").textContent = checked.error;
    }
    renderKv($("doc-summary"), rows);
    renderArrayTables($("doc-tables"), doc);
    const tree = $("doc-tree");
    clear(tree);
    renderTree(tree, doc, null, true);
    show($("doc-result"), true);
  }

  function onDocFile(event) {
    const file = event.target.files && event.target.files[0];
    if (!file) return;
    if (file.size > MAX_DOC_BYTES) { $("doc-error").textContent = `Document: ${file.name} is larger than ${MAX_DOC_BYTES / 1048576} MiB.`; return; }
    const reader = new FileReader();
    reader.onload = () => { $("doc-text").value = String(reader.result); showDocument(String(reader.result)); };
    reader.onerror = () => { $("doc-error").textContent = `Document: could not read ${file.name}.`; };
    reader.readAsText(file);
  }

  // ---------- start ----------
  function fillSelect(select, items, selected) {
    clear(select);
    for (const item of items) {
      const option = el("option", item.label);
      option.value = item.value;
      if (item.value === selected) option.selected = true;
      select.appendChild(option);
    }
  }

  async function init() {
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => selectTab(tab.dataset.tab));
    $("explicit-form").addEventListener("submit", submitExplicit);
    $("model-form").addEventListener("submit", submitModel);
    $("source-catalog").addEventListener("change", updateSource);
    $("source-config").addEventListener("change", updateSource);
    $("doc-show").addEventListener("click", () => showDocument($("doc-text").value));
    $("doc-file").addEventListener("change", onDocFile);
    const meta = await api("GET", "/api/meta");
    if (!meta.ok) { $("explicit-error").textContent = meta.error; return; }
    const m = meta.data;
    $("version").textContent = m.version;
    buildAssumptions(m.assumptions);
    const setDtypes = () => {
      const names = m.kv_dtypes_by_engine[$("engine").value] || ["auto"];
      const keep = names.includes($("kv_dtype").value) ? $("kv_dtype").value : "auto";
      fillSelect($("kv_dtype"), names.map((d) => ({ value: d, label: d })), keep);
    };
    $("engine").addEventListener("change", setDtypes);
    setDtypes();
    fillSelect($("model"), m.models.map((x) => ({ value: x.id, label: `${x.id} (${x.layer_kinds})` })), m.default_model);
    fillSelect($("gpu"), m.gpus.map((g) => ({ value: g.id, label: g.label })), m.default_gpu);
    document.body.dataset.ready = "true";
  }

  document.addEventListener("DOMContentLoaded", init);
})();
