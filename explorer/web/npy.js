// explorer/web/npy.js: a student's .npy file, read and checked before anything is drawn.
//
// The .npy format as numpy.lib.format writes it: the magic "\x93NUMPY", a version (1.0:
// a 2-byte header length; 2.0 and 3.0: 4 bytes; 3.0 allows UTF-8 in the header), the
// header, a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)} padded
// with spaces and ending in '\n', then the data. The page reads only what an answer may
// be: '<f4' or '<f8', C order. Everything comes from an untrusted file: the header's
// length and the shape's size are checked against the file's own length before any
// array is made, and any departure is an Error with a message for the student.
"use strict";

window.MHA = window.MHA || {};

MHA.npy = (function () {
  const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];  // \x93NUMPY
  const MAX_HEADER = 65536;  // numpy itself refuses headers over 10000 bytes unless told otherwise
  const DESCRS = { "<f4": "f4", "<f8": "f8" };

  function fail(name, message) {
    throw new Error(`${name}: ${message}`);
  }

  // The header's dict literal: exactly the keys descr, fortran_order and shape, in any
  // order (numpy.lib.format reads it with ast.literal_eval), with values of the kinds
  // numpy writes: a quoted string, True or False, a tuple of sizes.
  function parseHeader(text, name) {
    const body = /^\{(.*)\}$/s.exec(text.replace(/[ \n]+$/, ""));
    if (!body) fail(name, "the header is not a dict ({'descr': ..., 'fortran_order': ..., 'shape': (...)})");
    const entry = /\s*'([a-z_]+)'\s*:\s*('[^']*'|True|False|\([^()]*\))\s*(,|$)/y;
    const fields = {};
    while (entry.lastIndex < body[1].length) {
      const at = entry.lastIndex, m = entry.exec(body[1]);
      if (!m) {
        if (/^\s*$/.test(body[1].slice(at))) break;
        fail(name, `the header's dict cannot be read from "${body[1].slice(at, at + 40)}"`);
      }
      if (m[1] in fields) fail(name, `the header names '${m[1]}' twice`);
      fields[m[1]] = m[2];
      if (m[3] === "") break;
    }
    const keys = Object.keys(fields).sort().join(", ");
    if (keys !== "descr, fortran_order, shape") fail(name, `the header has the keys ${keys || "none"}, not descr, fortran_order, shape`);
    if (!/^'.*'$/.test(fields.descr)) fail(name, "the header's descr is not a string");
    if (!/^(True|False)$/.test(fields.fortran_order)) fail(name, "the header's fortran_order is not True or False");
    const inner = fields.shape.slice(1, -1).trim();
    if (!/^\(/.test(fields.shape)) fail(name, "the header's shape is not a tuple");
    const dims = inner === "" ? [] : inner.replace(/,\s*$/, "").split(",").map((d) => d.trim());
    const shape = dims.map((d) => {
      if (!/^\d{1,9}$/.test(d)) fail(name, `the shape (${inner}) is not a tuple of sizes`);
      return Number(d);
    });
    return { descr: fields.descr.slice(1, -1), fortranOrder: fields.fortran_order === "True", shape: shape };
  }

  // bytes (a Uint8Array of the whole file) -> {shape, dtype, data (Float64Array)}.
  function parse(bytes, name) {
    if (bytes.length < 10 || MAGIC.some((b, i) => bytes[i] !== b)) fail(name, "not a .npy file (no \\x93NUMPY magic)");
    const major = bytes[6], minor = bytes[7];
    if (![1, 2, 3].includes(major) || minor !== 0) fail(name, `unknown .npy format version ${major}.${minor}`);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const lengthBytes = major === 1 ? 2 : 4;
    if (bytes.length < 8 + lengthBytes) fail(name, "the file ends inside its header length");
    const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
    const start = 8 + lengthBytes;
    if (headerLength > MAX_HEADER) fail(name, `the header claims ${headerLength} bytes, more than any .npy header has`);
    if (start + headerLength > bytes.length)
      fail(name, `the header claims ${headerLength} bytes, but the file ends after ${bytes.length - start}`);
    const raw = bytes.subarray(start, start + headerLength);
    const text = major === 3 ? new TextDecoder("utf-8", { fatal: true }).decode(raw) : String.fromCharCode(...raw);
    if (!text.endsWith("\n")) fail(name, "the header does not end in a newline");
    const header = parseHeader(text, name);

    if (header.fortranOrder) fail(name, "fortran_order is True: write the array in C order (numpy.save of a C-contiguous array)");
    const dtype = DESCRS[header.descr];
    if (!dtype) fail(name, `dtype '${header.descr}': an answer is '<f4' (float32) or '<f8' (float64)`);
    const itemBytes = MHA.tensor.ITEM_BYTES[dtype];
    const bodyLength = bytes.length - start - headerLength;
    // The shape's size, checked against the bytes that are there before anything is made.
    let count = 1;
    for (const n of header.shape) {
      count *= n;
      if (count * itemBytes > bodyLength) break;
    }
    if (count * itemBytes !== bodyLength) {
      const claimed = header.shape.reduce((a, b) => a * b, 1) * itemBytes;
      fail(name, `the shape ${MHA.tensor.shapeText(header.shape)} needs ${claimed} bytes of data, the file has ${bodyLength}` +
                 (bodyLength < claimed ? " (truncated)" : ""));
    }
    const body = bytes.subarray(start + headerLength);
    return { shape: header.shape, dtype: dtype, data: MHA.tensor.valuesOf(body, dtype, count) };
  }

  return { parse };
})();
