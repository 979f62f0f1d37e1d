-- One row per node a kernel computed (graph_seq, tensor): its threads' parts taken
-- together — the first start, the last arrival at the barrier that ends it (compute end),
-- the threads it was split over (nth, parts) — and the first start of the graph's next
-- node (next_start; NULL for the graph's last). node_times (derived.sql) is read from it.
-- The SELECT below is the one definition: a recording's end stores it as the table
-- node_spans (store.cpp, beside indexes.sql: one sort then, instead of one per reading
-- statement); a reader of a trace without that table (still recording, its recorder killed
-- with its guardian, or written before it) gets it as a TEMP view of the same SELECT.
SELECT graph_seq, tensor, first_start, last_compute_end, nth, parts,
       lead(first_start) OVER (PARTITION BY graph_seq ORDER BY first_start, tensor) AS next_start
FROM (SELECT graph_seq, tensor, min(start_ns) AS first_start, max(compute_end_ns) AS last_compute_end,
             max(nth) AS nth, count(*) AS parts
      FROM ops GROUP BY graph_seq, tensor)
