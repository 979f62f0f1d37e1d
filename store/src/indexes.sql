-- The indexes readers need on the big tables, built once when a recording ends (the
-- writer's store closes, or the guardian marks a run whose recorder died): one sort of
-- every row then, instead of a B-tree insert per row while the target runs (the consumer
-- shares the target's CPUs: see docs/recording.md, "What a recording costs the target").
-- A trace whose recorder was killed with its guardian has none: readers are slower on it,
-- never wrong.
CREATE INDEX IF NOT EXISTS ops_graph ON ops(graph_seq, tensor);
CREATE INDEX IF NOT EXISTS graph_nodes_graph ON graph_nodes(graph_seq, tensor);
