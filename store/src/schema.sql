-- profinfer trace store, schema version 1 (PRAGMA user_version = 1).
-- Times are CLOCK_MONOTONIC nanoseconds as bpf_ktime_get_ns reports them.
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
-- Every probe the tracer tried: attached or not, and why not.
CREATE TABLE probes (
  symbol   TEXT NOT NULL,
  library  TEXT,
  kind     TEXT NOT NULL,     -- uprobe, uretprobe, tracepoint
  attached INTEGER NOT NULL,  -- 1 or 0
  reason   TEXT               -- why it is missing, when attached = 0
);
-- Loaded libraries the tracer looked at, with their GNU build ids.
CREATE TABLE libraries (
  path     TEXT PRIMARY KEY,
  role     TEXT NOT NULL,     -- libllama, libggml, libggml-base, libggml-cpu, other
  build_id TEXT
);
-- One row per llama_decode call.
CREATE TABLE tokens (
  id        INTEGER PRIMARY KEY,
  pid       INTEGER NOT NULL,
  tid       INTEGER NOT NULL,
  cpu       INTEGER NOT NULL,
  start_ns  INTEGER NOT NULL,
  end_ns    INTEGER NOT NULL,
  n_tokens  INTEGER NOT NULL,  -- llama_batch.n_tokens; -1 if unreadable
  ret       INTEGER NOT NULL,  -- llama_decode's return value
  phase     TEXT NOT NULL      -- prefill (first call of a sequence, or batch > 1) or decode
);
-- Records the kernel side could not hand over (ring buffer full), per event kind.
CREATE TABLE lost_events (
  kind  TEXT PRIMARY KEY,
  count INTEGER NOT NULL
);
