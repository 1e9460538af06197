// explorer/web/tensor.js: tensors for the page, read, indexed, printed and compared.
//
// A tensor here is {shape, dtype, data}: data a Float64Array in C order whatever the
// dtype (a bool is 0 or 1), dtype the one PyTorch wrote ("f4" float32, "f8" float64,
// "b1" bool, "u1" uint8, "i4", "i8"). decode() reads a tensor as explorer/build_site.py
// wrote it: base64 of its little-endian bytes, so every value is PyTorch's, bit for bit.
// compare() is golden/FORMAT.md's rule: |got - expected| <= atol + rtol * |expected|,
// element by element, NaN equal to NaN, and the shapes equal.
"use strict";

window.MHA = window.MHA || {};

MHA.tensor = (function () {
  const ITEM_BYTES = { f4: 4, f8: 8, b1: 1, u1: 1, i4: 4, i8: 8 };

  function product(shape) {
    return shape.reduce((a, b) => a * b, 1);
  }

  function zeros(shape, dtype) {
    return { shape: shape.slice(), dtype: dtype, data: new Float64Array(product(shape)) };
  }

  // Reads n values of `dtype` from little-endian bytes.
  function valuesOf(bytes, dtype, n) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const out = new Float64Array(n);
    const size = ITEM_BYTES[dtype];
    for (let i = 0; i < n; ++i) {
      const at = i * size;
      if (dtype === "f4") out[i] = view.getFloat32(at, true);
      else if (dtype === "f8") out[i] = view.getFloat64(at, true);
      else if (dtype === "b1" || dtype === "u1") out[i] = view.getUint8(at);
      else if (dtype === "i4") out[i] = view.getInt32(at, true);
      else out[i] = Number(view.getBigInt64(at, true));
    }
    return out;
  }

  function bytesOfBase64(text) {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; ++i) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  // {dtype, shape, data: base64} as the site's data files hold it -> a tensor.
  function decode(encoded) {
    const bytes = bytesOfBase64(encoded.data);
    const n = product(encoded.shape);
    if (!(encoded.dtype in ITEM_BYTES) || bytes.length !== n * ITEM_BYTES[encoded.dtype])
      throw new Error(`a tensor of shape (${encoded.shape}) and dtype ${encoded.dtype} has ${bytes.length} bytes`);
    return { shape: encoded.shape.slice(), dtype: encoded.dtype, data: valuesOf(bytes, encoded.dtype, n) };
  }

  function strides(shape) {
    const s = new Array(shape.length).fill(1);
    for (let d = shape.length - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
    return s;
  }

  // Flat C-order index -> [i0, i1, ...].
  function unravel(flat, shape) {
    return strides(shape).map((stride, d) => Math.floor(flat / stride) % shape[d]);
  }

  function offset(t, index) {
    const s = strides(t.shape);
    return index.reduce((acc, i, d) => acc + i * s[d], 0);
  }

  function get(t, ...index) {
    return t.data[offset(t, index)];
  }

  function set(t, value, ...index) {
    t.data[offset(t, index)] = value;
  }

  // The rounding of the dtype: the page computes in float64 and rounds each step's
  // result to the case's dtype, so that a float32 overflow gives inf where PyTorch's does.
  function rounding(dtype) {
    return dtype === "f4" ? Math.fround : (x) => x;
  }

  // The shortest text that reads back as the same value of the dtype: 9 significant
  // digits at most for float32, 17 for float64. What the page shows is exact.
  function format(x, dtype) {
    if (Number.isNaN(x)) return "NaN";
    if (x === Infinity) return "inf";
    if (x === -Infinity) return "-inf";
    if (dtype === "b1") return x ? "True" : "False";
    if (dtype !== "f4") return String(x);
    for (let digits = 1; digits <= 9; ++digits) {
      const text = x.toPrecision(digits);
      if (Math.fround(Number(text)) === x) return String(Number(text));
    }
    return String(x);
  }

  function shapeText(shape) {
    return `(${shape.join(", ")}${shape.length === 1 ? "," : ""})`;
  }

  function allowed(expected, tolerance) {
    return tolerance.atol + tolerance.rtol * Math.abs(expected);
  }

  // One element by golden/FORMAT.md's rule. Infinities pass when they are equal.
  function close(got, expected, tolerance) {
    if (Number.isNaN(expected) || Number.isNaN(got)) return Number.isNaN(expected) && Number.isNaN(got);
    if (got === expected) return true;
    return Math.abs(got - expected) <= allowed(expected, tolerance);
  }

  function sameShape(a, b) {
    return a.length === b.length && a.every((n, d) => n === b[d]);
  }

  // {ok, shapeOk, first (flat index of the first departure, or -1), bad (how many
  // depart), maxError (the largest finite |got - expected|)}.
  function compare(got, expected, tolerance) {
    if (!sameShape(got.shape, expected.shape))
      return { ok: false, shapeOk: false, first: -1, bad: 0, maxError: NaN };
    let first = -1, bad = 0, maxError = 0;
    for (let i = 0; i < expected.data.length; ++i) {
      const g = got.data[i], e = expected.data[i];
      if (!close(g, e, tolerance)) {
        if (first < 0) first = i;
        ++bad;
      }
      const error = Math.abs(g - e);
      if (Number.isFinite(error)) maxError = Math.max(maxError, error);
    }
    return { ok: bad === 0, shapeOk: true, first: first, bad: bad, maxError: maxError };
  }

  return { ITEM_BYTES, product, zeros, decode, valuesOf, strides, unravel, get, set, rounding, format, shapeText,
           allowed, close, sameShape, compare };
})();
