// explorer/web/views.js: the page's building blocks: elements, number tables, heat maps.
//
// Plain DOM, no library: a heat map is an HTML table whose cells are coloured by value
// (blue negative, white zero, red positive; grey NaN; dark a masked -inf), so that each
// cell is an element that a hover reads out and a test reads back. Every number shown is
// MHA.tensor.format's: exact for the case's dtype. Text from files (a case's description,
// a student's diagnosis) goes in as text, never as HTML.
"use strict";

window.MHA = window.MHA || {};

MHA.views = (function () {
  const T = MHA.tensor;

  // el("td", {class: "x", dataset: {i: 1}}, [children or text])
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of [].concat(children || [])) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  // The colour of a value on a scale of +-limit.
  function colour(x, limit) {
    if (Number.isNaN(x)) return "#b9b9b9";
    if (x === -Infinity) return "#3b3b4a";
    if (x === Infinity) return "#7a0010";
    const s = limit > 0 ? Math.max(-1, Math.min(1, x / limit)) : 0;
    const fade = Math.round(255 * (1 - Math.abs(s)));
    return s >= 0 ? `rgb(255,${fade},${fade})` : `rgb(${fade},${fade},255)`;
  }

  function limitOf(values) {
    let limit = 0;
    for (const x of values) if (Number.isFinite(x)) limit = Math.max(limit, Math.abs(x));
    return limit;
  }

  // A 2-D block of a tensor as a table of numbers, coloured.
  //   get(i, j) -> value; rows, cols: counts; options: {name, dataset, rowLabel(i),
  //   colLabel(j), dtype, bad(i, j) -> bool (a cell that departs from PyTorch's), limit,
  //   hover(i, j, value) -> text for the readout, numbers (false: colour only)}
  function matrix(rows, cols, get, options) {
    const o = Object.assign({ numbers: true, rowLabel: (i) => String(i), colLabel: (j) => String(j) }, options);
    const values = [];
    for (let i = 0; i < rows; ++i) for (let j = 0; j < cols; ++j) values.push(get(i, j));
    const limit = o.limit !== undefined ? o.limit : limitOf(values);
    const head = el("tr", {}, [el("th", { class: "corner", text: o.corner || "" })]);
    for (let j = 0; j < cols; ++j) head.appendChild(el("th", { text: o.colLabel(j) }));
    const body = [head];
    for (let i = 0; i < rows; ++i) {
      const tr = el("tr", {}, [el("th", { text: o.rowLabel(i) })]);
      for (let j = 0; j < cols; ++j) {
        const x = values[i * cols + j];
        const td = el("td", { dataset: { i: i, j: j }, style: `background:${colour(x, limit)}` },
                      o.numbers ? T.format(x, o.dtype) : "");
        if (Math.abs(x) / (limit || 1) > 0.6 || x === -Infinity) td.classList.add("dark");
        if (o.bad && o.bad(i, j)) td.classList.add("bad");
        if (o.hover) td.addEventListener("mouseenter", () => o.readout(o.hover(i, j, x)));
        tr.appendChild(td);
      }
      body.push(tr);
    }
    const table = el("table", { class: "matrix" + (o.numbers ? "" : " colours") }, body);
    if (o.name) table.dataset.tensor = o.name;
    Object.assign(table.dataset, o.dataset || {});
    return table;
  }

  // A (R, C) tensor, or row `index` of a 3-D one, as a matrix.
  function tensorMatrix(t, options) {
    const [R, C] = t.shape.slice(-2);
    return matrix(R, C, (i, j) => t.data[i * C + j], Object.assign({ dtype: t.dtype }, options));
  }

  // A labelled figure: a title, a line of explanation, then its content.
  function figure(title, explanation, content, attrs) {
    return el("figure", attrs || {}, [el("figcaption", {}, [el("strong", { text: title }), explanation ? " " + explanation : ""]),
                                      el("div", { class: "scroll" }, content)]);
  }

  // "matches PyTorch" or "departs at [..]: got .., expected .." for a comparison.
  function verdict(result, expected, got, dtype) {
    if (!result) return el("span", { class: "verdict none", text: "PyTorch returned none" });
    if (!result.shapeOk)
      return el("span", { class: "verdict fail", text: `shape ${T.shapeText(got.shape)}, PyTorch's is ${T.shapeText(expected.shape)}` });
    if (result.ok) return el("span", { class: "verdict pass", text: "matches PyTorch" });
    const index = T.unravel(result.first, expected.shape);
    return el("span", { class: "verdict fail",
                        text: `departs at [${index.join(", ")}]: ${T.format(got.data[result.first], dtype)} vs PyTorch's ` +
                              `${T.format(expected.data[result.first], dtype)} (${result.bad} of ${expected.data.length} elements)` });
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  return { el, colour, matrix, tensorMatrix, figure, verdict, clear, limitOf };
})();
