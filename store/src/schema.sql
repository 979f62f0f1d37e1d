-- profinfer trace store, schema version 10 (PRAGMA user_version = 10). Raw facts as captured;
-- what they mean (phase, layer, node time, ...) is derived in derived.sql.
-- Times are CLOCK_MONOTONIC nanoseconds as bpf_ktime_get_ns reports them.
-- Addresses (tensor, cgraph, backend) are the target's virtual addresses, as integers.
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
-- Every probe the tracer tried: attached or not, and why not.
CREATE TABLE probes (
  symbol   TEXT NOT NULL,
  library  TEXT,
  kind     TEXT NOT NULL,     -- uprobe, uretprobe, tp_btf
  attached INTEGER NOT NULL,  -- 1 or 0
  reason   TEXT               -- why it is missing, when attached = 0
);
-- Loaded libraries the tracer looked at, with their GNU build ids.
CREATE TABLE libraries (
  path     TEXT PRIMARY KEY,
  role     TEXT NOT NULL,     -- libllama, libggml, libggml-base, libggml-cpu
  build_id TEXT,
  debug_info INTEGER NOT NULL DEFAULT 0
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
  ret       INTEGER NOT NULL   -- llama_decode's return value
);
-- The sequences a llama_decode call's batch served (schema 8): one row per run of a
-- sequence's tokens at consecutive positions, in batch order; seq: the token's first
-- sequence id (a token shared by several sequences counts for the first); outputs: the
-- run's tokens whose output (logits) the caller asked for. Only for batches that carry
-- sequence ids and positions (a server's; llama_batch_get_one's carry none).
CREATE TABLE batch_seqs (
  token_id  INTEGER NOT NULL REFERENCES tokens(id),
  seq       INTEGER NOT NULL,
  pos       INTEGER NOT NULL,   -- the run's first position
  n_tokens  INTEGER NOT NULL,
  outputs   INTEGER NOT NULL
);
-- One row per graph a backend computed. api: backend (ggml_backend_graph_compute_async,
-- any backend) or cpu (ggml_graph_compute, the CPU backend's graph; operators refer to it).
CREATE TABLE graphs (
  seq          INTEGER PRIMARY KEY,
  pid          INTEGER NOT NULL,
  tid          INTEGER NOT NULL,
  start_ns     INTEGER NOT NULL,
  end_ns       INTEGER NOT NULL,
  api          TEXT NOT NULL,
  cgraph       INTEGER NOT NULL,
  backend      INTEGER,
  backend_guid TEXT,            -- hex, for api = backend
  backend_name TEXT,            -- CPU, BLAS, ... when the guid is known
  n_nodes      INTEGER NOT NULL
);
-- One row per graph node and thread: the thread's part of the node.
CREATE TABLE ops (
  id             INTEGER PRIMARY KEY,
  graph_seq      INTEGER NOT NULL,
  tid            INTEGER NOT NULL,
  ith            INTEGER NOT NULL,  -- ggml_compute_params.ith
  nth            INTEGER NOT NULL,
  start_cpu      INTEGER NOT NULL,
  end_cpu        INTEGER NOT NULL,
  start_ns       INTEGER NOT NULL,  -- the thread begins the node
  compute_end_ns INTEGER NOT NULL,  -- it enters the barrier that ends the node
  end_ns         INTEGER NOT NULL,  -- it begins the next node (or the graph returns)
  tensor         INTEGER NOT NULL,
  fused_tensor   INTEGER,           -- second node of a fused kernel (RMS_NORM+MUL)
  barriers       INTEGER NOT NULL,  -- ggml_barrier calls in the node, the ending one included
  -- counter deltas (see counters) while this thread ran the node, on whichever CPUs; NULL if unknown
  c0 INTEGER, c1 INTEGER, c2 INTEGER, c3 INTEGER, c4 INTEGER, c5 INTEGER
);
-- ops_graph (graph_seq, tensor): store/src/indexes.sql, built when the recording ends.
-- --wait sampled (--level full): the CPU-clock samples that found a thread in its part of
-- a node, and how many of them were in barrier code; a row only where there were samples.
CREATE TABLE op_samples (
  op_id        INTEGER PRIMARY KEY REFERENCES ops(id),
  samples      INTEGER NOT NULL,
  wait_samples INTEGER NOT NULL,
  -- --wait both: of the samples, those after the thread's first ggml_barrier probe in the
  -- node (with one barrier, the exact probes' wait): the IP classification's check
  barrier_state_samples INTEGER NOT NULL
);
-- A node's details as thread 0 read them (schema 7): one row each time the tensor at a
-- position of the graph is new or changed, not one per graph — llama.cpp reuses its graph
-- from token to token. graph_seq: the graph it was read in.
CREATE TABLE node_defs (
  id        INTEGER PRIMARY KEY,
  graph_seq INTEGER NOT NULL,
  ts_ns     INTEGER NOT NULL,
  tensor    INTEGER NOT NULL,
  op        TEXT NOT NULL,      -- ggml op name; UNARY and GLU nodes get their sub-op (TANH, SWIGLU)
  op_code   INTEGER NOT NULL,
  name      TEXT NOT NULL,      -- tensor name, e.g. ffn_out-0
  view_src  INTEGER,            -- when the node writes into a view (SET_ROWS into the KV cache): its base
  type      INTEGER NOT NULL,   -- ggml_type
  ne0 INTEGER, ne1 INTEGER, ne2 INTEGER, ne3 INTEGER,
  flags     INTEGER NOT NULL
);
-- The sources of each node_defs row: slot 0.. in src[] order; for the first three also
-- the type, shape and, for views (which no kernel computes), the base tensor they look into.
CREATE TABLE node_def_srcs (
  def_id  INTEGER NOT NULL REFERENCES node_defs(id),
  slot    INTEGER NOT NULL,
  tensor  INTEGER NOT NULL,
  view_src INTEGER,
  type    INTEGER,
  op_code INTEGER,
  ne0 INTEGER, ne1 INTEGER, ne2 INTEGER, ne3 INTEGER,
  PRIMARY KEY (def_id, slot)
);
-- The nodes each graph ran (schema 7): a narrow row per node and graph, in the order the
-- graph's records first named them, pointing at the details in force (node_defs). Readers
-- see nodes and node_srcs with the schema-6 columns (derived_nodes.sql).
CREATE TABLE graph_nodes (
  id        INTEGER PRIMARY KEY,
  graph_seq INTEGER NOT NULL,
  tensor    INTEGER NOT NULL,
  def_id    INTEGER NOT NULL REFERENCES node_defs(id)
);
-- graph_nodes_graph (graph_seq, tensor): store/src/indexes.sql, built when the recording ends.
-- Expert ids used by MUL_MAT_ID nodes: one row per token of the batch and slot (0..k-1).
CREATE TABLE experts (
  graph_seq INTEGER NOT NULL,
  tensor    INTEGER NOT NULL,
  name      TEXT,               -- the MUL_MAT_ID node, e.g. ffn_moe_up-3
  token     INTEGER NOT NULL,   -- row of the batch
  slot      INTEGER NOT NULL,
  expert    INTEGER NOT NULL
);
-- Counters read per operator: index i fills column c<i> of ops.
CREATE TABLE counters (
  idx       INTEGER PRIMARY KEY,
  name      TEXT NOT NULL,
  perf_type INTEGER,
  config    INTEGER,
  available INTEGER NOT NULL,
  reason    TEXT
);
CREATE TABLE sched_switch (
  ts_ns      INTEGER NOT NULL,
  cpu        INTEGER NOT NULL,
  prev_tid   INTEGER NOT NULL,
  prev_tgid  INTEGER NOT NULL,
  prev_comm  TEXT NOT NULL,
  prev_state INTEGER NOT NULL,  -- 0 = runnable (preempted), else the sleep state bits
  next_tid   INTEGER NOT NULL,
  next_tgid  INTEGER NOT NULL,
  next_comm  TEXT NOT NULL,
  preempt    INTEGER NOT NULL
);
-- --level op-sampled (schema 9): CPU-clock samples of the target's threads taken while one of
-- its CPU graphs ran, and the functions of the code they can fall in.
CREATE TABLE cpu_samples (
  ts_ns     INTEGER NOT NULL,
  tid       INTEGER NOT NULL,
  cpu       INTEGER NOT NULL,
  graph_seq INTEGER NOT NULL,  -- graphs.seq of the CPU graph under way
  ip        INTEGER NOT NULL,  -- the interrupted instruction (negative: in the kernel)
  -- (schema 10) ip outside the code code_ranges names (libm, libc): the return address into
  -- it found on the top of the thread's stack, the function that called out; else NULL
  caller_ip INTEGER
);
-- The functions of the llama.cpp libraries as the target mapped them ([lo, hi) addresses,
-- from each library's symbol tables): what a sample's ip is resolved against.
CREATE TABLE code_ranges (
  lo       INTEGER PRIMARY KEY,
  hi       INTEGER NOT NULL,
  library  TEXT NOT NULL,
  function TEXT NOT NULL
);
CREATE TABLE sched_wakeup (
  ts_ns      INTEGER NOT NULL,
  cpu        INTEGER NOT NULL,  -- where the wakeup ran
  tid        INTEGER NOT NULL,  -- the woken target thread
  target_cpu INTEGER NOT NULL,
  waker_tid  INTEGER NOT NULL,
  waker_tgid INTEGER NOT NULL,
  waker_comm TEXT NOT NULL
);
-- The llama_decode calls (tokens.id) whose operators were not recorded because an operator
-- gate (--budget, --qos-min-tps) had switched the operator probes off, or switched them
-- during the call: the analysis leaves these calls out of every operator figure.
CREATE TABLE ops_untraced (
  token_id INTEGER PRIMARY KEY
);
-- The host side of a GPU-API backend (ggml-vulkan), in the thread computing its graph:
-- dispatch (a node recorded into a command buffer, --level op; tensor: the node, whose
-- details are in node_defs), submit (command buffers to the queue),
-- fence_wait (the host waiting for the device), synchronize (the backend's synchronize).
-- graph_seq: the backend graph it happened in (graphs.seq; 0 outside one). Schema 6.
CREATE TABLE gpu_events (
  id        INTEGER PRIMARY KEY,
  graph_seq INTEGER NOT NULL,
  tid       INTEGER NOT NULL,
  kind      TEXT NOT NULL,
  tensor    INTEGER,
  start_ns  INTEGER NOT NULL,
  end_ns    INTEGER NOT NULL,
  ret       INTEGER            -- dispatch: ggml_vk_build_graph's result (1: it ended a command buffer)
);
-- What the operator gate (--qos-min-tps, --budget) did: detach or attach the operator probes.
CREATE TABLE qos_events (
  ts_ns  INTEGER NOT NULL,  -- the switch took effect (the probes all in, or all out)
  start_ns INTEGER,         -- the recorder began it (NULL in traces before this column)
  action TEXT NOT NULL,
  tokens_per_s REAL
);
-- Records the kernel side could not hand over (ring buffer full), per event kind.
CREATE TABLE lost_events (
  kind  TEXT PRIMARY KEY,
  count INTEGER NOT NULL
);
