#!/usr/bin/env bash
# A claimq producer for scripts and cron: psql, nothing else.
#
#   producer.sh QUEUE < payloads.jsonl
#
# Reads one JSON object a line from standard input and enqueues them with
# claimq.enqueue_many, 500 lines per statement; prints the id of every job,
# one a line, in input order.  The connection comes from the PG* environment
# variables (or DATABASE_URL).
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 QUEUE < payloads.jsonl" >&2
	exit 2
fi
queue=$1
chunk=${CLAIMQ_CHUNK:-500}

enqueue() {
	# The lines travel as one psql variable, quoted by psql; the server
	# splits them and casts each to jsonb (a bad line fails the statement).
	psql ${DATABASE_URL:+"$DATABASE_URL"} -X -q -A -t -v ON_ERROR_STOP=1 \
		-v queue="$queue" -v lines="$1" <<'SQL'
SELECT id
  FROM claimq.enqueue_many(:'queue',
		ARRAY(SELECT l::jsonb
				FROM regexp_split_to_table(:'lines', E'\n') WITH ORDINALITY AS s(l, n)
			   WHERE l ~ '\S' ORDER BY n)) AS t(id);
SQL
}

lines=
n=0
while IFS= read -r line || [ -n "$line" ]; do
	lines+=$line$'\n'
	n=$((n + 1))
	if [ "$n" -eq "$chunk" ]; then
		enqueue "$lines"
		lines=
		n=0
	fi
done
if [ "$n" -gt 0 ]; then
	enqueue "$lines"
fi
