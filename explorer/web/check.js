// explorer/web/check.js: a student's answer, checked against PyTorch's tensors of the case.
//
// answer(): one dropped .npy (attn_output, attn_output_weights, q, k or v), read by
// MHA.npy.parse, its dtype and shape checked against the case's own tensor before any
// value is compared, then compared by golden/FORMAT.md's rule with the case's tolerance:
// a verdict, the first index where it departs, and a difference map. diagnosis(): the
// JSON that `mha-grade diagnose CASE ANSWER_DIR --json` prints, checked field by field,
// with the mistakes it names and the course page to reread. Nothing from a file is
// inserted as HTML, and a link is made only of a page path of the course.
//
// The same rules as the grader's (labs/grader/labs.cpp): the case's dtype, PyTorch's shape.
"use strict";

window.MHA = window.MHA || {};

MHA.check = (function () {
  const T = MHA.tensor, V = MHA.views, el = V.el;
  const ANSWERS = ["attn_output", "attn_output_weights", "q", "k", "v"];
  const VERDICTS = ["pass", "fail", "error"];
  const PAGE = /^docs\/[A-Za-z0-9_.-]+\.md(#[A-Za-z0-9_-]+)?$/;
  const MAX_JSON = 1 << 20;

  function section(name, state, children) {
    return el("section", { class: `check-file ${state}`, dataset: { file: name, state: state } },
              [el("h3", { text: name })].concat(children));
  }

  function refused(name, message) {
    return section(name, "error", [el("p", { class: "message", text: message })]);
  }

  // The departure map: one cell per element, rows = every index but the last, coloured by
  // |got - expected| over what the tolerance allows (red at and past 1: departs).
  function differenceMap(got, expected, tolerance, readout) {
    const shape = expected.shape, cols = shape.length ? shape[shape.length - 1] : 1;
    const rows = cols ? expected.data.length / cols : 0, lead = shape.slice(0, -1);
    const ratio = (at) => {
      const g = got.data[at], e = expected.data[at];
      if (T.close(g, e, tolerance)) return Number.isFinite(g - e) ? 0.4 * Math.abs(g - e) / T.allowed(e, tolerance) : 0;
      return 1;
    };
    return V.matrix(rows, cols, (i, j) => ratio(i * cols + j), {
      name: "difference", numbers: false, limit: 1, corner: shape.length > 1 ? `[${lead.map(() => "·").join(", ")}]` : "",
      rowLabel: (i) => (lead.length ? `[${T.unravel(i, lead).join(", ")}]` : ""),
      bad: (i, j) => ratio(i * cols + j) >= 1, readout: readout,
      hover: (i, j) => {
        const at = i * cols + j, e = expected.data[at];
        return `[${T.unravel(at, shape).join(", ")}]: yours ${T.format(got.data[at], got.dtype)}, PyTorch's ${T.format(e, expected.dtype)}, ` +
               `allowed ±${T.allowed(e, tolerance).toPrecision(3)}`;
      },
    });
  }

  // One dropped .npy: refused with a message, or compared and mapped.
  function answer(bytes, fileName, record, r, readout) {
    const name = fileName.replace(/\.npy$/, "");
    if (!fileName.endsWith(".npy") || !ANSWERS.includes(name))
      return refused(fileName, `not an answer file: the page checks ${ANSWERS.map((x) => x + ".npy").join(", ")}`);
    const expected = record.tensors[name];
    if (!expected) return refused(fileName, `this case has no ${name} of PyTorch's to compare with` +
                                            (name === "attn_output_weights" ? " (need_weights=False)" : ""));
    let got;
    try {
      got = MHA.npy.parse(bytes, fileName);
    } catch (error) {
      return refused(fileName, error.message);
    }
    if (got.dtype !== expected.dtype)
      return refused(fileName, `dtype ${got.dtype === "f4" ? "<f4 (float32)" : "<f8 (float64)"}, but the case is ${record.case.dtype}: write the case's dtype`);
    if (!T.sameShape(got.shape, expected.shape))
      return refused(fileName, `shape ${T.shapeText(got.shape)}, but PyTorch's ${name} is ${T.shapeText(expected.shape)}`);
    const tolerance = record.case.tolerance, result = T.compare(got, expected, tolerance);
    const children = [el("p", { class: "message", text: result.ok ? `matches PyTorch's ${name} ${T.shapeText(expected.shape)} within rtol ${tolerance.rtol}, atol ${tolerance.atol}`
                                                                 : `departs from PyTorch's ${name}: ${result.bad} of ${expected.data.length} elements outside rtol ${tolerance.rtol}, atol ${tolerance.atol}` })];
    if (!result.ok) {
      const index = T.unravel(result.first, expected.shape), e = expected.data[result.first];
      children.push(el("p", { class: "departure", dataset: { index: index.join(",") },
        text: `first departs at [${index.join(", ")}]: yours ${T.format(got.data[result.first], got.dtype)}, PyTorch's ${T.format(e, expected.dtype)}, allowed ±${T.allowed(e, tolerance).toPrecision(3)}` }));
    }
    children.push(V.figure("difference map", "each cell |yours − PyTorch's| over what the tolerance allows; outlined red: departs. Hover a cell.",
                           differenceMap(got, expected, tolerance, readout)));
    return section(fileName, result.ok ? "pass" : "fail", children);
  }

  function isString(x) {
    return typeof x === "string";
  }

  // The diagnosis' fields, each of the kind the schema gives, or a message saying which is not.
  function validDiagnosis(d) {
    if (typeof d !== "object" || d === null || Array.isArray(d)) return "not a JSON object";
    if (!isString(d.case)) return "no \"case\" string";
    if (!VERDICTS.includes(d.verdict)) return `"verdict" is not one of ${VERDICTS.join(", ")}`;
    if (d.error !== undefined && !isString(d.error)) return "\"error\" is not a string";
    if (d.departure !== undefined && !isString(d.departure)) return "\"departure\" is not a string";
    if (!Array.isArray(d.named)) return "no \"named\" list";
    for (const m of d.named)
      if (typeof m !== "object" || m === null || !["id", "step", "explanation", "page"].every((k) => m[k] === undefined || isString(m[k])) || !isString(m.id))
        return "a \"named\" entry is not {id, step, explanation, page} strings";
    return "";
  }

  function mistake(m, docsBase) {
    const page = m.page || "";
    const link = PAGE.test(page) ? el("a", { href: docsBase + page.slice("docs/".length), text: page }) : el("span", { text: page });
    return el("li", { class: "named", dataset: { id: m.id } },
              [el("strong", { text: m.id }), m.step ? ` (step: ${m.step})` : "", m.explanation ? `: ${m.explanation.replace(/\.?$/, ".")}` : "",
               page ? el("span", { class: "reread" }, [" Reread ", link, "."]) : null]);
  }

  // The JSON of mha-grade diagnose --json: {case, verdict, error, named: [{id, step,
  // explanation, page}], departure}.
  function diagnosis(bytes, fileName, record, docsBase) {
    if (bytes.length > MAX_JSON) return refused(fileName, `${bytes.length} bytes: more than a diagnosis is`);
    let d;
    try {
      d = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch (error) {
      return refused(fileName, `not JSON: ${error.message}`);
    }
    const problem = validDiagnosis(d);
    if (problem) return refused(fileName, `not a diagnosis of mha-grade diagnose --json: ${problem}`);
    const children = [el("p", { class: "message", text: `mha-grade's verdict on ${d.case}: ${d.verdict}` })];
    if (d.case !== record.name && !d.case.endsWith("/" + record.name))
      children.push(el("p", { class: "warning", text: `This diagnosis is of the case ${d.case}; the page shows ${record.name}.` }));
    if (d.error) children.push(el("p", { class: "error-text", text: `error: ${d.error}` }));
    if (d.departure) children.push(el("p", { class: "departure", text: `where it first departs: ${d.departure}` }));
    if (d.named.length) children.push(el("ul", { class: "mistakes" }, d.named.map((m) => mistake(m, docsBase))));
    else if (d.verdict !== "pass") children.push(el("p", { text: "mha-grade names no known mistake for this answer." }));
    const s = section(fileName, d.verdict === "pass" ? "pass" : "fail", children);
    s.classList.add("diagnosis");
    s.dataset.verdict = d.verdict;
    return s;
  }

  return { answer, diagnosis };
})();
