// ort_peer: ONNX Runtime (onnxruntime-node, CPU) running the LLaMA-shaped 4-bit model of
// ort_model.py — prefill and decode timed with and without ORT's own profiler, the method
// of paper Table 7.
//
//   node ort_peer.js MODEL.onnx [--profile] [--threads T] [--prompt P] [--tokens N] [--past C]
//
// prefill: one run of P new tokens over an empty cache; decode: N runs of one new token over
// a past of C tokens (the cache is an input, so every decode run does the same work).
// --profile: session option enableProfiling; the profile is ended after the timed runs and
// its operator events counted per thread (ORT records operators on the thread that runs the
// graph, not on its intra-op pool's threads).
// stdout: one JSON line {"profile":…,"prefill_tps":…,"decode_tps":…,…}.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function parseArgs(argv) {
  const a = {model: argv[2], profile: false, threads: 2, prompt: 64, tokens: 48, past: 24};
  if (!a.model) {
    console.error('usage: node ort_peer.js MODEL.onnx [--profile] [--threads T] [--prompt P] [--tokens N] [--past C]');
    process.exit(2);
  }
  for (let i = 3; i < argv.length; ++i) {
    const key = argv[i].replace(/^--/, '');
    if (key === 'profile') a.profile = true;
    else if (key in a) a[key] = Number(argv[++i]);
    else { console.error(`ort_peer: unknown option ${argv[i]}`); process.exit(2); }
  }
  return a;
}

function feeds(session, tokens, past) {
  const f = {};
  for (const name of session.inputNames) {
    const meta = session.inputMetadata.find((m) => m.name === name);
    const dims = meta.shape.map((d) => (d === 'S' ? tokens : d === 'P' ? past : d));
    const size = dims.reduce((x, y) => x * y, 1);
    const data = new Float32Array(size);
    for (let i = 0; i < size; i += 7) data[i] = ((i * 2654435761) % 1000) / 1000 - 0.5;
    f[name] = new ort.Tensor('float32', data, dims);
  }
  return f;
}

async function main() {
  const a = parseArgs(process.argv);
  const profilePrefix = `/tmp/ort_peer_${process.pid}`;
  const session = await ort.InferenceSession.create(a.model, {
    executionProviders: ['cpu'], intraOpNumThreads: a.threads, interOpNumThreads: 1,
    graphOptimizationLevel: 'all', enableProfiling: a.profile, profileFilePrefix: profilePrefix,
  });
  const prefillFeeds = feeds(session, a.prompt, 0);
  const decodeFeeds = feeds(session, 1, a.past);
  await session.run(decodeFeeds);  // warm-up, as llama-bench
  let t0 = process.hrtime.bigint();
  await session.run(prefillFeeds);
  const prefillNs = Number(process.hrtime.bigint() - t0);
  t0 = process.hrtime.bigint();
  for (let i = 0; i < a.tokens; ++i) await session.run(decodeFeeds);
  const decodeNs = Number(process.hrtime.bigint() - t0);
  const out = {
    profile: a.profile, threads: a.threads, prompt: a.prompt, tokens: a.tokens,
    prefill_tps: a.prompt / (prefillNs / 1e9), decode_tps: a.tokens / (decodeNs / 1e9),
  };
  if (a.profile) {
    session.endProfiling();
    const dir = require('path').dirname(profilePrefix);
    const base = require('path').basename(profilePrefix);
    const found = fs.readdirSync(dir).filter((f) => f.startsWith(base) && f.endsWith('.json'));
    if (found.length !== 1) throw new Error(`no profile ${profilePrefix}_*.json after endProfiling`);
    const file = `${dir}/${found[0]}`;
    const events = JSON.parse(fs.readFileSync(file, 'utf8'));
    const nodeEvents = events.filter((e) => e.cat === 'Node' && e.name.endsWith('_kernel_time'));
    out.profiled_operator_events = nodeEvents.length;
    out.profiled_threads = new Set(nodeEvents.map((e) => e.tid)).size;
    out.profile_bytes = fs.statSync(file).size;
    fs.unlinkSync(file);
  }
  await session.release();
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(`ort_peer: ${e.message}`); process.exit(1); });
