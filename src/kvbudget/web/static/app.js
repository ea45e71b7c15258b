// kvbudget web page. Vanilla JS modules, no external requests; all text goes in through textContent.
// The browser only validates inputs and renders; every figure comes from the /api/... JSON
// endpoints, which call the same library functions as the kvbudget command line.
import {
  $, api, checkCount, checkFraction, clear, clearErrors, el, fieldError, fillSelect,
  renderFigures, renderGrid, renderKv, renderReasons, renderStatus, show, showServerError,
} from "./dom.js";
import { drawChart } from "./chart.js";
import { initViewer } from "./viewer.js";

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
    // unticked until the user confirms each one, as the CLI starts at structural_reference
    input.checked = false;
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
  $("explicit-cli").textContent = (d.cli || []).join("\n");
  show($("explicit-result"), true);
}

// ---------- 2. model mode ----------
function modelSource() { return $("source-config").checked ? "config" : "catalog"; }

function updateSource() {
  const cfg = modelSource() === "config";
  show($("config-field"), cfg);
  show($("catalog-field"), !cfg);
}

// a size as the CLI's parse_bytes reads it (format only; the server parses and checks the value)
const SIZE_RE = /^[0-9]+(\.[0-9]+)?\s*(b|kib|mib|gib|tib|kb|mb|gb|tb|k|m|g|t)?$/i;
// the registered engines (/api/meta engine_choices): the page compares no engine name
let engineChoices = [];
const labels = (engines, joiner = " or ") => engines.map((e) => e.label).join(joiner);

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
    // "auto" (or -1) is vLLM's auto-fit; the server computes the length (make_plan)
    if (name === "max_model_len" && /^\s*(auto|-1)\s*$/i.test(raw)) {
      const fitting = engineChoices.filter((e) => e.auto_fit);
      if (fitting.length === 0) {
        fieldError(form, name, `Max model length: "auto" is an engine's auto-fit and no registered engine has one; type a number of tokens.`);
        bad = true;
      } else if (!fitting.some((e) => e.id === body.engine)) {
        fieldError(form, name, `Max model length: "auto" is ${labels(fitting)}'s auto-fit; pick engine ${labels(fitting)} or type a number of tokens.`);
        bad = true;
      }
      body[name] = "auto";
      continue;
    }
    const problem = checkCount(name, label, raw, min);
    if (problem) { fieldError(form, name, problem); bad = true; }
    body[name] = raw.trim();
  }
  const memory = $("gpu_memory").value.trim();
  if (memory !== "") {
    if (!SIZE_RE.test(memory)) {
      fieldError(form, "gpu_memory", `GPU memory: "${memory}" is not a size; write e.g. 80GiB, 141GB or a number of bytes.`);
      bad = true;
    }
    body.gpu_memory = memory;
  }
  const kvMemory = $("kv_cache_memory").value.trim();
  if (kvMemory !== "") {
    if (!SIZE_RE.test(kvMemory)) {
      fieldError(form, "kv_cache_memory", `KV cache memory: "${kvMemory}" is not a size; write e.g. 20GiB or a number of bytes, or leave it empty.`);
      bad = true;
    } else if (!engineChoices.some((e) => e.plans && e.id === body.engine)) {
      const planned = engineChoices.filter((e) => e.plans);
      fieldError(form, "kv_cache_memory", `KV cache memory: a ${labels(planned, "/")} knob; pick engine ${labels(planned)}, or leave it empty.`);
      bad = true;
    }
    body.kv_cache_memory = kvMemory;
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
  renderHeadline($("model-headline"), d);
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
  const cli = $("model-cli");
  clear(cli);
  for (const line of d.cli || []) { const li = el("li"); li.appendChild(el("code", line)); cli.appendChild(li); }
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


// The answer first: does the deployment start, how many max-length requests at once, how much
// room is left on the GPU (big); the calculator's status is about the structure only (below).
// When the engine would refuse to start, that is the answer, with the CLI's remedies.
function renderHeadline(box, d) {
  clear(box);
  const h = d.headline;
  if (!h) { show(box, false); return; }
  box.className = "headline " + (h.fits ? "fits" : "refused");
  box.setAttribute("role", h.fits ? "status" : "alert");
  box.appendChild(el("p", h.verdict, "verdict"));
  const figures = el("div", null, "head-figures");
  for (const f of h.figures || []) {
    const tile = el("div", null, "head-figure");
    tile.appendChild(el("span", f.value, "value"));
    tile.appendChild(el("span", f.name, "name"));
    if (f.note) tile.appendChild(el("span", f.note, "note"));
    figures.appendChild(tile);
  }
  box.appendChild(figures);
  if (!h.fits) {
    const why = el("p");
    why.appendChild(el("strong", "The engine's error: "));
    why.appendChild(document.createTextNode(d.fit_message || "one max-length request does not fit"));
    box.appendChild(why);
    if ((d.remedies || []).length) {
      box.appendChild(el("p", "Change one of these (kvbudget plan flags):"));
      const list = el("ul");
      for (const r of d.remedies) { const li = el("li"); li.appendChild(el("code", r)); list.appendChild(li); }
      box.appendChild(list);
    }
  }
  box.appendChild(el("p", `Computed, not measured. The calculator's status below (${d.status}) is about the model's structure only; it does not change this answer.`, "head-foot"));
  show(box, true);
}


// ---------- start ----------
async function init() {
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => selectTab(tab.dataset.tab));
  $("explicit-form").addEventListener("submit", submitExplicit);
  $("model-form").addEventListener("submit", submitModel);
  $("source-catalog").addEventListener("change", updateSource);
  $("source-config").addEventListener("change", updateSource);
  initViewer();
  const meta = await api("GET", "/api/meta");
  if (!meta.ok) { $("explicit-error").textContent = meta.error; return; }
  const m = meta.data;
  $("version").textContent = m.version;
  buildAssumptions(m.assumptions);
  engineChoices = m.engine_choices;
  fillSelect($("engine"), engineChoices.map((e) => ({ value: e.id, label: e.label })),
    (engineChoices.find((e) => e.plans) || engineChoices[0]).id);
  // "0.11.0" -> [0, 11, 0]; anything unreadable -> null (the server then names the error)
  const versionOf = (text) => {
    const match = /^v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?/.exec(text || "");
    return match ? [1, 2, 3].map((i) => Number(match[i] || 0)) : null;
  };
  const atLeast = (a, b) => a[0] !== b[0] ? a[0] > b[0] : a[1] !== b[1] ? a[1] > b[1] : a[2] >= b[2];
  const setDtypes = () => {
    let names = m.kv_dtypes_by_engine[$("engine").value] || ["auto"];
    const engine = engineChoices.find((e) => e.id === $("engine").value);
    // only the KV dtype names this engine version accepts (vLLM: reference §4 eras)
    const version = engine ? versionOf($("engine_version").value.trim() || engine.default_version) : null;
    if (version) {
      const since = engine.kv_dtype_since;
      names = names.filter((d) => !(d in since) || atLeast(version, versionOf(since[d])));
    }
    const keep = names.includes($("kv_dtype").value) ? $("kv_dtype").value : "auto";
    fillSelect($("kv_dtype"), names.map((d) => ({ value: d, label: d })), keep);
  };
  $("engine").addEventListener("change", setDtypes);
  $("engine_version").addEventListener("change", setDtypes);
  setDtypes();
  fillSelect($("model"), m.models.map((x) => ({ value: x.id, label: `${x.id} (${x.layer_kinds})` })), m.default_model);
  fillSelect($("gpu"), m.gpus.map((g) => ({ value: g.id, label: g.label })), m.default_gpu);
  document.body.dataset.ready = "true";
}

document.addEventListener("DOMContentLoaded", init);
