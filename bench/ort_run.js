#!/usr/bin/env node
// bench/ort_run.js: one ONNX model run through ONNX Runtime's CPU engine (onnxruntime-node).
//
//   node bench/ort_run.js MODEL.onnx --input NAME=FILE --shape D0,D1,... [--threads N]
//        [--save DIR] [--samples K] [--min-sample-ms T] [--config KEY=VALUE ...] [--ort-dir DIR]
//   node bench/ort_run.js MODEL.onnx --feed NAME=TYPE:D0,D1,...:FILE ... [--fetch NAME ...] [...]
//
// The model's one float32 input NAME is read from FILE (raw little-endian float32, as
// numpy's tofile writes it) with the given shape. A model with several inputs takes one
// --feed for each: TYPE float32 or int32, the dimensions (none for a scalar: NAME=int32::FILE),
// the raw little-endian file. --fetch NAME (repeated) asks the session for those outputs
// alone; the others are still computed inside ONNX Runtime, in its own memory, but not
// copied out to JavaScript (a decoder graph's present_key and present_value, which the
// binding would otherwise copy on every run). Without --fetch, every output is fetched.
// The session is set for speed on the CPU:
// intraOpNumThreads = N (default 2), interOpNumThreads = 1, sequential execution, graph
// optimisation level "all" (ORT_ENABLE_ALL, the highest: basic, extended and layout
// rewrites, the contrib fusions included), the CPU memory arena and memory patterns on
// (reused buffers from one run to the next), and the thread pool's threads spinning while
// they wait for work rather than sleeping (session.intra_op.allow_spinning = 1 and
// session.inter_op.allow_spinning = 1, ONNX Runtime's defaults, written out so that they
// show). --config KEY=VALUE adds or overrides one of ONNX Runtime's session configuration
// entries (onnxruntime_session_options_config_keys.h), e.g. session.dynamic_block_base=4.
//
// With --save DIR: runs the model once and writes each output to DIR/<output name>.f32
// (raw float32), then prints {"outputs": {name: dims}} as JSON.
// Without it: times session.run the way bench/torch_mha.py times PyTorch: at least
// 0.1 s of warm-up, then K samples (default 7), each a batch of consecutive runs long
// enough to last T ms (default 20; the batch size doubles until it does); prints
// {"median_ms": per-run median over the samples, ..., "session_options": {...}} as JSON. The time includes what
// the Node binding adds to every run (creating the input tensor once, the call through
// N-API and the promise), a few tens of microseconds.
//
// onnxruntime-node is loaded from DIR/node_modules (default build/onnxruntime-node
// under the project root), where bench/ort_mha.py and scripts/setup install it with
// `npm install --ignore-scripts --prefix DIR onnxruntime-node@VERSION`.
'use strict';

const fs = require('node:fs');
const path = require('node:path');

function usage(message) {
  process.stderr.write(`bench/ort_run.js: ${message}\n` +
    'usage: node bench/ort_run.js MODEL.onnx (--input NAME=FILE --shape D0,D1,... | --feed NAME=TYPE:D0,D1,...:FILE ...) ' +
    '[--fetch NAME ...] [--threads N] [--save DIR] [--samples K] [--min-sample-ms T] [--config KEY=VALUE ...] ' +
    '[--ort-dir DIR]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const args = { threads: 2, samples: 7, minSampleMs: 20, config: {}, feeds: [], fetches: [],
                 ortDir: path.join(__dirname, '..', 'build', 'onnxruntime-node') };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${flag} needs a value`);
      return argv[++i];
    };
    if (flag === '--input') {
      const [name, file] = value().split(/=(.*)/s);
      if (!file) usage('--input takes NAME=FILE');
      args.inputName = name, args.inputFile = file;
    } else if (flag === '--feed') {
      const m = /^([^=]+)=(float32|int32):([0-9,]*):(.+)$/s.exec(value());
      if (!m) usage('--feed takes NAME=TYPE:D0,D1,...:FILE, TYPE float32 or int32');
      args.feeds.push({ name: m[1], type: m[2], shape: m[3] === '' ? [] : m[3].split(',').map(Number), file: m[4] });
    } else if (flag === '--fetch') args.fetches.push(value());
    else if (flag === '--shape') args.shape = value().split(',').map(Number);
    else if (flag === '--threads') args.threads = Number(value());
    else if (flag === '--save') args.save = value();
    else if (flag === '--samples') args.samples = Number(value());
    else if (flag === '--min-sample-ms') args.minSampleMs = Number(value());
    else if (flag === '--ort-dir') args.ortDir = value();
    else if (flag === '--config') {
      const [key, setting] = value().split(/=(.*)/s);
      if (!key || setting === undefined) usage('--config takes KEY=VALUE');
      args.config[key] = setting;
    }
    else if (flag.startsWith('--')) usage(`unknown option ${flag}`);
    else if (args.model === undefined) args.model = flag;
    else usage(`unexpected argument ${flag}`);
  }
  if (args.inputName !== undefined || args.shape !== undefined) {
    if (!args.inputName || !args.shape) usage('--input and --shape go together');
    args.feeds.push({ name: args.inputName, type: 'float32', shape: args.shape, file: args.inputFile });
  }
  if (!args.model || args.feeds.length === 0) usage('MODEL and --input/--shape or --feed are required');
  for (const f of args.feeds) {
    if (f.shape.some((d) => !Number.isInteger(d) || d <= 0)) usage(`bad shape [${f.shape}] of ${f.name}`);
  }
  if (!(args.threads >= 1 && args.samples >= 1 && args.minSampleMs > 0)) usage('bad --threads, --samples or --min-sample-ms');
  return args;
}

function readTensorData(file, type, shape) {
  const bytes = fs.readFileSync(file);
  const count = shape.reduce((a, b) => a * b, 1);
  if (bytes.length !== 4 * count) {
    throw new Error(`${file}: ${bytes.length} bytes, expected ${4 * count} for shape [${shape}] in ${type}`);
  }
  // A copy into a buffer of its own, so that the typed array is 4-byte aligned.
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
  return type === 'int32' ? new Int32Array(buffer) : new Float32Array(buffer);
}

const now = () => Number(process.hrtime.bigint()) / 1e6;  // milliseconds

// session.run with the feeds, asking for `fetches` alone (every output when undefined).
async function timeRuns(session, feeds, fetches, samples, minSampleMs) {
  const warmupStart = now();  // warm-up, at least 0.1 s: allocations, thread pool, caches
  do await session.run(feeds, fetches); while (now() - warmupStart < 100);
  let inner = 1, elapsed;
  for (;;) {
    const start = now();
    for (let i = 0; i < inner; ++i) await session.run(feeds, fetches);
    elapsed = now() - start;
    if (elapsed >= minSampleMs) break;
    inner *= 2;
  }
  const times = [elapsed / inner];
  for (let s = 1; s < samples; ++s) {
    const start = now();
    for (let i = 0; i < inner; ++i) await session.run(feeds, fetches);
    times.push((now() - start) / inner);
  }
  times.sort((a, b) => a - b);
  const mid = times.length >> 1;
  const median = times.length % 2 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
  return { median, times, inner };
}

// The session options: the fastest ONNX Runtime offers on the CPU for one run at a time.
// onnxruntime-node takes the configuration entries as `extra`, nested by the dots of
// their keys ("session.intra_op.allow_spinning" is extra.session.intra_op.allow_spinning).
// Returns { options, config }: config is what `extra` holds, flat, for the timing answer.
function sessionOptions(args) {
  const config = { 'session.intra_op.allow_spinning': '1', 'session.inter_op.allow_spinning': '1', ...args.config };
  const extra = {};
  for (const [key, setting] of Object.entries(config)) {
    const parts = key.split('.');
    let level = extra;
    for (const part of parts.slice(0, -1)) level = level[part] ??= {};
    level[parts[parts.length - 1]] = setting;
  }
  const options = {
    intraOpNumThreads: args.threads, interOpNumThreads: 1,
    executionMode: 'sequential', graphOptimizationLevel: 'all',
    enableCpuMemArena: true, enableMemPattern: true,
    extra,
    // Errors only: ONNX Runtime 1.30 infers the last dimension of the opset-23 Attention's
    // qk_matmul_output as 0 for 3-D inputs, and would warn about it on every run.
    logSeverityLevel: 3,
  };
  return { options, config };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const ortPath = path.join(args.ortDir, 'node_modules', 'onnxruntime-node');
  let ort;
  try {
    ort = require(ortPath);
  } catch (error) {
    process.stderr.write(`bench/ort_run.js: cannot load onnxruntime-node from ${ortPath}: ${error.message}\n`);
    process.exit(3);
  }
  const { options, config } = sessionOptions(args);
  const session = await ort.InferenceSession.create(args.model, options);
  const feeds = {};
  for (const f of args.feeds) {
    if (!session.inputNames.includes(f.name)) {
      throw new Error(`the model's inputs are ${session.inputNames.join(', ')}, not ${f.name}`);
    }
    feeds[f.name] = new ort.Tensor(f.type, readTensorData(f.file, f.type, f.shape), f.shape);
  }
  for (const name of args.fetches) {
    if (!session.outputNames.includes(name)) {
      throw new Error(`the model's outputs are ${session.outputNames.join(', ')}, not ${name}`);
    }
  }
  const fetches = args.fetches.length ? args.fetches : undefined;

  if (args.save) {
    const results = await session.run(feeds, fetches);
    const outputs = {};
    for (const name of fetches ?? session.outputNames) {
      const t = results[name];
      if (t.type !== 'float32') throw new Error(`output ${name} is ${t.type}, expected float32`);
      fs.writeFileSync(path.join(args.save, `${name}.f32`), Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
      outputs[name] = t.dims;
    }
    process.stdout.write(JSON.stringify({ outputs, ort_version: ort.env.versions.node }) + '\n');
    return;
  }
  const { median, times, inner } = await timeRuns(session, feeds, fetches, args.samples, args.minSampleMs);
  const { intraOpNumThreads, interOpNumThreads, executionMode, graphOptimizationLevel, enableCpuMemArena,
          enableMemPattern } = options;
  process.stdout.write(JSON.stringify({ median_ms: median, sample_ms: times, runs_per_sample: inner,
                                        threads: args.threads, ort_version: ort.env.versions.node,
                                        fetched: fetches ?? session.outputNames,
                                        session_options: { intraOpNumThreads, interOpNumThreads, executionMode,
                                                           graphOptimizationLevel, enableCpuMemArena,
                                                           enableMemPattern, config } }) + '\n');
}

main().catch((error) => {
  process.stderr.write(`bench/ort_run.js: ${error.stack || error}\n`);
  process.exit(1);
});
