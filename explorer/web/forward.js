// explorer/web/forward.js: the forward of nn.MultiheadAttention, recomputed in the browser.
//
// What the page draws is computed here from the case's inputs and parameters, step by
// step in the order of torch/nn/functional.py's multi_head_attention_forward (PyTorch
// 1.13.1 and 2.6 alike), keeping every intermediate tensor for the views: the packed
// in_proj_weight split into W_q, W_k, W_v, the projections, bias_k/bias_v, the heads,
// static_k/static_v, add_zero_attn, the masks as the case's PyTorch generation reads and
// merges them, the scaled scores, softmax, dropout (replayed from the case's mask), the
// heads merged and out_proj. It mirrors the library's textbook (modules/textbook/
// reference_forward.cpp, masks.cpp, generations.hpp, modules/api/pytorch_paths.hpp), in
// Float64Array arithmetic rounded to the case's dtype after each step.
//
// It is not PyTorch: its sums run in float64, so its float32 results may differ from
// PyTorch's in the last bits; the page compares them with the case's tolerance.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim = E / H, B = N*H.
"use strict";

window.MHA = window.MHA || {};

MHA.forward = (function () {
  const T = MHA.tensor;
  const ORDERS = ["QKV", "QVK", "KQV", "KVQ", "VQK", "VKQ"];

  // ---- the case's options, whichever format wrote them ----

  // Format 1 and 2 describe a module call, format 3 a call of the functional form.
  function optionsOf(record) {
    const c = record.case, t = record.tensors;
    const functional = c.format === 3;
    const f = functional ? c.functional : c.forward;
    const m = functional ? c.functional : c.module;
    const query = t.query.shape;
    const o = {
      functional: functional,
      generation: record.generation,
      v2: record.generation !== "1.13",
      E: functional ? m.embed_dim_to_check : m.embed_dim,
      H: m.num_heads,
      batchFirst: !functional && m.batch_first,
      addBiasKv: functional ? "bias_k" in t : m.add_bias_kv,
      addZeroAttn: m.add_zero_attn,
      bias: "in_proj_bias" in t,
      packed: "in_proj_weight" in t,
      dropout: functional ? m.dropout_p : m.dropout,
      training: f.training,
      needWeights: f.need_weights,
      average: f.average_attn_weights,
      isCausal: !functional && !!f.is_causal,
      gradEnabled: functional || f.grad_enabled === undefined ? true : f.grad_enabled,
      selfAttention: !!(c.inputs && c.inputs.query_is_key && c.inputs.key_is_value),
      batched: query.length === 3,
      dtype: record.tensors.query.dtype,
      tolerance: c.tolerance,
    };
    o.D = o.E / o.H;
    o.kdim = t.key.shape[t.key.shape.length - 1];
    o.vdim = t.value.shape[t.value.shape.length - 1];
    return o;
  }

  // ---- which code of PyTorch ran the call (modules/api/pytorch_paths.hpp) ----

  function isFloat(mask) {
    return !!mask && (mask.dtype === "f4" || mask.dtype === "f8");
  }

  // MultiheadAttention.forward's reasons not to take the native fast path, in its order.
  function whyNotFastPath(o, t) {
    if (!o.batched) return "input not batched";
    if (!o.selfAttention) return "query, key and value are not the same tensor";
    if (o.training) return "training is enabled";
    if (o.v2 && o.H % 2 !== 0) return "num_heads is not even";
    if (!o.batchFirst) return "batch_first was not True";
    if (o.addBiasKv) return "bias_k was not None";
    if (!o.v2 && o.dropout > 0) return `dropout was ${o.dropout}, required zero`;
    if (o.addZeroAttn) return "add_zero_attn was enabled";
    if (o.kdim !== o.E || o.vdim !== o.E) return "kdim or vdim differs from embed_dim";
    if (!o.v2 && t.attn_mask) return "attn_mask was not None";
    if (!o.v2 && o.H % 2 === 1) return "num_heads is odd";
    if (o.v2 && (isFloat(t.attn_mask) || isFloat(t.key_padding_mask))) return "a floating-point mask";
    if (o.gradEnabled) return "grad is enabled";
    if (o.v2 && !o.bias) return "in_proj_bias was None";
    return "";
  }

  // weights: multi_head_attention_forward with the (L, S) weights; sdpa: 2.x's branch
  // without weights; fast_path: torch._native_multi_head_attention.
  function pytorchPath(o, t) {
    const why = o.functional ? "the functional form has no fast path" : whyNotFastPath(o, t);
    if (why === "") return { path: "fast_path", why: "" };
    return { path: o.v2 && !o.needWeights ? "sdpa" : "weights", why: why };
  }

  // ---- 1) layouts ----

  // (L, N, E) from what forward was given: batch_first (N, L, E) transposed, an
  // unbatched (L, E) given a batch of one.
  function seqFirstBatched(x, o) {
    if (x.shape.length === 2) return { shape: [x.shape[0], 1, x.shape[1]], dtype: x.dtype, data: x.data };
    if (!o.batchFirst) return x;
    const [N, L, E] = x.shape;
    const out = T.zeros([L, N, E], x.dtype);
    for (let n = 0; n < N; ++n)
      for (let i = 0; i < L; ++i)
        for (let e = 0; e < E; ++e) out.data[(i * N + n) * E + e] = x.data[(n * L + i) * E + e];
    return out;
  }

  // (L, N, E) -> the caller's layout: (N, L, E) batch_first, (L, E) unbatched.
  function callerLayout(x, o) {
    const [L, N, E] = x.shape;
    if (!o.batched) return { shape: [L, E], dtype: x.dtype, data: x.data };
    if (!o.batchFirst) return x;
    const out = T.zeros([N, L, E], x.dtype);
    for (let i = 0; i < L; ++i)
      for (let n = 0; n < N; ++n)
        for (let e = 0; e < E; ++e) out.data[(n * L + i) * E + e] = x.data[(i * N + n) * E + e];
    return out;
  }

  // ---- 2) the masks, as the case's generation reads them (generations.hpp) ----

  // A bool (or uint8) mask as an additive one: True -> -inf, False -> 0; a float mask as is.
  function additive(mask) {
    if (isFloat(mask)) return mask;
    return { shape: mask.shape, dtype: "additive", data: mask.data.map((x) => (x ? -Infinity : 0)) };
  }

  function nonzeroAsBool(mask) {
    return { shape: mask.shape, dtype: "b1", data: mask.data.map((x) => (x !== 0 ? 1 : 0)) };
  }

  // masks_as and prepare_masks: attn (1 or B, L, S) and kpm (N, S) additive, or null,
  // and whether 2.x's is_causal hint replaces attn_mask by the causal mask.
  function prepareMasks(o, t, path) {
    let attn = t.attn_mask || null, kpm = t.key_padding_mask || null;
    const notes = [];
    if (attn && attn.dtype === "u1") attn = nonzeroAsBool(attn);  // 1.13 read a uint8 attn_mask as bool
    if (!o.v2 && kpm && isFloat(kpm)) {
      if (path === "fast_path") {
        kpm = nonzeroAsBool(kpm);
        notes.push("1.13's fast path made the float key_padding_mask bool: nonzero = masked.");
      } else if (attn && !isFloat(attn)) {
        kpm = nonzeroAsBool(kpm);
        notes.push("1.13 merged the float key_padding_mask by logical_or: nonzero = masked.");
      } else if (attn) {
        kpm = null;
        notes.push("1.13's masked_fill with a float key_padding_mask into a float attn_mask fills nothing: " +
                   "the padding is ignored.");
      }
    }
    const hint = o.v2 && o.isCausal && path !== "fast_path";
    const prepared = { attn: null, kpm: null, causalHint: hint && !kpm && !o.needWeights, notes: notes };
    if (kpm) {
      const k = additive(kpm);
      prepared.kpm = { shape: k.shape.length === 1 ? [1, k.shape[0]] : k.shape, data: k.data };  // (N, S)
    }
    if (attn && !prepared.causalHint) {
      const a = additive(attn);
      prepared.attn = { shape: a.shape.length === 2 ? [1, ...a.shape] : a.shape, data: a.data };  // (1 or B, L, S)
    }
    if (prepared.causalHint) notes.push("2.x takes the is_causal hint at its word here: attn_mask is not read.");
    return prepared;
  }

  // One more key that every query may attend to: F.pad(mask, (0, 1)). (..., S) -> (..., S+1)
  function padLast(mask) {
    if (!mask) return null;
    const S = mask.shape[mask.shape.length - 1], rows = S ? mask.data.length / S : 0;
    const out = new Float64Array(rows * (S + 1));
    for (let r = 0; r < rows; ++r)
      for (let j = 0; j < S; ++j) out[r * (S + 1) + j] = mask.data[r * S + j];
    return { shape: [...mask.shape.slice(0, -1), S + 1], data: out };
  }

  // attn_mask (1 or B, L, S') + key_padding_mask (N, S') viewed as (N*H, 1, S'), or the
  // causal mask of the hint, top-left aligned. Returns (1 or B, L, S'), or null.
  function mergedMask(masks, o, N, L, S, round) {
    if (masks.causalHint) {
      const out = new Float64Array(L * S);
      for (let i = 0; i < L; ++i) for (let j = 0; j < S; ++j) out[i * S + j] = j > i ? -Infinity : 0;
      return { shape: [1, L, S], data: out };
    }
    if (!masks.kpm) return masks.attn;
    const H = o.H, B = N * H, out = new Float64Array(B * L * S);
    for (let b = 0; b < B; ++b) {
      const a = masks.attn && masks.attn.shape[0] > 1 ? b : 0, n = Math.floor(b / H);
      for (let i = 0; i < L; ++i)
        for (let j = 0; j < S; ++j) {
          const fromAttn = masks.attn ? masks.attn.data[(a * L + i) * S + j] : 0;
          out[(b * L + i) * S + j] = round(fromAttn + masks.kpm.data[n * S + j]);
        }
    }
    return { shape: [B, L, S], data: out };
  }

  // ---- 3) the in-projection: which rows are W_q, W_k, W_v ----

  // The three blocks of the packed (3E, E) weight in `order` ("QKV": rows [0, E) are W_q,
  // [E, 2E) W_k, [2E, 3E) W_v). Returns, for q, k and v, the first row of its block.
  // The planted fault "split-offset" takes the second block one row too low.
  function blockStarts(order, E, fault) {
    const starts = {};
    for (const [block, name] of Array.from(order).entries())
      starts[name.toLowerCase()] = block * E + (fault === "split-offset" && block === 1 ? 1 : 0);
    return starts;
  }

  // Rows [start, start + rows) of a (R, C) matrix, wrapping past its end (only the fault does).
  function rowsOf(matrix, start, rows) {
    const [R, C] = matrix.shape, out = T.zeros([rows, C], matrix.dtype);
    for (let r = 0; r < rows; ++r)
      for (let c = 0; c < C; ++c) out.data[r * C + c] = matrix.data[((start + r) % R) * C + c];
    return out;
  }

  function slice1(vector, start, n) {
    return { shape: [n], dtype: vector.dtype, data: vector.data.slice(start, start + n) };
  }

  // W_q, W_k, W_v and b_q, b_k, b_v for `order`: the packed weight's blocks, or the three
  // separate weights taken in that order (only where their shapes allow it).
  function projections(record, o, order, fault) {
    const t = record.tensors, E = o.E;
    const p = { order: order, packed: o.packed, starts: null };
    if (o.packed) {
      p.starts = blockStarts(order, E, fault);
      for (const x of ["q", "k", "v"]) p["w" + x] = rowsOf(t.in_proj_weight, p.starts[x], E);  // (E, E)
    } else {
      const stored = { Q: t.q_proj_weight, K: t.k_proj_weight, V: t.v_proj_weight };
      const standard = "QKV";
      for (const [i, x] of ["q", "k", "v"].entries()) {
        const w = stored[standard[order.indexOf(standard[i])]];
        const needed = [E, x === "q" ? E : x === "k" ? o.kdim : o.vdim];
        if (!T.sameShape(w.shape, needed)) return null;  // this order cannot be computed
        p["w" + x] = w;
      }
    }
    if (t.in_proj_bias) {
      const starts = blockStarts(order, E, o.packed ? fault : "");
      for (const x of ["q", "k", "v"]) p["b" + x] = slice1(t.in_proj_bias, starts[x] % (3 * E), E);  // (E)
    }
    return p;
  }

  // x W^T + b: (R, N, In) x (Out, In)^T + (Out) -> (R, N, Out), as F.linear.
  function linear(x, w, b, round) {
    const [R, N, In] = x.shape, Out = w.shape[0];
    const y = T.zeros([R, N, Out], x.dtype);
    for (let r = 0; r < R * N; ++r)
      for (let o = 0; o < Out; ++o) {
        let sum = b ? b.data[o] : 0;
        for (let c = 0; c < In; ++c) sum += x.data[r * In + c] * w.data[o * In + c];
        y.data[r * Out + o] = round(sum);
      }
    return y;
  }

  // ---- 4) to 6) bias_k and bias_v, the heads, static_k and static_v, add_zero_attn ----

  // One more position for every batch entry: (S, N, E) -> (S+1, N, E).
  function appendBias(x, bias) {
    const [S, N, E] = x.shape, out = T.zeros([S + 1, N, E], x.dtype);
    out.data.set(x.data);
    for (let n = 0; n < N; ++n) for (let e = 0; e < E; ++e) out.data[(S * N + n) * E + e] = bias.data[e];
    return out;
  }

  // (L, N, E) -> (N*H, L, D): x.view(L, N*H, D).transpose(0, 1).
  function splitHeads(x, H) {
    const [L, N, E] = x.shape, D = E / H, out = T.zeros([N * H, L, D], x.dtype);
    for (let i = 0; i < L; ++i)
      for (let n = 0; n < N; ++n)
        for (let h = 0; h < H; ++h)
          for (let d = 0; d < D; ++d) out.data[((n * H + h) * L + i) * D + d] = x.data[(i * N + n) * E + h * D + d];
    return out;
  }

  // (N*H, L, D) -> (L, N, E): the heads side by side again.
  function mergeHeads(x, H) {
    const [B, L, D] = x.shape, N = B / H, E = H * D, out = T.zeros([L, N, E], x.dtype);
    for (let b = 0; b < B; ++b)
      for (let i = 0; i < L; ++i)
        for (let d = 0; d < D; ++d) out.data[(i * N + Math.floor(b / H)) * E + (b % H) * D + d] = x.data[(b * L + i) * D + d];
    return out;
  }

  // One more key and value, all zeros: (B, S, D) -> (B, S+1, D).
  function appendZeroRow(x) {
    const [B, S, D] = x.shape, out = T.zeros([B, S + 1, D], x.dtype);
    for (let b = 0; b < B; ++b) out.data.set(x.data.subarray(b * S * D, (b + 1) * S * D), b * (S + 1) * D);
    return out;
  }

  // ---- 8) attention per head ----

  // The scaling: 1.13.1 divides q by sqrt(D) (functional.py line 5156); 2.x multiplies it
  // by sqrt(1/D), each rounded to the dtype, before the product rather than after.
  function scaleQ(qh, o, round) {
    const out = T.zeros(qh.shape, qh.dtype);
    const divisor = round(Math.sqrt(o.D)), factor = round(Math.sqrt(1 / o.D));
    for (let i = 0; i < qh.data.length; ++i) out.data[i] = round(o.v2 ? qh.data[i] * factor : qh.data[i] / divisor);
    return { q: out, text: o.v2 ? `q * sqrt(1/D) = q * ${T.format(factor, o.dtype)}` :
                                  `q / sqrt(D) = q / ${T.format(divisor, o.dtype)}` };
  }

  // q_scaled k^T: (B, L, D) x (B, D, S) -> (B, L, S), and the same plus the mask.
  function scores(qs, kh, mask, round) {
    const [B, L, D] = qs.shape, S = kh.shape[1];
    const raw = T.zeros([B, L, S], qs.dtype), masked = T.zeros([B, L, S], qs.dtype);
    for (let b = 0; b < B; ++b)
      for (let i = 0; i < L; ++i)
        for (let j = 0; j < S; ++j) {
          let dot = 0;
          for (let d = 0; d < D; ++d) dot += qs.data[(b * L + i) * D + d] * kh.data[(b * S + j) * D + d];
          const at = (b * L + i) * S + j;
          raw.data[at] = round(dot);
          const m = mask ? mask.data[((mask.shape[0] > 1 ? b : 0) * L + i) * S + j] : 0;
          masked.data[at] = round(m + dot);
        }
    return { raw: raw, masked: masked };
  }

  // Softmax over the keys. A row of only -inf gives NaN, as torch.softmax does (the max is
  // -inf and -inf - -inf is NaN); 2.x's SDPA ("safe softmax") gives such a row 0 instead.
  function softmax(x, mask, safe, round) {
    const [B, L, S] = x.shape, out = T.zeros(x.shape, x.dtype), fullyMasked = [];
    for (let r = 0; r < B * L; ++r) {
      const row = x.data.subarray(r * S, (r + 1) * S);
      const b = Math.floor(r / L), i = r % L;
      const maskRow = mask ? mask.data.subarray(((mask.shape[0] > 1 ? b : 0) * L + i) * S, ((mask.shape[0] > 1 ? b : 0) * L + i + 1) * S) : null;
      const noKey = !!maskRow && S > 0 && maskRow.every((m) => m === -Infinity);
      if (noKey) fullyMasked.push([b, i]);
      if (noKey && safe) continue;  // stays 0
      const max = Math.max(...row);  // NaN if the row holds a NaN: the whole row is NaN either way
      let sum = 0;
      const e = row.map((s) => Math.exp(s - max));
      for (const v of e) sum += v;
      for (let j = 0; j < S; ++j) out.data[r * S + j] = round(e[j] / sum);
    }
    return { weights: out, fullyMasked: fullyMasked };
  }

  // Dropout replayed from the mask PyTorch drew (True = kept): kept weights times 1/(1-p).
  function dropout(w, keep, p, round) {
    const out = T.zeros(w.shape, w.dtype), scale = p === 1 ? 0 : round(1 / (1 - p));
    for (let i = 0; i < w.data.length; ++i) out.data[i] = round(w.data[i] * (keep.data[i] ? scale : 0));
    return out;
  }

  // weights v: (B, L, S) x (B, S, D) -> (B, L, D).
  function weightedValues(w, vh, round) {
    const [B, L, S] = w.shape, D = vh.shape[2], out = T.zeros([B, L, D], w.dtype);
    for (let b = 0; b < B; ++b)
      for (let i = 0; i < L; ++i)
        for (let d = 0; d < D; ++d) {
          let sum = 0;
          for (let j = 0; j < S; ++j) sum += w.data[(b * L + i) * S + j] * vh.data[(b * S + j) * D + d];
          out.data[(b * L + i) * D + d] = round(sum);
        }
    return out;
  }

  // ---- 10) the weights as forward returns them ----

  // (N*H, L, S') -> (N, H, L, S') per head, or (N, L, S') averaged over the heads; no N unbatched.
  function outputWeights(w, o, N, round) {
    const [, L, S] = w.shape, H = o.H;
    const perHead = { shape: [N, H, L, S], dtype: w.dtype, data: w.data };
    const averaged = T.zeros([N, L, S], w.dtype);
    for (let n = 0; n < N; ++n)
      for (let r = 0; r < L * S; ++r) {
        let sum = 0;
        for (let h = 0; h < H; ++h) sum += w.data[(n * H + h) * L * S + r];
        averaged.data[n * L * S + r] = round(sum / H);
      }
    const drop = (x) => (o.batched ? x : { shape: x.shape.slice(1), dtype: x.dtype, data: x.data });
    return { perHead: drop(perHead), averaged: drop(averaged), returned: o.average ? drop(averaged) : drop(perHead) };
  }

  // ---- the forward, steps 1 to 10 ----

  function run(record, order, fault) {
    const t = record.tensors, o = optionsOf(record), round = T.rounding(o.dtype), H = o.H;
    const r = { options: o, order: order, notes: [] };
    r.path = pytorchPath(o, t);

    // 1) layouts: (L, N, E), (S, N, kdim), (S, N, vdim)
    const query = seqFirstBatched(t.query, o), key = seqFirstBatched(t.key, o), value = seqFirstBatched(t.value, o);
    const L = query.shape[0], N = query.shape[1];
    // 2) masks, as the generation reads them
    const masks = prepareMasks(o, t, r.path.path);
    r.notes.push(...masks.notes);
    r.masksGiven = { attn: masks.attn, kpm: masks.kpm };
    // 3) in-projection
    r.proj = projections(record, o, order, fault);
    if (!r.proj) return null;  // the separate weights' shapes forbid this order
    r.q = linear(query, r.proj.wq, r.proj.bq, round);  // (L, N, E)
    r.k = linear(key, r.proj.wk, r.proj.bk, round);    // (S, N, E)
    r.v = linear(value, r.proj.wv, r.proj.bv, round);  // (S, N, E)
    let k = r.k, v = r.v;
    // 4) bias_k, bias_v: one more key and value position
    if (o.addBiasKv) {
      k = appendBias(k, t.bias_k), v = appendBias(v, t.bias_v);  // (S+1, N, E)
      masks.attn = padLast(masks.attn), masks.kpm = padLast(masks.kpm);
    }
    // 5) heads; static_k and static_v, already heads, replace k and v
    r.qh = splitHeads(r.q, H);                           // (N*H, L, D)
    r.kh = t.static_k ? t.static_k : splitHeads(k, H);  // (N*H, S', D)
    r.vh = t.static_v ? t.static_v : splitHeads(v, H);  // (N*H, S', D)
    if (t.static_k || t.static_v) r.notes.push("static_k / static_v replace the projected keys / values after the split.");
    // 6) add_zero_attn: one more key and value, all zeros
    if (o.addZeroAttn) {
      r.kh = appendZeroRow(r.kh), r.vh = appendZeroRow(r.vh);  // (N*H, S'+1, D)
      masks.attn = padLast(masks.attn), masks.kpm = padLast(masks.kpm);
    }
    const S = r.kh.shape[1];
    r.sizes = { L: L, S: key.shape[0], Sp: S, N: N, E: o.E, H: H, D: o.D };
    // 7) one additive mask
    r.masks = { attn: masks.attn, kpm: masks.kpm, causalHint: masks.causalHint };
    r.mask = mergedMask(masks, o, N, L, S, round);  // (1 or N*H, L, S')
    // 8) softmax(q / sqrt(D) k^T + mask) v, per batch-head
    const scaled = scaleQ(r.qh, o, round);
    r.scaleText = scaled.text;
    r.scores = scores(scaled.q, r.kh, r.mask, round);  // (N*H, L, S')
    const soft = softmax(r.scores.masked, r.mask, r.path.path === "sdpa", round);
    r.fullyMasked = soft.fullyMasked;
    r.weights = soft.weights;  // (N*H, L, S')
    if (o.training && o.dropout > 0) {
      if (t.dropout_mask) r.weights = dropout(r.weights, t.dropout_mask, o.dropout, round);
      else r.notes.push("PyTorch drew a dropout mask that the case does not hold: the page cannot replay it.");
    }
    r.headOutput = weightedValues(r.weights, r.vh, round);  // (N*H, L, D)
    // 9) heads side by side again, then out_proj
    r.merged = mergeHeads(r.headOutput, H);  // (L, N, E)
    const wOut = t["out_proj.weight"] || t.out_proj_weight, bOut = t["out_proj.bias"] || t.out_proj_bias;
    r.outSeqFirst = linear(r.merged, wOut, bOut || null, round);  // (L, N, E)
    // 10) the caller's layout
    r.attnOutput = callerLayout(r.outSeqFirst, o);
    r.attnWeights = outputWeights(r.weights, o, N, round);
    return r;
  }

  // What PyTorch's own tensors say of a forward: each expected tensor of the case compared.
  function compareWithPyTorch(record, r) {
    const t = record.tensors, tol = r.options.tolerance, results = {};
    const pairs = { q: r.q, k: r.k, v: r.v, attn_output: r.attnOutput };
    if (t.attn_output_weights) pairs.attn_output_weights = r.attnWeights.returned;
    for (const [name, got] of Object.entries(pairs))
      if (t[name]) results[name] = T.compare(got, t[name], tol);
    return results;
  }

  return { ORDERS, optionsOf, pytorchPath, run, compareWithPyTorch, blockStarts };
})();
