"""The platform every other package leans on: who acts (actors, auth), the clock, errors, the
status registry and the timeline's events, records and the settings table, redaction, the one
HTML sanitizer and its linear-time markdown, input shape limits, outbound URL rules, Redis,
token hashing, trusted proxies, the read paths that skip the ORM for polls, and the table of
pod accounts (which backend serves each and what its pods are).

May import: nothing else in services (the models and the standard library only)."""
