-- The PostgreSQL peer of `make bench` (Benchmarks/peers/peers.sh): one row per
-- device, the token unique (Roost: one device per token), an index on the
-- person (Roost: the person's device list).
CREATE TABLE devices (
  token        text PRIMARY KEY,
  person       text NOT NULL,
  platform     text NOT NULL,
  environment  text NOT NULL,
  app_version  text,
  locale       text,
  timezone     text,
  created_at   timestamptz NOT NULL,
  last_seen_at timestamptz NOT NULL
);
CREATE INDEX devices_person ON devices (person);
