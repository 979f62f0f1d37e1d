-- profinfer experiment index (index.db of a study's results folder): the study's facts and
-- one row per (sweep point, round), kept across runs so that a second run resumes where
-- the first stopped. Written by the experiment runner through store::ExperimentIndex; read
-- by the summary, the results README, the fit and the farm merge through the same class.
-- `points` (one run per point, before interleaved rounds) is the table of older indexes:
-- its trace DBs are not committed, so those points are recorded again, in rounds.
DROP TABLE IF EXISTS points;
CREATE TABLE IF NOT EXISTS experiment (
  key   TEXT PRIMARY KEY,   -- name, title, paper, level, board, quick, rounds
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
  id         TEXT NOT NULL,     -- the point's id (its parameters, hashed)
  round      INTEGER NOT NULL,
  key        TEXT NOT NULL,     -- the point's parameters as text
  params     TEXT NOT NULL,     -- ... as JSON
  status     TEXT NOT NULL,     -- running, done, failed, skipped
  db         TEXT,              -- its trace DB, when traced
  command    TEXT,
  reason     TEXT,              -- why it failed or was skipped
  started_at REAL,              -- Unix seconds
  ended_at   REAL,
  seconds    REAL,
  bench      TEXT,              -- llama-bench's JSON output
  cpu_s      REAL,              -- CPU time of the run (user + system, the command's tree)
  PRIMARY KEY (id, round)
);
-- What a run's trace says (the trace's metrics, as the summary computed them where the trace
-- was), with the first calls_dropped calls of the trace left out (0: every call): a folder
-- whose traces are not here (a clone: traces are not committed) is summarised from these.
CREATE TABLE IF NOT EXISTS run_metrics (
  id            TEXT NOT NULL,
  round         INTEGER NOT NULL,
  calls_dropped INTEGER NOT NULL,
  metrics       TEXT NOT NULL,   -- JSON object: metric -> number or null
  PRIMARY KEY (id, round, calls_dropped)
);
