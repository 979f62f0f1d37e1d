-- profinfer trace store: every derived quantity, defined once. Created as TEMP views
-- (and two small TEMP tables) on each reading connection; every analysis view, the run
-- summary and the tests read through them. The tables hold raw facts as captured
-- (n_tokens, tensor names, per-thread times); what they mean is decided here.
-- docs/trace-store.md documents each view.

-- calls and call_graphs are small (a row per call or graph) and every other view joins
-- them, so they are TEMP tables with indexes, filled when the connection opens: a reader
-- sees the calls recorded by then.

-- One row per llama_decode call, numbered from 0 in time order. phase: prefill when the
-- batch held more than one token, decode for one, unknown when it could not be read.
-- ops_traced: 0 when an operator gate (--budget, --qos-min-tps) left the call's operators
-- out (table ops_untraced); such calls are in no operator view below.
CREATE TEMP TABLE calls AS
SELECT row_number() OVER (ORDER BY start_ns, id) - 1 AS call, id AS token_id, pid, tid, cpu, start_ns, end_ns,
       end_ns - start_ns AS dur_ns, n_tokens, ret,
       CASE WHEN n_tokens > 1 THEN 'prefill' WHEN n_tokens = 1 THEN 'decode' ELSE 'unknown' END AS phase,
       id NOT IN (SELECT token_id FROM ops_untraced) AS ops_traced
FROM tokens;
CREATE UNIQUE INDEX temp.calls_call ON calls(call);
CREATE INDEX temp.calls_start ON calls(start_ns);

-- The graphs computed inside a recorded call (both APIs), with their call: the last call
-- to start before the graph, if the graph also ends within it. A graph that began
-- before the probes went in, or belongs to a call that did, is in no call and so in no
-- view below: work in flight at attach time is not recorded.
CREATE TEMP TABLE call_graphs AS
SELECT g.seq AS graph_seq, c.call, c.phase, g.api, g.tid, g.start_ns, g.end_ns, g.cgraph, g.n_nodes,
       coalesce(g.backend_name, g.backend_guid) AS backend, c.ops_traced
FROM graphs g JOIN calls c ON c.call = (SELECT call FROM calls WHERE start_ns <= g.start_ns ORDER BY start_ns DESC LIMIT 1)
WHERE g.end_ns <= c.end_ns;
CREATE UNIQUE INDEX temp.call_graphs_seq ON call_graphs(graph_seq);
CREATE INDEX temp.call_graphs_call ON call_graphs(call);

-- Node names: the base (the name without the layer suffix: ffn_out-3 → ffn_out; "node"
-- for the nodes llama.cpp left unnamed, which ggml calls node_<index>) and the layer (3;
-- NULL when the name has no "-N" suffix). matmul: a MatMul node (MUL_MAT, or MUL_MAT_ID:
-- the experts' MatMuls of an MoE layer). attention: the node computes attention scores or
-- their product with V — the KQ and KQV MatMuls (flash attention off) or FLASH_ATTN_EXT
-- (on). A weight MatMul is a matmul that is not attention.
-- Parsed once per node definition (node_labels, node_keys: derived_nodes.sql) into a TEMP
-- table, not per node row: on a 10-minute full-level trace of the 1B (5.67 M nodes, 310
-- definitions) the parse per row was 15 of the 21 s of reading node_times whole.
CREATE TEMP TABLE label_parts (key INTEGER PRIMARY KEY, op TEXT, name TEXT, type INTEGER, ne0 INTEGER, ne1 INTEGER,
                               ne2 INTEGER, ne3 INTEGER, base TEXT, layer INTEGER, matmul INTEGER, attention INTEGER);
INSERT INTO label_parts
SELECT key, op, name, type, ne0, ne1, ne2, ne3,
       CASE WHEN name GLOB 'node_[0-9]*' AND stem = 'node_' THEN 'node'
            WHEN suffixed THEN substr(name, 1, length(stem) - 1) ELSE name END AS base,
       CASE WHEN suffixed THEN CAST(substr(name, length(stem) + 1) AS INTEGER) END AS layer,
       op IN ('MUL_MAT', 'MUL_MAT_ID') AS matmul,
       (op = 'FLASH_ATTN_EXT' OR (op IN ('MUL_MAT', 'MUL_MAT_ID') AND
        (CASE WHEN suffixed THEN substr(name, 1, length(stem) - 1) ELSE name END) IN ('kq', 'kqv'))) AS attention
FROM (SELECT l.*, rtrim(l.name, '0123456789') AS stem,
             rtrim(l.name, '0123456789') != l.name AND rtrim(l.name, '0123456789') GLOB '?*-' AS suffixed
      FROM node_labels l);

CREATE TEMP VIEW node_names AS
SELECT k.id, k.graph_seq, k.tensor, p.op, p.name, p.type, p.ne0, p.ne1, p.ne2, p.ne3, p.base, p.layer, p.matmul, p.attention
FROM node_keys k JOIN label_parts p ON p.key = k.key;

-- One row per thread's part of a node of a recorded call. compute: from its start to the
-- barrier that ends the node (where barriers are not traced — --level op, --wait sampled —
-- to its start of the next node: compute_end_ns = end_ns); wait: from there to its next
-- node. samples, wait_samples: --wait sampled's CPU-clock samples in this part, and those
-- in barrier code (0 where not sampled).
CREATE TEMP VIEW thread_parts AS
SELECT o.id, o.graph_seq, cg.call, cg.phase, o.tensor, o.fused_tensor, n.op, n.name, n.base, n.layer, n.matmul, n.attention,
       o.tid, o.ith, o.nth, o.start_cpu, o.end_cpu, o.start_ns, o.compute_end_ns, o.end_ns,
       o.compute_end_ns - o.start_ns AS compute_ns, o.end_ns - o.compute_end_ns AS wait_ns, o.barriers,
       coalesce(s.samples, 0) AS samples, coalesce(s.wait_samples, 0) AS wait_samples,
       coalesce(s.barrier_state_samples, 0) AS barrier_state_samples,
       o.c0, o.c1, o.c2, o.c3, o.c4, o.c5  -- every counter column (store.h: kCounterSlots)
FROM ops o JOIN call_graphs cg ON cg.graph_seq = o.graph_seq AND cg.ops_traced
     JOIN node_names n ON n.graph_seq = o.graph_seq AND n.tensor = o.tensor
     LEFT JOIN op_samples s ON s.op_id = o.id;

-- thread_parts with, where barriers are traced, the part's wait for the other threads: from
-- its arrival at the node's barrier (compute_end_ns) to the last thread's arrival. The rest of
-- its wait is the barrier's exit and the barrier probes' own traps (a thread alone, with
-- nobody to wait for, still reads them: paper Fig. 6's 1-thread control). 0 without barriers.
-- (The last arrival per node from node_spans, joined, not a window over thread_parts: on
-- a 1024-token full-level trace of the 1B, 1.13 M parts, 2.3 s instead of 7.1.)
CREATE TEMP VIEW thread_waits AS
SELECT p.*, CASE WHEN p.barriers > 0 THEN l.last_compute_end - p.compute_end_ns ELSE 0 END AS others_wait_ns
FROM thread_parts p JOIN node_spans l ON l.graph_seq = p.graph_seq AND l.tensor = p.tensor;

-- One row per node a kernel computed (a fused kernel counts once, under its first node).
-- The node's time runs from the first thread starting it to the last thread reaching the
-- barrier that ends it, cut at the first thread starting the next node (and at the
-- graph's return). Where barriers are traced (--level full) the cut never bites; at
-- --level op a thread's compute end is its next node's start, so the cut makes the
-- nodes of a graph tile it: per call, operator times never add up to more than the call.
-- Read from node_spans (node_spans.sql): a finished recording's table, an index lookup per
-- graph; on a trace without it, one pass over ops — a query for a few graphs should then
-- name them as graph_seq = N or graph_seq IN (literal list), which SQLite pushes into the
-- window.
CREATE TEMP VIEW node_times AS
SELECT w.graph_seq, cg.call, cg.phase, w.tensor, n.op, n.name, n.base, n.layer, n.matmul, n.attention, w.nth, w.parts,
       max(w.first_start, cg.start_ns) AS start_ns,
       max(max(w.first_start, cg.start_ns), min(w.last_compute_end, coalesce(w.next_start, cg.end_ns), cg.end_ns)) AS end_ns,
       max(max(w.first_start, cg.start_ns), min(w.last_compute_end, coalesce(w.next_start, cg.end_ns), cg.end_ns))
         - max(w.first_start, cg.start_ns) AS dur_ns
FROM node_spans w JOIN call_graphs cg ON cg.graph_seq = w.graph_seq AND cg.ops_traced
     JOIN node_names n ON n.graph_seq = w.graph_seq AND n.tensor = w.tensor;

-- The nodes of recorded calls (fused partners included): what `operators` counts.
CREATE TEMP VIEW call_nodes AS
SELECT n.*, cg.call, cg.phase FROM node_names n JOIN call_graphs cg ON cg.graph_seq = n.graph_seq;

-- Expert ids of recorded calls, with the MUL_MAT_ID node's base name and layer.
CREATE TEMP VIEW expert_uses AS
SELECT e.graph_seq, cg.call, e.tensor, e.name, n.base, n.layer, e.token, e.slot, e.expert
FROM experts e JOIN call_graphs cg ON cg.graph_seq = e.graph_seq
     LEFT JOIN node_names n ON n.graph_seq = e.graph_seq AND n.tensor = e.tensor;

-- block_times — operator time (node_times) with each node's logical block (block_layer,
-- block: attention, ffn, moe or rest) — is made by Database::keep_block_times
-- (store/src/node_blocks.cpp), per call in C++: as windows here it sorted every node of the
-- trace once per window.

-- The requests a server's calls served (batch_seqs; none for batches without sequence ids).
-- A request is a sequence's tokens from a run whose first position does not continue the
-- sequence (its first run, or a position at or before the sequence's last one: the slot's
-- cache was cut back for a new prompt) up to the sequence's next such run. A prompt that
-- continues the previous answer of its sequence exactly (position = last + 1) is not told
-- apart from it. One row per request and call: tokens (the request's in the call's batch),
-- outputs (those whose output was asked for: one sampled token each), prompt (1 up to and
-- including the run holding the request's first output: its prompt; then 0), and op_ns —
-- the call's operator time (node_times) apportioned by token count (tokens / the batch's
-- n_tokens: every token of a batch goes through the same nodes; attention's per-token cost
-- grows with the sequence's context, which this share does not follow).
CREATE TEMP VIEW request_calls AS
WITH r AS (SELECT c.call, c.start_ns, c.end_ns, c.n_tokens AS call_tokens, b.rowid AS rid, b.seq, b.pos,
                  b.n_tokens, b.outputs,
                  lag(b.pos + b.n_tokens - 1) OVER (PARTITION BY b.seq ORDER BY c.call, b.rowid) AS prev_last
           FROM batch_seqs b JOIN calls c ON c.token_id = b.token_id),
     n AS (SELECT r.*, sum(prev_last IS NULL OR pos <= prev_last) OVER (PARTITION BY seq ORDER BY call, rid) AS nth FROM r),
     q AS (SELECT n.*, min(call) OVER (PARTITION BY seq, nth) AS first_call,
                  coalesce(sum(outputs) OVER (PARTITION BY seq, nth ORDER BY call, rid
                                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS outputs_before
           FROM n),
     k AS (SELECT q.*, dense_rank() OVER (ORDER BY first_call, seq, nth) - 1 AS request FROM q),
     t AS (SELECT call, sum(dur_ns) AS op_ns FROM node_times GROUP BY call)
SELECT k.request, k.seq, k.call, k.start_ns, k.end_ns, k.call_tokens, sum(k.n_tokens) AS tokens, sum(k.outputs) AS outputs,
       max(k.outputs_before = 0) AS prompt, min(k.pos) AS first_pos, max(k.prev_last IS NULL) AS opens_seq,
       coalesce(t.op_ns, 0) * sum(k.n_tokens) / max(1, k.call_tokens) AS op_ns
FROM k LEFT JOIN t ON t.call = k.call
GROUP BY k.request, k.seq, k.call;

-- One row per request: prompt_tokens (its tokens up to and including its first output),
-- generated (its outputs: the tokens sampled for it), ttft_ns (from its first call's start
-- to the end of the call computing its first output), decode_ns (from there to the end of
-- the call computing its last output), op_ns (its apportioned operator time).
-- begun_before: the request may have begun before the first call the trace holds — the
-- trace missed calls at its start (an attach: meta attached; or --max-db-mb dropped the
-- oldest) and the request is the first of its sequence there, not at position 0. Its start
-- is not seen: prompt_tokens and ttft_ns are NULL, not a 1-token "prompt" and an invented
-- time to first token.
CREATE TEMP VIEW requests AS
WITH f AS (SELECT request, min(CASE WHEN outputs > 0 THEN call END) AS first_out_call,
                  max(CASE WHEN outputs > 0 THEN call END) AS last_out_call FROM request_calls GROUP BY request),
     m AS (SELECT EXISTS (SELECT 1 FROM meta WHERE key = 'attached' AND value = '1') OR
                  coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'calls_dropped'), 0) > 0 AS start_missed),
     b AS (SELECT r.request, max(r.opens_seq) AND min(r.first_pos) > 0 AND (SELECT start_missed FROM m) AS begun_before
           FROM request_calls r GROUP BY r.request)
SELECT r.request, r.seq, min(r.call) AS first_call, max(r.call) AS last_call, min(r.start_ns) AS start_ns,
       min(r.first_pos) AS first_pos,
       CASE WHEN b.begun_before THEN NULL ELSE sum(CASE WHEN r.prompt THEN r.tokens ELSE 0 END) END AS prompt_tokens,
       sum(r.outputs) AS generated,
       CASE WHEN b.begun_before THEN NULL
            ELSE (SELECT end_ns FROM calls WHERE call = f.first_out_call) - min(r.start_ns) END AS ttft_ns,
       (SELECT end_ns FROM calls WHERE call = f.last_out_call) - (SELECT end_ns FROM calls WHERE call = f.first_out_call) AS decode_ns,
       sum(r.op_ns) AS op_ns, b.begun_before
FROM request_calls r JOIN f ON f.request = r.request JOIN b ON b.request = r.request
GROUP BY r.request;

-- The traced process's threads switched out while still runnable (preempted: sched_switch
-- prev_state 0; --level full records scheduler events), the paper's interference.
CREATE TEMP VIEW preemptions AS
SELECT * FROM sched_switch
WHERE prev_state = 0 AND prev_tgid = (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'pid');
