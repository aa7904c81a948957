# shellcheck shell=bash
# The service cassandra-ring of scripts/services (which sources this file):
# a Cassandra ring of three nodes, for tests of several contact points,
# replication 3 and nodes that fail. Built on the jv_ and cs_ helpers.

SERVICES+=(cassandra-ring)
more_usage+="  cassandra-ring
              a ring of three Cassandra 5.0 nodes of their own (cluster
              annals-ring), one on each of the loopback addresses
              127.0.0.2, 127.0.0.3 and 127.0.0.4 with the usual ports (CQL
              9042, storage 7000): every node a seed, one token each,
              evenly spaced, no bootstrap, otherwise configured as
              cassandra (scripts/services.d/cassandra-ring/cassandra.yaml).
              Heap 512 MiB each. 'up' starts every node that is not
              running, all at once, and returns when each serves CQL and
              sees the others up: on 2 cores about 20 s for the first
              start (empty data) and to start all three again (up to a
              minute on a busy machine), about 7 s to start one killed
              node again. 'down' stops them all (about 15 s). About 1 GiB
              of memory a node. env sets
              ANNALS_TEST_CASSANDRA_RING (the contact points, e.g.
              127.0.0.2:9042,127.0.0.3:9042,127.0.0.4:9042) and
              ANNALS_TEST_CASSANDRA_RING_PIDS (the nodes' pid files, in
              the same order). Files as cassandra's, named
              cassandra-ring-1 to cassandra-ring-3 (the jars are
              cassandra's)
"

cr_nodes=3
cr_port=9042
cr_sport=7000
# Murmur3's range split evenly: -2^63 + k * 2^64/3.
cr_tokens=(-9223372036854775808 -3074457345618258603 3074457345618258602)

# cr_addr prints node $1's address (nodes 1 to cr_nodes).
cr_addr() { printf '127.0.0.%s' $(($1 + 1)); }

# cr_paths sets the locations of node $1 (cs_paths: jv_name, jv_data, ...)
# and cr_src, the folder of the ring's template.
cr_paths() {
	cs_paths "cassandra-ring-$1"
	cr_src=$here/services.d/cassandra-ring
}

# cr_busy succeeds when something accepts connections on $1:$2.
cr_busy() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# cr_contact_points prints the nodes' host:port, comma-separated.
cr_contact_points() {
	local n out=""
	for ((n = 1; n <= cr_nodes; n++)); do
		out+="${out:+,}$(cr_addr "$n"):$cr_port"
	done
	printf '%s' "$out"
}

# cr_log_since prints node $1's log from byte offset $2 on.
cr_log_since() {
	cr_paths "$1"
	tail -c +$(($2 + 1)) "$jv_log" 2>/dev/null || true
}

# cr_start writes node $1's configuration and starts it; cr_from[$1] gets
# its log's size before the start.
cr_start() {
	local n=$1 addr seeds="" m
	cr_paths "$n"
	addr=$(cr_addr "$n")
	if cr_busy "$addr" "$cr_port" || cr_busy "$addr" "$cr_sport"; then
		die "$jv_name: $addr:$cr_port or $addr:$cr_sport is in use by another process"
	fi
	for ((m = 1; m <= cr_nodes; m++)); do
		seeds+="${seeds:+,}$(cr_addr "$m"):$cr_sport"
	done
	mkdir -p "$jv_conf" "$jv_data"/{data,commitlog,saved_caches,hints,cdc_raw}
	jv_src=$cr_src jv_template cassandra.yaml "$jv_conf/cassandra.yaml" \
		ADDRESS="$addr" PORT="$cr_port" STORAGE_PORT="$cr_sport" DATA="$jv_data" \
		TOKEN="${cr_tokens[n - 1]}" SEEDS="$seeds"
	jv_template logback.xml "$jv_conf/logback.xml"
	jv_remember "$jv_portfile" "$cr_port"
	jv_remember "$cs_sportfile" "$cr_sport"

	local jvm=() o extra=()
	cs_paxos_rebuild
	while IFS= read -r o; do
		case $o in -Xms* | -Xmx*) ;; *) jvm+=("$o") ;; esac
	done < <(cs_jvm_options)
	jvm+=(${extra[@]+"${extra[@]}"} -Xms512m -Xmx512m -javaagent:"$cr_jamm"
		-Dcassandra.config="file://$jv_conf/cassandra.yaml"
		-Dlogback.configurationFile="$jv_conf/logback.xml"
		-Dcassandra.storagedir="$jv_data"
		-Dcassandra-foreground=yes
		-cp "$jv_conf:$jv_jars/*")
	say "$jv_name: starting on $addr:$cr_port, storage port $cr_sport (log $jv_log)"
	jv_start "${jvm[@]}" "$jv_main"
	cr_from[n]=$jv_log_from
}

# cr_ready succeeds when node $1 serves CQL and sees, in its log since
# cr_from[$1], every other node up that it must: all of them when it
# started now, else those that started now. It fails the script when the
# node stopped.
cr_ready() {
	local n=$1 m pid log
	cr_paths "$n"
	pid=$(cat "$jv_pidfile" 2>/dev/null || true)
	if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
		jv_fail "$jv_name: the server stopped while starting"
	fi
	cr_busy "$(cr_addr "$n")" "$cr_port" || return 1
	log=$(cr_log_since "$n" "${cr_from[n]}")
	if [ "${cr_started[n]}" = yes ] && ! grep -q 'Starting listening for CQL clients' <<<"$log"; then
		return 1
	fi
	for ((m = 1; m <= cr_nodes; m++)); do
		if [ "$m" = "$n" ] || { [ "${cr_started[n]}" = no ] && [ "${cr_started[m]}" = no ]; }; then
			continue
		fi
		# "InetAddress /127.0.0.3:7000 is now UP", or "Node
		# /127.0.0.3:7000 has restarted, now UP" when the restart came
		# before the node was marked down.
		grep -qF -- "/$(cr_addr "$m"):$cr_sport" < <(grep -- 'now UP' <<<"$log") || return 1
	done
}

up_cassandra_ring() {
	jv_paths cassandra-ring
	mkdir -p "$jv_dir"
	jv_lock
	cr_paths 1
	jv_install
	local major f n pid
	major=$(jv_java_major)
	if [ "$major" != 11 ] && [ "$major" != 17 ]; then
		die "cassandra-ring: Cassandra 5.0 runs on Java 11 or 17; the java on PATH is ${major:-unknown} (put a Java 17 first on PATH)"
	fi
	cr_jamm=""
	for f in "$jv_jars"/jamm-*.jar; do
		if [ -f "$f" ]; then cr_jamm=$f; fi
	done
	[ -n "$cr_jamm" ] || die "cassandra-ring: no jamm jar in $jv_jars; delete the folder to install again"

	cr_from=() cr_started=()
	local any=no start=$SECONDS
	for ((n = 1; n <= cr_nodes; n++)); do
		cr_paths "$n"
		if pid=$(jv_pid); then
			cr_started[n]=no
			cr_from[n]=$(wc -c <"$jv_log" 2>/dev/null || echo 0)
		else
			cr_started[n]=yes
			any=yes
		fi
	done
	for ((n = 1; n <= cr_nodes; n++)); do
		if [ "${cr_started[n]}" = yes ]; then cr_start "$n"; fi
	done
	if [ $any = yes ]; then
		say "cassandra-ring: waiting until every node serves CQL and sees the others up (usually 20 s for three nodes)"
	fi
	local limit=240 waiting
	while :; do
		waiting=""
		for ((n = 1; n <= cr_nodes; n++)); do
			cr_ready "$n" || waiting+=" cassandra-ring-$n"
		done
		if [ -z "$waiting" ]; then break; fi
		if [ $((SECONDS - start)) -ge $limit ]; then
			cr_paths "${waiting##* cassandra-ring-}"
			jv_fail "cassandra-ring: not ready after $limit s:$waiting (not serving CQL, or not seeing the other nodes up); '$prog down cassandra-ring' stops the nodes"
		fi
		sleep 0.5
	done
	cr_paths 1
	if [ $any = yes ]; then
		say "cassandra-ring: ready in $((SECONDS - start)) s"
	else
		say "cassandra-ring: already running"
	fi
	say "cassandra-ring: $cr_nodes nodes (Cassandra $(jv_version cassandra-all)), contact points $(cr_contact_points)"
}

down_cassandra_ring() {
	local n
	for ((n = 1; n <= cr_nodes; n++)); do
		(
			cr_paths "$n"
			jv_down 60
		) &
	done
	wait
}

status_cassandra_ring() {
	local n rc=0
	for ((n = 1; n <= cr_nodes; n++)); do
		cr_paths "$n"
		if [ ! -d "$jv_data/data" ]; then
			say "$jv_name: not set up (no data in $jv_data; run '$prog up cassandra-ring')"
			rc=3
			continue
		fi
		jv_status "Cassandra $(jv_version cassandra-all)" "$cr_port (storage $cr_sport)" \
			"$(cr_addr "$n"):$cr_port" || rc=$?
	done
	return $rc
}

env_cassandra_ring() {
	local n pids="" down=""
	for ((n = 1; n <= cr_nodes; n++)); do
		cr_paths "$n"
		if [ ! -d "$jv_data/data" ]; then
			die "cassandra-ring: not set up; run '$prog up cassandra-ring' first"
		fi
		if ! jv_pid >/dev/null; then down+=" $jv_name"; fi
		pids+="${pids:+,}$jv_pidfile"
	done
	if [ -n "$down" ]; then
		warn "cassandra-ring: not running:$down; run '$prog up cassandra-ring'"
	fi
	printf 'export ANNALS_TEST_CASSANDRA_RING=%s\n' "$(cr_contact_points)"
	printf 'export ANNALS_TEST_CASSANDRA_RING_PIDS=%s\n' "$pids"
}
