#!/usr/bin/env bash
# A claimq worker for cron: psql and a handler command, nothing else.
#
#   worker.sh QUEUE HANDLER [ARG...]
#
# Claims jobs of QUEUE in batches and runs HANDLER once per job, with the
# job's payload (JSON) on its standard input and CLAIMQ_JOB_ID and
# CLAIMQ_ATTEMPT in its environment.  Exit status 0 completes the job; 75
# (EX_TEMPFAIL: "not now") snoozes it for CLAIMQ_SNOOZE, counting no
# attempt; any other fails it, with the last line the handler wrote to
# stderr as the error.  A job cancelled before its turn is skipped (this
# worker sends no heartbeat, so a running handler learns of a cancel only
# when its complete is refused).  It exits when a claim finds nothing, so
# a cron entry such as
#
#   * * * * *  flock -n /run/claimq-mail.lock worker.sh mail /usr/local/bin/send-mail
#
# drains the queue every minute.  The connection comes from the PG*
# environment variables (or DATABASE_URL).  Every call is one psql run and
# one statement, so a transaction-mode pooler is fine.
#
# Settings from the environment:
#   CLAIMQ_WORKER   worker name (default sh-HOST-PID)
#   CLAIMQ_BATCH    jobs per claim (default 10)
#   CLAIMQ_LEASE    lease, an interval (default '5 minutes'); a handler
#                   that may run longer must be given a longer lease, as
#                   this worker sends no heartbeat
#   CLAIMQ_RESULTS  a table (job_id bigint, worker text) to record each
#                   completion in, in the same transaction as the complete
#   CLAIMQ_SNOOZE   how long a job waits after its handler exits 75, an
#                   interval (default '30 seconds')
#
# On SIGTERM or SIGINT it finishes the job at hand, releases the jobs of
# the batch that it never started, and exits 0.
set -uo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 QUEUE HANDLER [ARG...]" >&2
	exit 2
fi
queue=$1
shift
handler=("$@")
worker=${CLAIMQ_WORKER:-sh-$(hostname)-$$}
batch=${CLAIMQ_BATCH:-10}
lease=${CLAIMQ_LEASE:-5 minutes}
results=${CLAIMQ_RESULTS:-}
snooze=${CLAIMQ_SNOOZE:-30 seconds}

log() { echo "$(date -u +%FT%TZ) $worker $*"; }

# One statement through psql: unaligned, tuples only, tab-separated, stop
# at the first error.  Values go in as psql variables, quoted by psql
# (:'name'), never pasted into the SQL text.
sql() {
	local query=$1
	shift
	local vars=()
	for v in "$@"; do vars+=(-v "$v"); done
	psql ${DATABASE_URL:+"$DATABASE_URL"} -X -q -A -t -F $'\t' -v ON_ERROR_STOP=1 \
		"${vars[@]}" <<<"$query"
}

stopping=0
trap 'stopping=1; log "got a signal: finishing the job at hand, then releasing the rest"' TERM INT

ids=()
tokens=()
release_rest() {
	local i n=0 rest_ids=() rest_tokens=()
	for ((i = $1; i < ${#ids[@]}; i++)); do
		rest_ids+=("${ids[i]}")
		rest_tokens+=("${tokens[i]}")
	done
	[ ${#rest_ids[@]} -eq 0 ] && return 0
	n=$(sql "SELECT count(*) FILTER (WHERE outcome = 'ok')
			   FROM claimq.release(string_to_array(:'ids', ',')::bigint[],
								   string_to_array(:'tokens', ',')::bigint[]);" \
		ids="$(IFS=,; echo "${rest_ids[*]}")" tokens="$(IFS=,; echo "${rest_tokens[*]}")") || return 1
	log "released $n jobs it never started"
}

complete_sql="SELECT claimq.complete(:'id'::bigint, :'token'::bigint);"
if [ -n "$results" ]; then
	# The completion and its record commit together: one statement that
	# inserts the record only if complete() returned true, and says so.
	complete_sql="INSERT INTO $results (job_id, worker)
		SELECT :'id'::bigint, :'worker'
		 WHERE claimq.complete(:'id'::bigint, :'token'::bigint)
		RETURNING true;"
fi

errfile=$(mktemp) || exit 1
payfile=$(mktemp) || exit 1
trap 'rm -f "$errfile" "$payfile"' EXIT

while [ $stopping -eq 0 ]; do
	jobs=$(sql "SELECT job_id, token, attempts, payload
				  FROM claimq.claim(:'queue', :'batch'::int, lease => :'lease'::interval,
									worker => :'worker');" \
		queue="$queue" batch="$batch" lease="$lease" worker="$worker") || exit 1
	if [ -z "$jobs" ]; then
		break		# drained: cron starts us again
	fi
	ids=()
	tokens=()
	attempts=()
	payloads=()
	while IFS=$'\t' read -r id token attempt payload; do
		ids+=("$id")
		tokens+=("$token")
		attempts+=("$attempt")
		payloads+=("$payload")
	done <<<"$jobs"
	log "claimed ${#ids[@]} jobs"

	for ((i = 0; i < ${#ids[@]}; i++)); do
		if [ $stopping -ne 0 ]; then
			release_rest "$i"
			break
		fi
		id=${ids[i]}
		token=${tokens[i]}
		started=$(sql "SELECT outcome FROM claimq.start(ARRAY[:'id']::bigint[], ARRAY[:'token']::bigint[],
														 :'lease'::interval);" \
			id="$id" token="$token" lease="$lease") || exit 1
		if [ "$started" = cancelled ]; then
			log "job $id: cancelled before it started, skipped"
			continue
		elif [ "$started" != ok ]; then
			log "job $id: stale at start, someone else owns it now"
			continue
		fi
		# The payload from a file, not a pipe: a handler that exits without
		# reading it must not fail the job by the writer's SIGPIPE.
		status=0
		printf '%s' "${payloads[i]}" >"$payfile" || exit 1
		CLAIMQ_JOB_ID=$id CLAIMQ_ATTEMPT=$((attempts[i] + 1)) "${handler[@]}" \
			<"$payfile" 2>"$errfile" || status=$?
		if [ $status -eq 0 ]; then
			ok=$(sql "$complete_sql" id="$id" token="$token" worker="$worker") || exit 1
			[ "$ok" = t ] || log "job $id: stale or cancelled at complete, not completed"
		elif [ $status -eq 75 ]; then
			ok=$(sql "SELECT claimq.snooze(:'id'::bigint, :'token'::bigint, :'snooze'::interval);" \
				id="$id" token="$token" snooze="$snooze") || exit 1
			if [ "$ok" = t ]; then
				log "job $id: snoozed for $snooze"
			else
				log "job $id: stale or cancelled at snooze"
			fi
		else
			error=$(tail -n 1 "$errfile")
			ok=$(sql "SELECT claimq.fail(:'id'::bigint, :'token'::bigint, :'error');" \
				id="$id" token="$token" error="${error:-handler exited with status $status}") || exit 1
			if [ "$ok" = t ]; then
				log "job $id: failed: ${error:-status $status}"
			else
				log "job $id: stale at fail, someone else owns it now"
			fi
		fi
	done
done
log "stopped"
exit 0
