// explorer/web/app.js: the attention explorer's page: pick a case, see each step, check an answer.
//
// The data files (data/index.js, data/<generation>/<case>.js, written by
// explorer/build_site.py from the golden cases) call MHA_EXPLORER.setIndex and
// MHA_EXPLORER.register; a case is loaded by adding its <script>, which works from
// file:// where fetch() does not. Four views, each a function that draws into #view:
//   packed   in_proj_weight as a heat map with W_q, W_k, W_v marked, and the q, k, v its
//            blocks give, next to PyTorch's own (docs/02-packed-layout.md, 04);
//   order    the six orders of the three blocks, each recomputed and compared (04);
//   heads    per head: its columns of q, k, v, scores, masks, weights; the averaged
//            weights and the output (05, 09, 11);
//   check    a student's .npy answer or mha-grade's diagnosis, dropped on the page.
// The state is in the address (#case=1.13/worked_example_f64&view=heads&n=0), so that
// the course's pages link to a view of a case.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim.
"use strict";

window.MHA = window.MHA || {};

(function () {
  const T = MHA.tensor, F = MHA.forward, V = MHA.views, el = V.el;
  const SETTINGS = window.MHA_EXPLORER_SETTINGS || { fault: "", docsBase: "../docs/" };
  const VIEWS = { packed: "Packed weight", order: "Q→K→V order", heads: "Heads", check: "Check your answer" };
  const GENERATIONS = { "1.13": "PyTorch 1.13.1", "2.6": "PyTorch 2.6" };
  const DEFAULT_CASE = "1.13/worked_example_f64";
  const state = { index: [], records: {}, key: null, view: "packed", n: 0, i: 0, j: 0, order: "QKV", run: null };

  // ---- loading: the data files call these ----

  window.MHA_EXPLORER = {
    setIndex(index) {
      state.index = index;
    },
    register(record) {
      state.records[record.key] = record;
    },
  };

  function loadCase(key) {
    return new Promise((resolve, reject) => {
      if (state.records[key]) return resolve(state.records[key]);
      const script = el("script", { src: `data/${key}.js` });
      script.onload = () => (state.records[key] ? resolve(state.records[key]) : reject(new Error(`no case ${key}`)));
      script.onerror = () => reject(new Error(`cannot load data/${key}.js`));
      document.head.appendChild(script);
    });
  }

  // The tensors decoded once, in place: base64 -> Float64Array.
  function decoded(record) {
    if (!record.decoded) {
      for (const name of Object.keys(record.tensors)) record.tensors[name] = T.decode(record.tensors[name]);
      record.decoded = true;
    }
    return record;
  }

  // ---- the address ----

  function readAddress() {
    const params = new URLSearchParams(location.hash.slice(1));
    state.key = params.get("case") || state.key || DEFAULT_CASE;
    if (!state.index.some((c) => c.key === state.key)) {
      const byName = state.index.find((c) => c.name === state.key);
      state.key = byName ? byName.key : DEFAULT_CASE;
    }
    state.view = VIEWS[params.get("view")] ? params.get("view") : state.view;
    state.n = Number(params.get("n")) || 0;
  }

  function writeAddress() {
    const hash = `#case=${state.key}&view=${state.view}&n=${state.n}`;
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }

  // ---- the header: case picker, views, status ----

  function casePicker() {
    const select = document.getElementById("case-picker");
    V.clear(select);
    for (const generation of Object.keys(GENERATIONS)) {
      const cases = state.index.filter((c) => c.generation === generation);
      const group = el("optgroup", { label: `${GENERATIONS[generation]}: ${cases[0] ? cases[0].source.replace(/\/[^/]*$/, "") : ""}` });
      for (const c of cases)
        group.appendChild(el("option", { value: c.key, text: c.drawn ? c.name : `${c.name} (rejected by PyTorch: nothing to draw)` }));
      select.appendChild(group);
    }
    select.value = state.key;
    select.addEventListener("change", () => {
      state.key = select.value;
      state.n = 0;
      show();
    });
  }

  function viewTabs() {
    const nav = document.getElementById("views");
    for (const [view, title] of Object.entries(VIEWS))
      nav.appendChild(el("button", { type: "button", dataset: { view: view }, text: title,
                                     onclick: () => { state.view = view; show(); } }));
  }

  function setStatus(text, ready) {
    const status = document.getElementById("status");
    status.textContent = text;
    status.dataset.state = ready ? "ready" : "loading";
    status.dataset.case = state.key;
    status.dataset.view = state.view;
  }

  function readout(text) {
    document.getElementById("readout").textContent = text;
  }

  // ---- the case in words ----

  function optionWords(record, r) {
    const o = r.options, t = record.tensors, s = r.sizes, words = [];
    words.push(o.batched ? (o.batchFirst ? `batch_first=True: query is (N, L, E) = ${T.shapeText(t.query.shape)}, ` +
                                          "transposed to (L, N, E) first, and the output transposed back"
                                        : `sequence-first: query is (L, N, E) = ${T.shapeText(t.query.shape)}`)
                         : `unbatched: query is (L, E) = ${T.shapeText(t.query.shape)}, given a batch of one (N = 1) and returned without it`);
    words.push(`E = ${s.E}, H = ${s.H} heads of D = ${s.D} columns, L = ${s.L} queries, S = ${s.S} keys` +
               (s.Sp !== s.S ? `, S' = ${s.Sp} keys attended to` : "") + (o.batched ? `, N = ${s.N}` : ""));
    words.push(o.packed ? "one packed in_proj_weight (3E, E): rows [0, E) W_q, [E, 2E) W_k, [2E, 3E) W_v"
                        : `separate projections (kdim = ${o.kdim}, vdim = ${o.vdim}): q_proj_weight, k_proj_weight, v_proj_weight, no packed weight`);
    if (!o.bias) words.push("no in_proj_bias (bias=False)");
    if (o.addBiasKv) words.push("bias_k and bias_v: one more key and value, appended after the projection (S' grows by one)");
    if (o.addZeroAttn) words.push("add_zero_attn: a key and a value of zeros, appended after the heads are split (S' grows by one)");
    if (t.static_k || t.static_v) words.push("static_k / static_v: keys / values already projected and split into heads, in place of k / v (a KV cache)");
    for (const name of ["attn_mask", "key_padding_mask"])
      if (t[name]) words.push(`${name} ${T.shapeText(t[name].shape)}, ${t[name].dtype === "b1" ? "bool (True = masked)" : "float (added to the scores)"}`);
    if (o.isCausal) words.push("is_causal=True" + (o.v2 ? ": 2.x's hint that attn_mask is causal" : ""));
    words.push(o.needWeights ? (o.average ? "need_weights: the weights averaged over the heads are returned"
                                          : "need_weights, average_attn_weights=False: the weights of each head are returned")
                             : "need_weights=False: PyTorch returned no weights (the page computes them all the same)");
    if (o.training && o.dropout > 0) words.push(`training, dropout p = ${o.dropout}: PyTorch's own dropout mask is replayed`);
    else if (o.dropout > 0) words.push(`dropout = ${o.dropout}, but eval mode: no dropout`);
    return words;
  }

  function pathWords(r) {
    const p = r.path.path;
    const what = p === "fast_path" ? "the native fast path, torch._native_multi_head_attention"
               : p === "sdpa" ? "2.x's branch without weights, scaled_dot_product_attention (a fully masked row gets weight 0)"
               : "multi_head_attention_forward, computing the weights";
    return `PyTorch ran ${what}` + (r.path.why ? ` (not the fast path: ${r.path.why})` : "");
  }

  function caseInfo(record, r) {
    const c = record.case, box = V.clear(document.getElementById("case-info"));
    const kind = c.format === 3 ? "a call of F.multi_head_attention_forward" : "a call of nn.MultiheadAttention";
    box.appendChild(el("p", { id: "generation" }, [el("strong", { text: `Made by ${GENERATIONS[record.generation] || "PyTorch " + record.generation}` }),
      ` (${record.source}, format ${c.format}: ${kind}; ${c.dtype}; tolerance rtol ${c.tolerance.rtol}, atol ${c.tolerance.atol})`]));
    box.appendChild(el("p", { class: "description", text: c.description }));
    if (!r) return;
    const words = optionWords(record, r).concat([pathWords(r)], r.notes);
    if (c.format === 2) words.push("This case also holds PyTorch's gradients (format 2): the page draws its forward only.");
    box.appendChild(el("ul", { id: "options" }, words.map((w) => el("li", { text: w }))));
  }

  // ---- view: the packed weight ----

  function blockOf(r, row) {
    for (const x of ["q", "k", "v"]) {
      const start = r.proj.starts[x], E = r.sizes.E;
      const offset = (row - start + 3 * E) % (3 * E);
      if (offset < E) return { name: "W_" + x, bias: "b_" + x, offset: offset, start: start };
    }
    return null;
  }

  function packedWeight(record, r) {
    const W = record.tensors.in_proj_weight, b = record.tensors.in_proj_bias, E = r.sizes.E, dtype = W.dtype;
    const limit = V.limitOf(W.data);
    const get = (i, j) => (j < E ? W.data[i * E + j] : b ? b.data[i] : NaN);
    const hover = (i, j, x) => {
      const block = blockOf(r, i);
      const where = block ? (j < E ? `${block.name}[${block.offset}, ${j}]` : `${block.bias}[${block.offset}]`) +
                            ` (rows [${block.start}, ${block.start + E}))` : "no block";
      return `${j < E ? `in_proj_weight row ${i}, column ${j}` : `in_proj_bias row ${i}`}: ${where}, value ${T.format(x, dtype)}`;
    };
    const table = V.matrix(3 * E, b ? E + 1 : E, get, {
      name: "in_proj_weight", dtype: dtype, numbers: false, limit: limit, readout: readout, hover: hover, corner: "row",
      rowLabel: (i) => { const k = blockOf(r, i); return k && k.offset === 0 ? `${k.name} ${i}` : String(i); },
      colLabel: (j) => (j < E ? String(j) : "bias"),
    });
    for (const tr of table.querySelectorAll("tr")) {
      const i = Number(tr.rowIndex) - 1, block = i >= 0 ? blockOf(r, i) : null;
      if (block) tr.classList.add("block-" + block.name.slice(2));
      if (block && block.offset === 0) tr.classList.add("block-start");
    }
    return V.figure("in_proj_weight (3E, E) and in_proj_bias (3E)",
                    `split as the order ${r.order.split("").join(", ")}: rows [0, E) ${r.order[0]}, [E, 2E) ${r.order[1]}, [2E, 3E) ${r.order[2]}. Hover a cell.`,
                    table, { id: "packed-figure" });
  }

  function separateWeights(record, r) {
    const parts = [];
    for (const x of ["q", "k", "v"]) {
      const w = r.proj["w" + x];
      parts.push(V.figure(`${x}_proj_weight ${T.shapeText(w.shape)}`, `W_${x}`,
        V.tensorMatrix(w, { name: `${x}_proj_weight`, numbers: false, readout: readout, corner: "row",
                            hover: (i, j, value) => `${x}_proj_weight row ${i}, column ${j}: W_${x}[${i}, ${j}], value ${T.format(value, w.dtype)}` })));
    }
    return el("div", { class: "row" }, parts);
  }

  // q, k, v of one token, the page's next to PyTorch's.
  function tokenTable(record, r) {
    const t = record.tensors, s = r.sizes, n = state.n, dtype = r.options.dtype;
    const pick = (x, pos) => (e) => x.data[(pos * s.N + n) * s.E + e];
    const columns = [["q", r.q, state.i], ["k", r.k, state.j], ["v", r.v, state.j]];
    const head = el("tr", {}, [el("th", { text: "e (head)" })]);
    for (const [name] of columns) head.append(el("th", { text: `${name} (page)` }), el("th", { text: `${name} (PyTorch)` }));
    const rows = [head];
    for (let e = 0; e < s.E; ++e) {
      const tr = el("tr", { class: e % s.D === 0 ? "head-start" : "" }, [el("th", { text: `${e} (${Math.floor(e / s.D)})` })]);
      for (const [name, x, pos] of columns) {
        const mine = pick(x, pos)(e), theirs = t[name] ? pick(t[name], pos)(e) : NaN;
        const td = el("td", { dataset: { name: name, e: e } }, T.format(mine, dtype));
        if (t[name] && !T.close(mine, theirs, r.options.tolerance)) td.classList.add("bad");
        tr.append(td, el("td", { class: "theirs" }, t[name] ? T.format(theirs, dtype) : "(not in the case)"));
      }
      rows.push(tr);
    }
    return el("table", { class: "matrix token", dataset: { tensor: "token" } }, rows);
  }

  function positionPicker(label, count, value, onChange) {
    const select = el("select", { "aria-label": label, onchange: (ev) => onChange(Number(ev.target.value)) });
    for (let x = 0; x < count; ++x) select.appendChild(el("option", { value: x, text: String(x) }));
    select.value = value;
    return el("label", {}, [label + " ", select]);
  }

  function batchPicker(r) {
    if (!r.options.batched) return el("span", { class: "muted", text: "unbatched: N = 1" });
    return positionPicker("batch n", r.sizes.N, state.n, (n) => { state.n = n; show(); });
  }

  // q (L, E), k and v (S, E) of batch entry n, as the page computes them: (L, N, E)[:, n, :].
  function batchSlice(x, n) {
    const [R, N, E] = x.shape, out = T.zeros([R, E], x.dtype);
    for (let i = 0; i < R; ++i) out.data.set(x.data.subarray((i * N + n) * E, (i * N + n + 1) * E), i * E);
    return out;
  }

  function projectionTables(record, r) {
    const t = record.tensors, n = state.n, parts = [];
    for (const [name, x] of [["q", r.q], ["k", r.k], ["v", r.v]]) {
      const mine = batchSlice(x, n), theirs = t[name] ? batchSlice(t[name], n) : null;
      const result = theirs ? T.compare(mine, theirs, r.options.tolerance) : null;
      const cols = mine.shape[1];
      parts.push(V.figure(`${name} = ${name === "q" ? "query" : name === "k" ? "key" : "value"} · W_${name}ᵀ + b_${name}`,
        `(${name === "q" ? "L" : "S"}, E) of batch entry ${n}, computed by the page; `,
        [theirs ? V.verdict(result, theirs, mine, mine.dtype) : el("span", { class: "verdict none", text: "the case holds no PyTorch " + name }),
         V.tensorMatrix(mine, { name: name, dataset: { n: n }, corner: name === "q" ? "L" : "S",
                                bad: theirs ? (i, j) => !T.close(mine.data[i * cols + j], theirs.data[i * cols + j], r.options.tolerance) : null })],
        { class: "wide" }));
    }
    return parts;
  }

  function viewPacked(record, r, root) {
    root.appendChild(el("p", { class: "lead", text: "Which rows are Q? PyTorch packs the three projections into one weight: " +
      "q = query · W_qᵀ + b_q with W_q = in_proj_weight[0:E], k with rows [E, 2E), v with rows [2E, 3E)." }));
    const s = r.sizes;
    root.appendChild(el("div", { class: "pickers" }, [batchPicker(r),
      positionPicker("query position i", s.L, state.i, (i) => { state.i = i; show(); }),
      positionPicker("key position j", s.S, state.j, (j) => { state.j = j; show(); })]));
    root.appendChild(el("div", { class: "row" }, [
      r.options.packed ? packedWeight(record, r) : separateWeights(record, r),
      V.figure("One token", `q of query position ${state.i}, k and v of key position ${state.j}, batch entry ${state.n}: the page's, then PyTorch's own (q.npy, k.npy, v.npy).`, tokenTable(record, r))]));
    for (const part of projectionTables(record, r)) root.appendChild(part);
  }

  // ---- view: the six orders ----

  function orderRows(record) {
    const rows = [];
    for (const order of F.ORDERS) {
      const r = F.run(record, order, SETTINGS.fault);
      rows.push({ order: order, run: r, results: r ? F.compareWithPyTorch(record, r) : null });
    }
    return rows;
  }

  function viewOrder(record, r, root) {
    const names = ["q", "k", "v", "attn_output", "attn_output_weights"].filter((x) => record.tensors[x]);
    root.appendChild(el("p", { class: "lead", text: "Read the three blocks of the weight in each of the six orders, recompute, " +
      "and compare with PyTorch's tensors at the case's tolerance. Only Q, K, V is PyTorch's." }));
    const rows = orderRows(record);
    const blocks = r.options.packed ? "rows [0,E), [E,2E), [2E,3E) read as" : "q_proj_weight, k_proj_weight, v_proj_weight taken as";
    const head = el("tr", {}, [el("th", { text: blocks })].concat(names.map((x) => el("th", { text: x }))));
    const body = [head];
    for (const row of rows) {
      const tr = el("tr", { dataset: { order: row.order }, class: row.order === state.order ? "picked" : "" },
                    [el("th", {}, [el("label", {}, [el("input", { type: "radio", name: "order", value: row.order,
                      onchange: () => { state.order = row.order; show(); } }), " " + row.order.split("").join(", ")])])]);
      if (row.order === state.order) tr.querySelector("input").checked = true;
      for (const x of names) {
        const res = row.results && row.results[x];
        const text = !row.run ? "cannot: the weights' shapes differ" : res.ok ? "matches" : `differs (max |Δ| ${res.maxError.toPrecision(3)})`;
        tr.appendChild(el("td", { class: !row.run ? "none" : res.ok ? "pass" : "fail", dataset: { name: x }, text: text }));
      }
      body.push(tr);
    }
    root.appendChild(V.figure("The six orders", "", el("table", { class: "orders", dataset: { tensor: "orders" } }, body)));
    const matching = rows.filter((row) => row.results && Object.values(row.results).every((x) => x.ok)).map((row) => row.order);
    root.appendChild(el("p", { id: "order-summary", class: matching.length === 1 && matching[0] === "QKV" ? "pass" : "fail",
      text: matching.length === 1 ? `Only ${matching[0].split("").join(", ")} gives PyTorch's numbers.`
          : matching.length === 0 ? "No order gives PyTorch's numbers."
          : `${matching.length} orders give PyTorch's numbers here (${matching.join(", ")}): this case cannot tell them apart. ` +
            (record.tensors.static_k && record.tensors.static_v
              ? "static_k and static_v replace k and v, so the K and V blocks are never used. "
              : "What it compares comes out the same for them: a query that attends to one key only, or a row that is NaN whatever the order. ") +
            "Pick a case with q.npy, k.npy, v.npy to tell all six apart." }));
    const picked = rows.find((row) => row.order === state.order);
    if (picked && picked.run) {
      const out = picked.run.outSeqFirst, mine = batchSlice(out, state.n);
      const theirs = batchSlice(seqFirstExpected(record, picked.run), state.n);
      root.appendChild(el("div", { class: "pickers" }, [batchPicker(r)]));
      root.appendChild(V.figure(`attn_output with the order ${state.order.split("").join(", ")}`, `(L, E) of batch entry ${state.n}; cells that depart from PyTorch's are outlined.`,
        V.tensorMatrix(mine, { name: "order-output", corner: "L", bad: (i, j) => !T.close(mine.data[i * mine.shape[1] + j], theirs.data[i * mine.shape[1] + j], r.options.tolerance) })));
    }
  }

  // PyTorch's attn_output as (L, N, E), whatever layout forward returned it in.
  function seqFirstExpected(record, r) {
    const x = record.tensors.attn_output, o = r.options;
    if (!o.batched) return { shape: [x.shape[0], 1, x.shape[1]], dtype: x.dtype, data: x.data };
    if (!o.batchFirst) return x;
    const [N, L, E] = x.shape, out = T.zeros([L, N, E], x.dtype);
    for (let n = 0; n < N; ++n) for (let i = 0; i < L; ++i) for (let e = 0; e < E; ++e) out.data[(i * N + n) * E + e] = x.data[(n * L + i) * E + e];
    return out;
  }

  // ---- view: the heads ----

  // Batch-head b's (rows, cols) slice of a (B, rows, cols) tensor.
  function headSlice(x, b) {
    const [, R, C] = x.shape;
    return { shape: [R, C], dtype: x.dtype, data: x.data.subarray(b * R * C, (b + 1) * R * C) };
  }

  function maskSlice(mask, b, L, S) {
    if (!mask) return null;
    const a = mask.shape[0] > 1 ? b : 0;
    return { shape: [L, S], dtype: "f8", data: mask.data.subarray(a * L * S, (a + 1) * L * S) };
  }

  function headCard(record, r, h) {
    const s = r.sizes, n = state.n, b = n * s.H + h, dtype = r.options.dtype, keyLabel = (j) => keyName(r, j);
    const parts = [];
    parts.push(V.figure(`q, k, v of head ${h}`, `columns [${h * s.D}, ${(h + 1) * s.D}) of q, k, v: (L, D), (S', D), (S', D)`,
      el("div", { class: "row" }, [V.tensorMatrix(headSlice(r.qh, b), { name: "q-head", dataset: { n: n, h: h }, corner: "q" }),
                                   V.tensorMatrix(headSlice(r.kh, b), { name: "k-head", dataset: { n: n, h: h }, corner: "k", rowLabel: keyLabel }),
                                   V.tensorMatrix(headSlice(r.vh, b), { name: "v-head", dataset: { n: n, h: h }, corner: "v", rowLabel: keyLabel })])));
    parts.push(V.figure("scores", `${r.scaleText}, then q kᵀ: (L, S')`,
      V.tensorMatrix(headSlice(r.scores.raw, b), { name: "scores", dataset: { n: n, h: h }, corner: "L\\S'", colLabel: keyLabel })));
    const mask = maskSlice(r.mask, b, s.L, s.Sp);
    if (mask) parts.push(V.figure("mask", r.masks.causalHint ? "the causal mask of the is_causal hint" :
                                          "attn_mask + key_padding_mask, merged and added to the scores (-inf: masked)",
      V.tensorMatrix(mask, { name: "mask", dataset: { n: n, h: h }, dtype: dtype, corner: "L\\S'", colLabel: keyLabel })));
    const w = headSlice(r.weights, b);
    const full = r.fullyMasked.filter(([bb]) => bb === b).map(([, i]) => i);
    parts.push(V.figure(`weights of head ${h}`, "softmax over the keys: (L, S')" +
        (full.length ? `; rows ${full.join(", ")} are fully masked: ${r.path.path === "sdpa" ? "SDPA gives them 0" : "softmax of only -inf is NaN"}` : ""),
      V.tensorMatrix(w, { name: "weights-head", dataset: { n: n, h: h }, corner: "L\\S'", colLabel: keyLabel, limit: 1,
                          bad: perHeadBad(record, r, n, h) })));
    parts.push(V.figure(`output of head ${h}`, "weights · v: (L, D)",
      V.tensorMatrix(headSlice(r.headOutput, b), { name: "head-output", dataset: { n: n, h: h }, corner: "L" })));
    const card = el("section", { class: "head", dataset: { h: h } }, [el("h3", { text: `head ${h}` })].concat(parts));
    for (const i of full) card.querySelectorAll(`table[data-tensor="weights-head"] tr`)[i + 1].classList.add("fully-masked");
    return card;
  }

  // Which key column j is: a key, bias_k, or the zero key.
  function keyName(r, j) {
    const o = r.options, base = r.sizes.Sp - (o.addBiasKv ? 1 : 0) - (o.addZeroAttn ? 1 : 0);
    if (j < base) return String(j);
    if (o.addBiasKv && j === base) return "bias_k";
    return "zero";
  }

  // PyTorch's per-head weights of (n, h), where the case returned them.
  function perHeadBad(record, r, n, h) {
    const expected = record.tensors.attn_output_weights, o = r.options;
    if (!expected || o.average) return null;
    const s = r.sizes, offset = ((o.batched ? n * s.H : 0) + h) * s.L * s.Sp, b = n * s.H + h;
    return (i, j) => !T.close(r.weights.data[b * s.L * s.Sp + i * s.Sp + j], expected.data[offset + i * s.Sp + j], o.tolerance);
  }

  function viewHeads(record, r, root) {
    const s = r.sizes, o = r.options, t = record.tensors, n = state.n;
    root.appendChild(el("p", { class: "lead", text: `q, k and v are cut into H = ${s.H} heads of D = ${s.D} columns: head h takes columns ` +
      `[h·D, (h+1)·D). Each head attends on its own; PyTorch ${o.v2 ? "multiplies q by sqrt(1/D)" : "divides q by sqrt(D)"} before the product.` }));
    root.appendChild(el("div", { class: "pickers" }, [batchPicker(r)]));
    for (let h = 0; h < s.H; ++h) root.appendChild(headCard(record, r, h));
    // the averaged weights of batch entry n, and the output
    const avg = { shape: [s.L, s.Sp], dtype: o.dtype, data: r.attnWeights.averaged.data.subarray(n * s.L * s.Sp, (n + 1) * s.L * s.Sp) };
    const expectedAvg = t.attn_output_weights && o.average ? { shape: [s.L, s.Sp], dtype: o.dtype, data: t.attn_output_weights.data.subarray(n * s.L * s.Sp, (n + 1) * s.L * s.Sp) } : null;
    root.appendChild(V.figure("weights averaged over the heads", `(L, S') of batch entry ${n}: ${o.v2 ? "mean" : "sum / H"} over the heads` +
        (o.needWeights ? (o.average ? "; what forward returned" : "; forward returned the heads' own weights (above)") : "; PyTorch returned no weights"),
      [expectedAvg ? V.verdict(T.compare(avg, expectedAvg, o.tolerance), expectedAvg, avg, o.dtype) : null,
       V.tensorMatrix(avg, { name: "weights-avg", dataset: { n: n }, corner: "L\\S'", limit: 1, colLabel: (j) => keyName(r, j),
                             bad: expectedAvg ? (i, j) => !T.close(avg.data[i * s.Sp + j], expectedAvg.data[i * s.Sp + j], o.tolerance) : null })]));
    if (t.attn_output_weights && !o.average)
      root.appendChild(el("p", {}, [V.verdict(T.compare(r.attnWeights.perHead, t.attn_output_weights, o.tolerance), t.attn_output_weights, r.attnWeights.perHead, o.dtype),
                                     " (every head's weights against PyTorch's attn_output_weights)"]));
    const out = batchSlice(r.outSeqFirst, n), expectedOut = batchSlice(seqFirstExpected(record, r), n);
    root.appendChild(V.figure("attn_output", `the heads side by side again, then out_proj: (L, E) of batch entry ${n}`,
      [V.verdict(T.compare(out, expectedOut, o.tolerance), expectedOut, out, o.dtype),
       V.tensorMatrix(out, { name: "attn_output", dataset: { n: n }, corner: "L",
                             bad: (i, j) => !T.close(out.data[i * s.E + j], expectedOut.data[i * s.E + j], o.tolerance) })]));
  }

  // ---- view: check an answer ----

  const ANSWER_FILES = ["attn_output", "attn_output_weights", "q", "k", "v"];

  function viewCheck(record, r, root) {
    root.appendChild(el("p", { class: "lead", text: "Drop the .npy files your code wrote for this case (attn_output.npy, " +
      "attn_output_weights.npy, and q.npy, k.npy, v.npy if you have them), or the JSON of mha-grade diagnose --json. " +
      "Nothing leaves your browser." }));
    const input = el("input", { type: "file", id: "answer-files", multiple: "", accept: ".npy,.json" });
    const zone = el("div", { id: "drop-zone" }, ["Drop files here, or ", input]);
    input.addEventListener("change", () => {
      const files = Array.from(input.files);
      input.value = "";  // so that choosing the same file again is checked again
      checkFiles(record, r, files);
    });
    zone.addEventListener("dragover", (ev) => { ev.preventDefault(); zone.classList.add("over"); });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (ev) => { ev.preventDefault(); zone.classList.remove("over"); checkFiles(record, r, Array.from(ev.dataTransfer.files)); });
    root.append(zone, el("div", { id: "check-results" }));
  }

  async function checkFiles(record, r, files) {
    const results = V.clear(document.getElementById("check-results"));
    results.dataset.state = "checking";
    for (const file of files) {
      const bytes = new Uint8Array(await file.arrayBuffer());
      results.appendChild(file.name.endsWith(".json") ? MHA.check.diagnosis(bytes, file.name, record, SETTINGS.docsBase)
                                                      : MHA.check.answer(bytes, file.name, record, r, readout));
    }
    results.dataset.state = "done";
  }

  // ---- drawing a case ----

  const DRAW = { packed: viewPacked, order: viewOrder, heads: viewHeads, check: viewCheck };

  function rejection(record, root) {
    const c = record.case;
    root.appendChild(el("p", { class: "lead", id: "rejected",
      text: "PyTorch rejected this call: the case tests that an implementation refuses it, and its tensors need not be " +
            "consistent, so there is no forward to draw." + (c.pytorch_error ? ` PyTorch said: ${c.pytorch_error}` : "") }));
    root.appendChild(el("p", { text: `Its files: ${record.files.join(", ")}` }));
  }

  async function show() {
    writeAddress();
    setStatus(`loading ${state.key}`, false);
    for (const button of document.querySelectorAll("#views button")) button.classList.toggle("active", button.dataset.view === state.view);
    document.getElementById("case-picker").value = state.key;
    const start = performance.now();
    let record;
    try {
      record = decoded(await loadCase(state.key));
    } catch (error) {
      setStatus(error.message, true);
      return;
    }
    const root = V.clear(document.getElementById("view"));
    if (!record.drawn) {
      caseInfo(record, null);
      rejection(record, root);
    } else {
      const r = F.run(record, "QKV", SETTINGS.fault);
      state.n = Math.min(state.n, r.sizes.N - 1), state.i = Math.min(state.i, r.sizes.L - 1), state.j = Math.min(state.j, r.sizes.S - 1);
      caseInfo(record, r);
      DRAW[state.view](record, r, root);
    }
    const ms = performance.now() - start;
    document.getElementById("draw-time").textContent = `drawn in ${ms.toFixed(1)} ms`;
    document.getElementById("draw-time").dataset.ms = ms.toFixed(3);
    setStatus(`${state.key}: ${VIEWS[state.view]}`, true);
  }

  function main() {
    casePicker();
    viewTabs();
    readAddress();
    document.getElementById("case-picker").value = state.key;
    if (SETTINGS.fault) document.getElementById("fault").textContent = `planted fault: ${SETTINGS.fault}`;
    window.addEventListener("hashchange", () => { readAddress(); show(); });
    show();
  }

  window.addEventListener("DOMContentLoaded", main);
})();
