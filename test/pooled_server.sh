# Sourced by examples/test and clients/test: what both need to test clients
# for real, a throwaway PostgreSQL server with claimq in database $DB,
# reachable only through a socket in $dir, and a pgbouncer in transaction
# mode on a free port of 127.0.0.1 in front of it.
#
# CLAIMQ_EDITION chooses the edition (docs/portable.md):
#  - c (the default): claimq built and installed into the server if it is
#    not there, preloaded, and CREATE EXTENSION claimq;
#  - portable: claimq's library is neither built nor installed nor
#    preloaded, and the server has no claimq.* setting; "make portable"
#    writes claimq-portable.sql, and the database's owner, a role that is
#    not a superuser, runs it; a loop calls claimq.maintain() in place of
#    the reclaimer.  The server may have no claimq files at all.
#
# CLAIMQ_CITUS=1 (the C edition, bindir a server with Citus and claimq
# installed, as test/citus/server builds): the server is the coordinator
# of a distributed install, with two workers on ports 5433 and 5434 of
# the same socket directory, every node preloading citus and claimq; the
# database is distributed (claimq.distribute()) before it is handed over.
#
# The caller sets PGVER, DB, dir, logs, bindir, python, top, as_root and
# as_server (see either script), and defines bail NAME [LOG], which reports
# a failed step and exits.

edition=${CLAIMQ_EDITION:-c}
case $edition in
	c | portable) ;;
	*) echo "CLAIMQ_EDITION is c or portable, not $edition" >&2; exit 2 ;;
esac
owner=postgres		# who owns $DB and claimq in it; q connects as this role
citus=${CLAIMQ_CITUS:-}
if [ -n "$citus" ] && [ "$edition" != c ]; then
	echo "CLAIMQ_CITUS needs the C edition" >&2
	exit 2
fi

# Install the Debian packages of "$@" that are missing (a package whose
# command is on the PATH counts as there: node and npm may come from
# elsewhere), then build and install claimq from $top if the server has no
# claimq.so, or for the portable edition build its plain script (which
# needs make and perl only).
pooled_install() {
	local need=() p
	for p in "$@"; do
		dpkg -s "$p" >/dev/null 2>&1 || command -v "${p/#nodejs/node}" >/dev/null 2>&1 ||
			need+=("$p")
	done
	if [ ${#need[@]} -gt 0 ]; then
		echo "# installing ${need[*]}"
		{ "${as_root[@]}" apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq \
				--no-install-recommends "${need[@]}"; } >"$logs/apt.log" 2>&1 ||
			bail "install ${need[*]}" "$logs/apt.log"
	fi
	export PG_CONFIG=$bindir/pg_config
	if [ "$edition" = portable ]; then
		make -C "$top" -s portable PG_CONFIG="$PG_CONFIG" >"$logs/build.log" 2>&1 ||
			bail "make portable" "$logs/build.log"
	elif [ ! -f "$("$PG_CONFIG" --pkglibdir)/claimq.so" ]; then
		echo "# building and installing claimq"
		{ make -C "$top" -s PG_CONFIG="$PG_CONFIG" &&
			"${as_root[@]}" make -C "$top" -s install PG_CONFIG="$PG_CONFIG"; } \
			>"$logs/build.log" 2>&1 || bail "build and install claimq" "$logs/build.log"
	fi
}

# Start the server with at most $1 connections; create database $DB with
# claimq in it.  Job ids start above 2^53, beyond what a double holds
# exactly: the C edition's come from node 32; the portable edition has no
# node number (see below).
pooled_server_start() {
	[ ${#as_server[@]} -gt 0 ] && chown postgres: "$dir" "$logs"
	cd "$dir" || exit 1
	pooled_node_start data 5432 "$1" server
	if [ -n "$citus" ]; then
		pooled_citus_start
		return
	fi
	if [ "$edition" = c ]; then
		q -d postgres -c "CREATE DATABASE $DB" >/dev/null || bail "create database $DB"
		q -c "CREATE EXTENSION claimq" >/dev/null || bail "create extension claimq"
		return
	fi
	# As on a managed server: an owner that may create roles but is no
	# superuser owns $DB and installs claimq; q connects as it from here on.
	q -d postgres -c "CREATE ROLE cq_owner LOGIN CREATEROLE" \
		-c "CREATE DATABASE $DB OWNER cq_owner" >/dev/null || bail "create database $DB"
	owner=cq_owner
	q -f "$top/claimq-portable.sql" >"$logs/install.log" 2>&1 ||
		bail "install claimq-portable.sql as the database's owner" "$logs/install.log"
	# Portable job ids are the sequence's values, kept below 2^48 (no node
	# bits); a database moved from a C edition with a node number keeps ids
	# above 2^53.  The sequence is widened here so that the clients carry
	# such ids in this edition too.
	q -c "ALTER SEQUENCE claimq.job_id_seq MAXVALUE 9223372036854775807 RESTART 9007199254740993" \
		>/dev/null || bail "start the job ids above 2^53"
	# The server lifetime's token epoch, registered before any client
	# claims: the first claim of a lifetime otherwise registers it and
	# returns no jobs (docs/portable.md), and a set-up that claims once
	# would depend on the loop below having run first.
	q -c "SELECT count(*) FROM claimq.maintain()" >/dev/null ||
		bail "register the lifetime's epoch (claimq.maintain())"
	pooled_maintain_start
}

# One server: data directory $dir/$1, port $2 of the socket directory $dir,
# at most $3 connections, its log $logs/$4.log.
pooled_node_start() {
	"${as_server[@]}" "$bindir/initdb" -D "$dir/$1" -U postgres -A trust -E UTF8 --no-sync \
		>"$logs/initdb.log" 2>&1 || bail "initdb" "$logs/initdb.log"
	cat >>"$dir/$1/postgresql.conf" <<-EOF
	listen_addresses = ''
	unix_socket_directories = '$dir'
	port = $2
	max_connections = $3
	fsync = off
	synchronous_commit = off
	EOF
	if [ -n "$citus" ]; then
		# Job ids carry the Citus group instead of a node number.
		cat >>"$dir/$1/postgresql.conf" <<-EOF
		shared_preload_libraries = 'citus,claimq'
		claimq.databases = '$DB'
		claimq.reclaim_interval = '200ms'
		max_prepared_transactions = $3
		citus.recover_2pc_interval = '1s'
		EOF
	elif [ "$edition" = c ]; then
		cat >>"$dir/$1/postgresql.conf" <<-EOF
		shared_preload_libraries = 'claimq'
		claimq.databases = '$DB'
		claimq.node_id = 32
		claimq.reclaim_interval = '200ms'
		EOF
	fi
	"${as_server[@]}" "$bindir/pg_ctl" -D "$dir/$1" -l "$logs/$4.log" -w start \
		>/dev/null 2>&1 || bail "start the server" "$logs/$4.log"
}

# The coordinator started, two workers beside it, Citus and claimq
# distributed over them in $DB.
pooled_citus_start() {
	local w
	for w in 1 2; do
		pooled_node_start "worker$w" $((5432 + w)) 100 "worker$w"
		"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p $((5432 + w)) -U postgres -d postgres \
			-c "CREATE DATABASE $DB" -c "\\c $DB" -c "CREATE EXTENSION citus" >"$logs/citus.log" 2>&1 ||
			bail "Citus on worker $w" "$logs/citus.log"
	done
	q -d postgres -c "CREATE DATABASE $DB" >/dev/null || bail "create database $DB"
	q -c "CREATE EXTENSION citus" -c "SELECT citus_set_coordinator_host('$dir', 5432)" \
		-c "SELECT citus_add_node('$dir', 5433)" -c "SELECT citus_add_node('$dir', 5434)" \
		-c "CREATE EXTENSION claimq" -c "SELECT claimq.distribute()" >"$logs/citus.log" 2>&1 ||
		bail "claimq distributed over two workers" "$logs/citus.log"
}

# The portable edition has no reclaimer: this loop stands in for the
# pg_cron job of docs/operations.md ("The reclaimer's pass from pg_cron"),
# calling claimq.maintain() as the owner every 200 ms (the C edition's
# claimq.reclaim_interval above), each call its own transaction, over the
# socket, and connects again after the server restarts, as pg_cron's jobs
# go on.  It runs until $dir/maintain.on goes or this shell ends; its
# errors go to $logs/maintain.log.
pooled_maintain_start() {
	local shell=$$
	: >"$dir/maintain.on"
	running() { [ -e "$dir/maintain.on" ] && kill -0 "$shell" 2>/dev/null; }
	(
		while running; do
			while running; do
				echo "SELECT * FROM claimq.maintain();"
				sleep 0.2
			done | "$bindir/psql" -X -q -A -t -h "$dir" -p 5432 -U "$owner" -d "$DB" \
				>/dev/null 2>>"$logs/maintain.log"
		done
	) &
	maintain_pid=$!
}

# psql over the server's socket, never the pooler: as the superuser, or as
# the database's owner once the portable edition is installed.
q() {
	"$bindir/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$dir" -p 5432 -U "$owner" -d "$DB" "$@"
}

# Start pgbouncer with $1 server connections per user and database, for the
# login roles "${@:2}"; clients then reach $DB through it only (PGHOST,
# PGPORT, PGDATABASE), and it answers as the first role before this returns.
pooled_bouncer_start() {
	local pool=$1 role
	shift
	bport=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	: >"$dir/userlist.txt"
	for role in "$@"; do
		echo "\"$role\" \"\"" >>"$dir/userlist.txt"
	done
	cat >"$dir/pgbouncer.ini" <<-EOF
	[databases]
	$DB = host=$dir port=5432 dbname=$DB

	[pgbouncer]
	listen_addr = 127.0.0.1
	listen_port = $bport
	unix_socket_dir =
	auth_type = trust
	auth_file = $dir/userlist.txt
	pool_mode = transaction
	default_pool_size = $pool
	min_pool_size = 0
	reserve_pool_size = 0
	max_client_conn = 200
	server_login_retry = 1
	logfile = $logs/pgbouncer.log
	pidfile = $dir/pgbouncer.pid
	EOF
	[ ${#as_server[@]} -gt 0 ] && chown postgres: "$dir/pgbouncer.ini" "$dir/userlist.txt"
	"${as_server[@]}" pgbouncer -d "$dir/pgbouncer.ini" >"$logs/pgbouncer.start" 2>&1 ||
		bail "start pgbouncer" "$logs/pgbouncer.start"
	export PGHOST=127.0.0.1 PGPORT=$bport PGDATABASE=$DB
	unset DATABASE_URL PGSERVICE PGOPTIONS PGUSER
	for _ in $(seq 50); do
		PGUSER=$1 "$bindir/psql" -X -A -t -c 'SELECT 1' >/dev/null 2>&1 && break
		sleep 0.1
	done
}

# Stop the maintain() loop, pgbouncer and the server, whatever state they
# are in.
pooled_stop() {
	local i
	if [ -n "${maintain_pid:-}" ]; then
		# It ends after its current call and its next look; 10 s at most.
		rm -f "$dir/maintain.on"
		for ((i = 0; i < 100; i++)); do
			kill -0 "$maintain_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -TERM "$maintain_pid" 2>/dev/null
		wait "$maintain_pid" 2>/dev/null
		maintain_pid=
	fi
	if [ -f "$dir/pgbouncer.pid" ]; then
		kill -TERM "$(cat "$dir/pgbouncer.pid")" 2>/dev/null
	fi
	for i in data worker1 worker2; do
		[ -f "$dir/$i/postmaster.pid" ] || continue
		(cd "$dir" && { "${as_server[@]}" "$bindir/pg_ctl" -D "$dir/$i" -m fast -w stop ||
			"${as_server[@]}" "$bindir/pg_ctl" -D "$dir/$i" -m immediate stop; } \
			>/dev/null 2>&1)
	done
}
