-- profinfer farm index (FARM/farm.db, `profinfer experiment merge`): every board's experiment
-- indexes (index.sql) in one database, each row with its board and study.
CREATE TABLE experiment (
  board TEXT NOT NULL,
  study TEXT NOT NULL,
  key   TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (board, study, key)
);
CREATE TABLE runs (
  board TEXT NOT NULL, study TEXT NOT NULL,
  id TEXT NOT NULL, round INTEGER NOT NULL, key TEXT NOT NULL, params TEXT NOT NULL, status TEXT NOT NULL,
  db TEXT, command TEXT, reason TEXT, started_at REAL, ended_at REAL, seconds REAL, bench TEXT, cpu_s REAL,
  PRIMARY KEY (board, study, id, round)
);
