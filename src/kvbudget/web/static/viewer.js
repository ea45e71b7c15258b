// The result-document viewer: parse JSON in the browser, check its header on the server,
// render everything as text (tables and a lazy tree).
import { $, api, cellTd, clear, el, labelTag, renderKv, show } from "./dom.js";

const MAX_DOC_BYTES = 20 * 1024 * 1024;
const MAX_TREE_CHILDREN = 500;
const MAX_TABLE_ROWS = 200;


// ---------- 4. result document viewer ----------
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


export function initViewer() {
  $("doc-show").addEventListener("click", () => showDocument($("doc-text").value));
  $("doc-file").addEventListener("change", onDocFile);
}
