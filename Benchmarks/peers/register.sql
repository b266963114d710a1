-- pgbench script: one registration, the peer of `POST /v1/devices` (Benchmarks/peers/peers.sh).
-- :tokens and :people come from `pgbench -D`; device i is user_(i mod people)'s, as in roost-bench load.
\set i random(0, :tokens - 1)
INSERT INTO devices (token, person, platform, environment, app_version, locale, timezone, created_at, last_seen_at)
VALUES (lpad(to_hex(:i::bigint), 64, '0'), 'user_' || (:i::bigint % :people), 'ios', 'production', '2.4.0',
        'en-US', 'Europe/Berlin', now(), now())
ON CONFLICT (token) DO UPDATE SET person = EXCLUDED.person, app_version = EXCLUDED.app_version,
  locale = EXCLUDED.locale, timezone = EXCLUDED.timezone, last_seen_at = EXCLUDED.last_seen_at;
