# shellcheck shell=bash
# postgres-ha: a PostgreSQL primary and a streaming hot standby, secured as
# production servers are (TLS only, SCRAM-SHA-256 passwords), for the tests
# of TLS and SCRAM, of queries and projections read from a standby, and of
# a fail-over to the promoted standby. Sourced by scripts/services, whose
# pg_ functions it uses; see its usage paragraph below.

SERVICES+=(postgres-ha)
more_usage+="  postgres-ha PostgreSQL as 'postgres' (same packages, same user), two
              servers of their own secured as production servers are: a
              primary and a streaming hot standby, TLS only (plaintext
              refused by pg_hba.conf) on certificates made with openssl at
              the first 'up' (a CA and the servers' for 127.0.0.1 and
              localhost, in <dir>/postgres-ha.certs), SCRAM-SHA-256
              passwords (the superuser postgres, its password random, made
              at the first 'up', in <dir>/postgres-ha.password, never
              printed; the superuser annals_cert, of the same password,
              must also show a client certificate for its name signed by
              the CA, whose key stays in the folder so that tests can sign
              one), synchronous replication (a commit returns once the
              standby has flushed it, so a fail-over loses nothing
              acknowledged). Primary port 5442 if free, standby the next
              free one after it (both remembered). Database 'annals_test'.
              env sets ANNALS_TEST_POSTGRES_HA (the primary's DSN, with
              sslmode=verify-full and the CA, without the password),
              ANNALS_TEST_POSTGRES_HA_STANDBY (the standby's),
              ANNALS_TEST_POSTGRES_HA_PASSWORD_FILE and
              ANNALS_TEST_POSTGRES_HA_CERTS. Ready in about 3.5 s at the
              first 'up' (two clusters, a base backup), 1.3 s after.
"

# ha_paths sets the locations of the pair (pg_paths first).
ha_paths() {
	ha_primary=$pg_dir/postgres-ha-primary
	ha_standby=$pg_dir/postgres-ha-standby
	ha_certs=$pg_dir/postgres-ha.certs
	ha_password=$pg_dir/postgres-ha.password
	ha_pgpass=$pg_dir/postgres-ha.pgpass
	ha_sock=$pg_dir/postgres-ha.sock
	ha_lock=$pg_dir/postgres-ha.lock
}

# ha_running succeeds when the server of data folder $1 runs.
ha_running() {
	[ -f "$1/postmaster.pid" ] && as_pg "$pg_bin/pg_ctl" status -D "$1" >/dev/null 2>&1
}

# ha_port prints the port of data folder $1: the running server's, else the
# one remembered.
ha_port() {
	local p=""
	if ha_running "$1"; then
		p=$(sed -n 4p "$1/postmaster.pid" 2>/dev/null || true)
	fi
	if [ -z "$p" ] && [ -f "$1.port" ]; then
		p=$(cat "$1.port")
	fi
	printf '%s' "$p"
}

# ha_pick_port prints $1 if free, else the first free port after it that
# is not $2.
ha_pick_port() {
	local p
	for ((p = $1; p < $1 + 100; p++)); do
		if [ "$p" != "${2:-}" ] && ! port_busy "$p"; then
			echo "$p"
			return
		fi
	done
	die "postgres-ha: no free port in $1-$(($1 + 99)) on 127.0.0.1"
}

# ha_psql runs psql as the server's user through the unix socket (trusted)
# on port $1; its commits do not wait for the standby, which may not be
# there yet.
ha_psql() {
	local port=$1
	shift
	as_pg env PGOPTIONS='-c synchronous_commit=local' "$pg_bin/psql" -X -h "$ha_sock" -p "$port" -U postgres "$@"
}

# ha_make_secrets makes the CA, the servers' certificate and the
# superuser's password, once.
ha_make_secrets() {
	if [ ! -f "$ha_certs/server.pem" ]; then
		command -v openssl >/dev/null 2>&1 || die "postgres-ha: openssl is needed to make the certificates"
		local tmp
		tmp=$(mktemp -d)
		openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=Annals test CA (postgres-ha)" \
			-keyout "$tmp/ca.key" -out "$tmp/ca.pem" >/dev/null 2>&1 || die "postgres-ha: openssl could not make the CA"
		openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
			-keyout "$tmp/server.key" -out "$tmp/server.csr" >/dev/null 2>&1 || die "postgres-ha: openssl could not make the server key"
		printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$tmp/san.ext"
		openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial \
			-days 3650 -extfile "$tmp/san.ext" -out "$tmp/server.pem" >/dev/null 2>&1 || die "postgres-ha: openssl could not sign the server certificate"
		as_pg mkdir -p "$ha_certs"
		local f
		for f in ca.pem ca.key server.pem server.key; do
			as_pg tee "$ha_certs/$f" >/dev/null <"$tmp/$f"
		done
		as_pg chmod 600 "$ha_certs/server.key" "$ha_certs/ca.key"
		as_pg chmod 644 "$ha_certs/ca.pem" "$ha_certs/server.pem"
		rm -rf "$tmp"
		say "postgres-ha: made a CA and the servers' certificate in $ha_certs"
	fi
	if [ ! -f "$ha_password" ]; then
		if [ -f "$ha_primary/PG_VERSION" ]; then
			die "postgres-ha: $ha_password is gone but the servers keep its password; stop them ('$prog down postgres-ha') and delete $ha_primary and $ha_standby to start afresh"
		fi
		openssl rand -hex 16 | as_pg tee "$ha_password" >/dev/null
		as_pg chmod 600 "$ha_password"
	fi
	if [ ! -f "$ha_pgpass" ]; then
		# The standby's login to the primary (the server user's, for its
		# walreceiver).
		printf '127.0.0.1:*:*:postgres:%s\n' "$(cat "$ha_password")" | as_pg tee "$ha_pgpass" >/dev/null
		as_pg chmod 600 "$ha_pgpass"
	fi
}

# ha_conf appends the settings both servers share to data folder $1's
# postgresql.conf.
ha_conf() {
	local sock=${ha_sock//\'/\'\'} certs=${ha_certs//\'/\'\'}
	as_pg tee -a "$1/postgresql.conf" >/dev/null <<EOF

# Set by scripts/services (postgres-ha): loopback only, TLS only (see
# pg_hba.conf), SCRAM passwords, streaming replication with a synchronous
# standby, durability on. The port is given on the command line.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sock'
max_connections = 200
shared_buffers = 128MB
fsync = on
synchronous_commit = on
ssl = on
ssl_cert_file = '$certs/server.pem'
ssl_key_file = '$certs/server.key'
ssl_ca_file = '$certs/ca.pem'
password_encryption = 'scram-sha-256'
wal_level = replica
max_wal_senders = 5
hot_standby = on
hot_standby_feedback = on
synchronous_standby_names = 'standby'
EOF
}

# ha_init_primary makes the primary's cluster.
ha_init_primary() {
	local locale=C
	if grep -qix 'c\.utf-\?8' < <(locale -a 2>/dev/null); then locale=C.UTF-8; fi
	say "postgres-ha: creating the primary's cluster in $ha_primary"
	as_pg "$pg_bin/initdb" -D "$ha_primary" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
		--pwfile="$ha_password" --encoding=UTF8 --locale="$locale" >>"$ha_primary.log" 2>&1 ||
		ha_fail "$ha_primary" "postgres-ha: initdb failed"
	ha_conf "$ha_primary"
	as_pg tee "$ha_primary/pg_hba.conf" >/dev/null <<EOF
# Set by scripts/services (postgres-ha): the server's own user through the
# unix socket; over TCP only TLS with a SCRAM password, plaintext refused.
local   all          all                  trust
local   replication  all                  trust
hostssl all          annals_cert 127.0.0.1/32 scram-sha-256 clientcert=verify-full
hostssl all          all   127.0.0.1/32   scram-sha-256
hostssl replication  all   127.0.0.1/32   scram-sha-256
host    all          all   127.0.0.1/32   reject
host    replication  all   127.0.0.1/32   reject
EOF
}

# ha_init_standby makes the standby from a base backup of the primary on
# port $1.
ha_init_standby() {
	local pport=$1
	say "postgres-ha: making the standby in $ha_standby from a base backup of the primary"
	as_pg "$pg_bin/pg_basebackup" -h "$ha_sock" -p "$pport" -U postgres -D "$ha_standby" -X stream --checkpoint=fast \
		>>"$ha_standby.log" 2>&1 || ha_fail "$ha_standby" "postgres-ha: pg_basebackup failed"
	as_pg tee -a "$ha_standby/postgresql.conf" >/dev/null <<EOF

# The standby's own (scripts/services, postgres-ha): it follows the primary
# over TLS (primary.conf, written at every 'up' with the primary's port);
# promoted, it waits for no standby of its own.
include_if_exists = 'primary.conf'
synchronous_standby_names = ''
EOF
	as_pg touch "$ha_standby/standby.signal"
}

# ha_follow points the standby at the primary on port $1 (read when the
# standby starts).
ha_follow() {
	local conninfo="host=127.0.0.1 port=$1 user=postgres passfile=$ha_pgpass sslmode=verify-full sslrootcert=$ha_certs/ca.pem application_name=standby"
	printf "primary_conninfo = '%s'\n" "${conninfo//\'/\'\'}" | as_pg tee "$ha_standby/primary.conf" >/dev/null
}

ha_fail() {
	warn "$2"
	if [ -f "$1.log" ]; then
		warn "postgres-ha: the log is $1.log; its end:"
		tail -n 20 "$1.log" >&2 || true
	fi
	exit 1
}

# ha_start starts the server of data folder $1 on a port from $2 (not $3),
# unless it runs, and waits until it answers; it sets ha_started_port.
ha_start() {
	local data=$1 port i
	if ha_running "$data"; then
		ha_started_port=$(ha_port "$data")
		return
	fi
	port=$(ha_pick_port "$2" "${3:-}")
	say "postgres-ha: starting $(basename "$data") on 127.0.0.1:$port (log $data.log)"
	as_pg "$pg_bin/pg_ctl" start -D "$data" -l "$data.log" -W -o "-p $port" >/dev/null 9>&- ||
		ha_fail "$data" "postgres-ha: pg_ctl start failed"
	echo "$port" | as_pg tee "$data.port.tmp" >/dev/null && as_pg mv "$data.port.tmp" "$data.port"
	for ((i = 1; i <= 120; i++)); do
		if "$pg_bin/pg_isready" -q -h "$ha_sock" -p "$port" -U postgres -d postgres -t 2; then
			ha_started_port=$port
			return
		fi
		if [ $i -ge 5 ] && ! ha_running "$data"; then
			ha_fail "$data" "postgres-ha: the server stopped while starting"
		fi
		sleep 0.5
	done
	ha_fail "$data" "postgres-ha: not accepting connections on 127.0.0.1:$port after 60 s"
}

up_postgres_ha() {
	pg_paths
	ha_paths
	if ! pg_find_bin; then
		pg_install
		pg_find_bin || die "postgres-ha: installed, but no initdb and pg_ctl under /usr/lib/postgresql/*/bin"
	fi
	pg_check_user
	pg_make_dir
	if command -v flock >/dev/null 2>&1; then
		exec 9>>"$ha_lock"
		flock -w 120 9 || die "postgres-ha: another '$prog up' holds $ha_lock"
	fi
	# The socket's connections are trusted: only the server's user may reach it.
	if [ ! -d "$ha_sock" ]; then as_pg mkdir -p "$ha_sock"; fi
	as_pg chmod 700 "$ha_sock"
	# The logs belong to the server's user, who writes them.
	as_pg touch "$ha_primary.log" "$ha_standby.log"
	ha_make_secrets

	if [ ! -f "$ha_primary/PG_VERSION" ]; then
		ha_init_primary
	fi
	local want=5442
	if [ -f "$ha_primary.port" ]; then want=$(cat "$ha_primary.port"); fi
	ha_start "$ha_primary" "$want"
	local pport=$ha_started_port
	local have
	have=$(ha_psql "$pport" -d postgres -Atqc "select 1 from pg_database where datname = '$pg_db'") ||
		ha_fail "$ha_primary" "postgres-ha: cannot query the primary"
	if [ "$have" != 1 ]; then
		ha_psql "$pport" -d postgres -qc "create database $pg_db" >/dev/null ||
			ha_fail "$ha_primary" "postgres-ha: could not create the database $pg_db"
	fi
	# annals_cert: a role that must also show a client certificate (its
	# common name the role's) signed by the CA.
	have=$(ha_psql "$pport" -d postgres -Atqc "select 1 from pg_roles where rolname = 'annals_cert'") ||
		ha_fail "$ha_primary" "postgres-ha: cannot query the primary"
	if [ "$have" != 1 ]; then
		printf "create role annals_cert login superuser password '%s'\n" "$(cat "$ha_password")" |
			ha_psql "$pport" -d postgres -q >/dev/null ||
			die "postgres-ha: could not create the role annals_cert (the server's log, $ha_primary.log, holds the statement and its password)"
	fi

	if [ ! -f "$ha_standby/PG_VERSION" ]; then
		ha_init_standby "$pport"
	fi
	if ! ha_running "$ha_standby"; then
		ha_follow "$pport"
	fi
	want=$((pport + 1))
	if [ -f "$ha_standby.port" ]; then want=$(cat "$ha_standby.port"); fi
	ha_start "$ha_standby" "$want" "$pport"
	local sport=$ha_started_port

	# Ready when the primary streams to its synchronous standby (until
	# then a commit on the primary waits).
	local i state=""
	for ((i = 1; i <= 120; i++)); do
		state=$(ha_psql "$pport" -d postgres -Atqc "select sync_state from pg_stat_replication where application_name = 'standby' and state = 'streaming'" 2>/dev/null || true)
		if [ "$state" = sync ]; then break; fi
		sleep 0.5
	done
	if [ "$state" != sync ]; then
		ha_fail "$ha_standby" "postgres-ha: the standby is not streaming from the primary after 60 s (state '${state:-none}')"
	fi
	say "postgres-ha: primary on 127.0.0.1:$pport, standby on 127.0.0.1:$sport (synchronous, streaming; PostgreSQL $(cat "$ha_primary/PG_VERSION"))"
	say "postgres-ha: DSN $(ha_dsn "$pport") (password in $ha_password)"
}

# ha_dsn prints the DSN of port $1: TLS with the servers' checked against
# the CA, no password.
ha_dsn() {
	printf 'postgres://postgres@127.0.0.1:%s/%s?sslmode=verify-full&sslrootcert=%s' "$1" "$pg_db" "$ha_certs/ca.pem"
}

down_postgres_ha() {
	pg_paths
	ha_paths
	pg_find_bin || true
	local data stopped=no
	# The standby first, so that it does not retry its primary in a loop.
	for data in "$ha_standby" "$ha_primary"; do
		if [ -f "$data/PG_VERSION" ] && ha_running "$data"; then
			as_pg "$pg_bin/pg_ctl" stop -D "$data" -m fast -w >/dev/null ||
				ha_fail "$data" "postgres-ha: pg_ctl stop failed"
			stopped=yes
		fi
	done
	if [ $stopped = yes ]; then
		say "postgres-ha: stopped (data kept in $ha_primary and $ha_standby)"
	else
		say "postgres-ha: not running"
	fi
}

status_postgres_ha() {
	pg_paths
	ha_paths
	pg_find_bin || true
	if [ ! -f "$ha_primary/PG_VERSION" ]; then
		say "postgres-ha: not set up (no cluster in $ha_primary; run '$prog up postgres-ha')"
		return 3
	fi
	local rc=0 data role port
	for data in "$ha_primary" "$ha_standby"; do
		role=primary
		if [ "$data" = "$ha_standby" ]; then role=standby; fi
		port=$(ha_port "$data")
		if [ -f "$data/PG_VERSION" ] && ha_running "$data"; then
			say "postgres-ha $role: running (pid $(sed -n 1p "$data/postmaster.pid")), port ${port:-unknown}, data $data, log $data.log"
		else
			say "postgres-ha $role: stopped, port ${port:-unknown}, data $data, log $data.log"
			rc=3
		fi
	done
	return $rc
}

env_postgres_ha() {
	pg_paths
	ha_paths
	pg_find_bin || true
	local pport sport
	pport=$(ha_port "$ha_primary")
	sport=$(ha_port "$ha_standby")
	if [ -z "$pport" ] || [ -z "$sport" ]; then
		die "postgres-ha: not set up; run '$prog up postgres-ha' first"
	fi
	if ! ha_running "$ha_primary" || ! ha_running "$ha_standby"; then
		warn "postgres-ha: not running (the DSNs have the ports used last); run '$prog up postgres-ha'"
	fi
	printf 'export ANNALS_TEST_POSTGRES_HA=%q\n' "$(ha_dsn "$pport")"
	printf 'export ANNALS_TEST_POSTGRES_HA_STANDBY=%q\n' "$(ha_dsn "$sport")"
	printf 'export ANNALS_TEST_POSTGRES_HA_PASSWORD_FILE=%q\n' "$ha_password"
	printf 'export ANNALS_TEST_POSTGRES_HA_CERTS=%q\n' "$ha_certs"
}
