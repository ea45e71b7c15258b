// Renders /openapi.json as a plain list of endpoints (text nodes only; no CDN).
"use strict";
(function () {
  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function resolveRef(spec, schema) {
    if (schema && schema.$ref) {
      const name = schema.$ref.split("/").pop();
      return [name, (spec.components && spec.components.schemas && spec.components.schemas[name]) || {}];
    }
    return [null, schema || {}];
  }
  function typeText(prop) {
    if (!prop) return "";
    if (prop.type) return prop.type;
    if (prop.anyOf) return prop.anyOf.map(typeText).join(" | ");
    if (prop.enum) return prop.enum.join(" | ");
    if (prop.$ref) return prop.$ref.split("/").pop();
    return "any";
  }
  async function main() {
    const box = document.getElementById("endpoints");
    let spec;
    try {
      spec = await (await fetch("/openapi.json")).json();
    } catch (err) {
      document.getElementById("api-error").textContent = "Could not read /openapi.json: " + err.message;
      return;
    }
    for (const [path, ops] of Object.entries(spec.paths || {})) {
      for (const [method, op] of Object.entries(ops)) {
        box.appendChild(el("h3", `${method.toUpperCase()} ${path}`));
        if (op.summary) box.appendChild(el("p", op.summary));
        if (op.description) box.appendChild(el("p", op.description, "hint"));
        const content = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
        if (content) {
          const [name, schema] = resolveRef(spec, content.schema);
          box.appendChild(el("p", `JSON body: ${name || "object"}`, "hint"));
          const table = el("table", null, "grid");
          const head = el("tr");
          for (const c of ["field", "type", "required", "default", "description"]) head.appendChild(el("th", c));
          const thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
          const tbody = el("tbody");
          const required = new Set(schema.required || []);
          for (const [field, prop] of Object.entries(schema.properties || {})) {
            const tr = el("tr");
            tr.appendChild(el("td", field));
            tr.appendChild(el("td", typeText(prop)));
            tr.appendChild(el("td", required.has(field) ? "yes" : ""));
            tr.appendChild(el("td", prop.default === undefined ? "" : JSON.stringify(prop.default)));
            tr.appendChild(el("td", prop.description || ""));
            tbody.appendChild(tr);
          }
          table.appendChild(tbody);
          box.appendChild(table);
        }
      }
    }
  }
  document.addEventListener("DOMContentLoaded", main);
})();
