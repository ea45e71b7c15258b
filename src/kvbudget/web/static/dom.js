// Small DOM, validation and API helpers for the kvbudget page (text nodes only).

const STATUS_WORDS = {
  exact: "Exact: every structural assumption holds, so the formula describes this cache byte for byte (before engine blocks and padding).",
  structural_reference: "Structural reference: at least one assumption does not hold (or was not confirmed). Treat the number as a reference for the structure, not the cache your engine allocates; use the engine's own spec and measure.",
  not_applicable: "Not applicable: the formula does not describe this structure. No number is given; measure on the engine instead.",
};

// ---------- small DOM helpers (text only) ----------
export function $(id) { return document.getElementById(id); }
export function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
export function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
export function show(node, visible) { node.hidden = !visible; }

// Marks the input called `name` inside `form` and writes the message next to it.
export function fieldError(form, name, message) {
  const input = form.querySelector(`[name="${CSS.escape(String(name))}"]`);
  if (!input) return false;
  input.setAttribute("aria-invalid", message ? "true" : "false");
  const box = input.closest(".field");
  const slot = box ? box.querySelector(".field-error") : null;
  if (slot) slot.textContent = message || "";
  return true;
}

export function clearErrors(form, errorId) {
  form.querySelectorAll(".field-error").forEach((n) => { n.textContent = ""; });
  form.querySelectorAll("[aria-invalid]").forEach((n) => n.setAttribute("aria-invalid", "false"));
  $(errorId).textContent = "";
}

// ---------- input validation (browser side; the server validates again) ----------
// Suffixes as vLLM 0.32.0's human_readable_int (and kvbudget.units.parse_count) read them:
// k/m/g = ×1000/×10^6/×10^9, K/M/G = ×1024/×2^20/×2^30 (case matters), Ki/Mi = ×1024/×2^20.
const COUNT_RE = /^\s*([0-9]+(?:\.[0-9]+)?)\s*(k|m|g|K|M|G|[kK]i|[mM]i)?\s*$/;
const COUNT_MULT = { "": 1, k: 1e3, m: 1e6, g: 1e9, K: 1024, M: 1048576, G: 1073741824, ki: 1024, mi: 1048576 };
export function checkCount(name, label, raw, minimum) {
  const text = String(raw).trim();
  if (text === "") return `${label}: enter a whole number ≥ ${minimum}.`;
  const m = text.match(COUNT_RE);
  if (!m) return `${label}: "${text}" is not a whole number; type digits such as 4096 (k = ×1000, K = ×1024, as vLLM reads them).`;
  const suffix = m[2] || "";
  const key = suffix.length === 2 ? suffix.toLowerCase() : suffix;
  if (m[1].includes(".") && /^[KMG]$/.test(suffix)) return `${label}: "${text}" has a decimal with a binary suffix; did you mean ${m[1]}${suffix.toLowerCase()}?`;
  const value = Number(m[1]) * COUNT_MULT[key];
  if (!Number.isInteger(Math.round(value * 1e6) / 1e6)) return `${label}: "${text}" is not a whole number; give an integer.`;
  if (value < minimum) return `${label}: must be ≥ ${minimum}, got ${text}.`;
  if (!Number.isSafeInteger(Math.round(value))) return `${label}: ${text} is too large.`;
  return null;
}
export function checkFraction(label, raw) {
  const text = String(raw).trim();
  const value = Number(text);
  if (text === "" || !Number.isFinite(value) || value <= 0 || value > 1) {
    return `${label}: give a fraction between 0 and 1 such as 0.9, got "${text}".`;
  }
  return null;
}

// ---------- API ----------
export async function api(method, path, body) {
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

export function showServerError(form, result, formErrorId) {
  $(formErrorId).textContent = result.error;
  if (result.field) fieldError(form, result.field, result.error);
}

// ---------- rendering helpers ----------
export function renderStatus(node, status, extra) {
  clear(node);
  node.className = "status " + (STATUS_WORDS[status] ? status : "");
  node.appendChild(el("span", status, "code"));
  node.appendChild(el("span", STATUS_WORDS[status] || "", "words"));
  if (extra) node.appendChild(el("span", extra, "words"));
}

export function renderKv(tbody, rows) {
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
export function cellTd(value) {
  const text = value === null || value === undefined ? "—" : String(value);
  const td = el("td");
  if (text.length > 48) td.appendChild(el("div", text, "cell-long"));
  else td.textContent = text;
  return td;
}

export function renderGrid(thead, tbody, table) {
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

export function renderFigures(tbody, figures) {
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

export function renderReasons(ul, assumptions) {
  clear(ul);
  for (const a of assumptions || []) {
    const li = el("li", `${a.holds ? "✓" : "✗"} ${a.label}`, a.holds ? "ok" : "fail");
    if (!a.holds && a.why) li.appendChild(el("span", ` — ${a.why}`));
    ul.appendChild(li);
  }
}


export function labelTag(value) {
  if (value === "computed" || value === "simulated" || value === "measured") return el("span", value, "label-tag " + value);
  return null;
}


export function fillSelect(select, items, selected) {
  clear(select);
  for (const item of items) {
    const option = el("option", item.label);
    option.value = item.value;
    if (item.value === selected) option.selected = true;
    select.appendChild(option);
  }
}
