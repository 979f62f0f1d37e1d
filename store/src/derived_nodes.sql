-- profinfer trace store, schema 7 and later: nodes and node_srcs with the columns the
-- schema-6 tables had, over the narrow per-graph rows (graph_nodes) and the details stored
-- once per change (node_defs, node_def_srcs). Created on each reading connection before
-- derived.sql; plain join views, so a lookup by id or by (graph_seq, tensor) stays an
-- index lookup.
CREATE TEMP VIEW nodes AS
SELECT g.id, g.graph_seq, d.ts_ns, g.tensor, d.op, d.op_code, d.name, d.view_src, d.type,
       d.ne0, d.ne1, d.ne2, d.ne3, d.flags, g.def_id
FROM graph_nodes g JOIN node_defs d ON d.id = g.def_id;

CREATE TEMP VIEW node_srcs AS
SELECT g.id AS node_id, s.slot, s.tensor, s.view_src, s.type, s.op_code, s.ne0, s.ne1, s.ne2, s.ne3
FROM graph_nodes g JOIN node_def_srcs s ON s.def_id = g.def_id;

-- What node_names (derived.sql) parses a node's name from, and which row of it each node
-- is: here a node definition (node_defs: a few hundred rows in a trace of millions of
-- nodes), parsed once each; in traces before schema 7 every node row (store.cpp).
CREATE TEMP VIEW node_labels AS
SELECT id AS key, op, name, type, ne0, ne1, ne2, ne3 FROM node_defs;

CREATE TEMP VIEW node_keys AS
SELECT id, graph_seq, tensor, def_id AS key FROM graph_nodes;
