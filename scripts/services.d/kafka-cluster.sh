# shellcheck shell=bash
# The service kafka-cluster of scripts/services (sourced by it): three
# Kafka brokers and their KRaft controller on loopback, clients on SASL
# over TLS or on TLS with a client certificate. See its paragraph in
# more_usage below.

SERVICES+=(kafka-cluster)
more_usage+="  kafka-cluster
              Apache Kafka 4.1 as production clusters run it: three brokers
              (node ids 1 to 3) and a KRaft controller of their own (node
              id 0, the quorum's one voter, so that two brokers can be down
              while the metadata still moves), replication factor 3 for
              every topic, min.insync.replicas 2, no initial rebalance
              delay. Clients connect with SASL (SCRAM-SHA-512,
              SCRAM-SHA-256 or PLAIN; the user 'annals', its password
              random, made at the first 'up' and kept in
              <dir>/kafka-cluster.password, never printed) over TLS, on
              certificates made on this machine with openssl at the first
              'up' (a CA, and the brokers' for 127.0.0.1 and localhost, in
              <dir>/kafka-cluster.certs). A second client listener on each
              broker takes TLS with a client certificate signed by that CA
              instead (ssl.client.auth=required; the principal is the
              certificate's subject, e.g. User:CN=annals-cert; no
              authorizer), with, in the same folder, the client
              certificates made for it (NAME.pem and NAME.key): client
              (CN=annals-cert), expired-client (the same, valid on
              1 January 2020 only) and foreign-client (signed by a CA of
              its own, foreign-ca.pem, which the brokers do not trust); a
              folder made before these existed gets them at the next
              'up', and brokers started before the listener existed get
              it after 'down' and 'up'. Brokers and controller talk
              plaintext on loopback. Client ports 9192 to 9194 when free
              (else the next free ones), broker-to-broker ports after them,
              the controller's after those, the client-certificate ports
              9292 to 9294 (all remembered, and kept at a restart when
              free). Heap 128 to 512 MiB a broker, 64 to 256 MiB the
              controller. 'up' starts every node that is not
              running (a broker killed by a test comes back with 'up') and
              waits until all are ready: about 15 s at the first 'up'
              (certificates, formatting), 10 s after (2 cores; one
              killed broker alone, 10 to 20 s). env sets
              ANNALS_TEST_KAFKA_CLUSTER (the brokers' addresses,
              comma-separated), ANNALS_TEST_KAFKA_CLUSTER_MTLS (their
              client-certificate listeners' addresses),
              ANNALS_TEST_KAFKA_CLUSTER_CERTS (the folder of ca.pem and
              the client certificates),
              ANNALS_TEST_KAFKA_CLUSTER_PASSWORD_FILE and
              ANNALS_TEST_KAFKA_CLUSTER_DIR (where node N's process id is,
              in kafka-cluster.N.pid). With ANNALS_KAFKA_CLUSTER_BROKERS
              set (e.g. 2), 'up' starts only those of the brokers that
              are not running (and the controller), for tests that bring
              back one broker of two down. Files: <dir>/kafka-cluster.N/
              (node N's data, N = 1, 2, 3 or controller), .N.conf/,
              .N.log, .N.pid, .N.port (.N.internal.port: broker-to-broker;
              .N.mtls.port: client certificates),
              kafka-cluster.id (the cluster id), kafka-cluster.tests.lock
              (tests that kill brokers hold it alone); the jars are
              kafka's (<dir>/kafka.jars)
"

kc_user=annals
kc_brokers=(1 2 3)
kc_controller_id=0

# kc_paths sets the cluster's shared locations: certificates, password,
# cluster id, lock.
kc_paths() {
	jv_paths kafka-cluster
	kc_certs=$jv_dir/kafka-cluster.certs
	kc_pwfile=$jv_dir/kafka-cluster.password
	kc_idfile=$jv_dir/kafka-cluster.id
}

# kc_node sets the jv_ locations of node $1 (a broker's id, or
# 'controller'): its own data, configuration, log, pid and ports; the
# kafka service's jars; this service's templates.
kc_node() {
	jv_paths "kafka-cluster.$1"
	jv_src=$here/services.d/kafka-cluster
	jv_jars=$jv_dir/kafka.jars
	jv_main=kafka.Kafka
	kc_iportfile=$jv_dir/$jv_name.internal.port
	kc_mportfile=$jv_dir/$jv_name.mtls.port
}

# kc_has_mtls succeeds when the current broker's configuration has the
# client-certificate listener (one written by an older version of this
# script has not).
kc_has_mtls() { grep -q '^listeners=.*MTLS://' "$jv_conf/server.properties" 2>/dev/null; }

# kc_make_certs makes, once, a CA and the brokers' key and certificate for
# 127.0.0.1 and localhost (broker.pem: the key, then the certificate, as
# Kafka's PEM key store reads them), then the client certificates
# (kc_make_client_certs).
kc_make_certs() {
	if [ ! -f "$kc_certs/broker.pem" ] || [ ! -f "$kc_certs/ca.pem" ]; then
		command -v openssl >/dev/null 2>&1 || die "kafka-cluster: needs openssl to make its certificates"
		rm -rf "$kc_certs.tmp"
		mkdir -p "$kc_certs.tmp"
		(
			umask 077 # the keys (broker.pem holds one) are for this user only
			cd "$kc_certs.tmp" || exit 1
			openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
				-subj "/CN=Annals test Kafka CA" 2>/dev/null || exit 1
			openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj "/CN=localhost" 2>/dev/null || exit 1
			printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >broker.ext || exit 1
			openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.crt -days 3650 \
				-extfile broker.ext 2>/dev/null || exit 1
			cat broker.key broker.crt >broker.pem || exit 1
			rm -f broker.csr broker.ext broker.key broker.crt ca.srl
		) || { rm -rf "$kc_certs.tmp"; die "kafka-cluster: openssl failed to make the certificates"; }
		chmod 700 "$kc_certs.tmp"
		rm -rf "$kc_certs"
		mv "$kc_certs.tmp" "$kc_certs"
	fi
	kc_make_client_certs
}

# kc_make_client_certs makes, once each, in the certificates' folder, the
# client certificates of the brokers' client-certificate listener, each
# with its key (NAME.pem and NAME.key): client, for CN=annals-cert, signed
# by the cluster's CA (ca.key); expired-client, the same but valid only on
# 1 January 2020; foreign-client, for CN=annals-cert too, signed by a CA of
# its own (foreign-ca.pem, its key thrown away) that the brokers do not
# trust. A folder made before these existed gets them at the next 'up'.
kc_make_client_certs() {
	local name missing=()
	for name in client expired-client foreign-client; do
		if [ ! -f "$kc_certs/$name.pem" ] || [ ! -f "$kc_certs/$name.key" ]; then missing+=("$name"); fi
	done
	if [ ${#missing[@]} -eq 0 ]; then
		return
	fi
	command -v openssl >/dev/null 2>&1 || die "kafka-cluster: needs openssl to make its client certificates"
	[ -f "$kc_certs/ca.key" ] ||
		die "kafka-cluster: $kc_certs has no ca.key to sign the client certificates with; '$prog down kafka-cluster', move $kc_certs away, and 'up' again"
	local tmp=$kc_certs/client.tmp
	rm -rf "$tmp"
	mkdir -p "$tmp"
	(
		cd "$tmp" || exit 1
		printf 'extendedKeyUsage=clientAuth\n' >client.ext || exit 1
		for name in "${missing[@]}"; do
			openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=annals-cert" 2>/dev/null || exit 1
			case $name in
			client)
				openssl x509 -req -in client.csr -CA ../ca.pem -CAkey ../ca.key -set_serial "0x$(openssl rand -hex 8)" \
					-out client.pem -days 3650 -extfile client.ext 2>/dev/null || exit 1
				;;
			expired-client)
				# openssl x509 -req cannot date a certificate in the past
				# (OpenSSL 3.0); openssl ca can, with a database of its own.
				mkdir db && : >db/index && openssl rand -hex 8 >db/serial || exit 1
				printf '%s\n' '[ca]' 'default_ca = expired' '[expired]' 'database = db/index' \
					'new_certs_dir = db' 'serial = db/serial' 'default_md = sha256' 'policy = any' \
					'x509_extensions = ext' '[any]' 'commonName = supplied' \
					'[ext]' 'extendedKeyUsage = clientAuth' >ca.cnf || exit 1
				openssl ca -batch -config ca.cnf -cert ../ca.pem -keyfile ../ca.key -in expired-client.csr \
					-out expired-client.pem -notext -startdate 20200101000000Z -enddate 20200102000000Z 2>/dev/null || exit 1
				;;
			foreign-client)
				openssl req -x509 -newkey rsa:2048 -nodes -keyout foreign-ca.key -out foreign-ca.pem -days 3650 \
					-subj "/CN=Annals test foreign CA" 2>/dev/null || exit 1
				openssl x509 -req -in foreign-client.csr -CA foreign-ca.pem -CAkey foreign-ca.key \
					-set_serial "0x$(openssl rand -hex 8)" -out foreign-client.pem -days 3650 -extfile client.ext 2>/dev/null || exit 1
				mv foreign-ca.pem .. || exit 1
				;;
			esac
			mv "$name.key" "$name.pem" .. || exit 1
		done
	) || {
		rm -rf "$tmp"
		die "kafka-cluster: openssl failed to make the client certificates"
	}
	rm -rf "$tmp"
}

# kc_make_password makes, once, the user's random password (mode 600).
kc_make_password() {
	if [ -s "$kc_pwfile" ]; then
		return
	fi
	(
		umask 077
		head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24 >"$kc_pwfile.tmp"
		echo >>"$kc_pwfile.tmp"
	)
	mv "$kc_pwfile.tmp" "$kc_pwfile"
}

# kc_port prints the port remembered in file $1 if it is free (or its node
# $2 runs), else the first free port from $3, skipping the ports after it.
kc_port() {
	local file=$1 running=$2 want=$3 p
	p=$(jv_port "$file")
	if [ -n "$p" ] && { [ "$running" = yes ] || ! port_busy "$p"; }; then
		local q
		for q in "${@:4}"; do
			if [ "$p" = "$q" ]; then p=""; fi
		done
		if [ -n "$p" ]; then
			echo "$p"
			return
		fi
	fi
	jv_pick_port "$want" "${@:4}"
}

# kc_format formats the storage of the current node once, with the
# cluster's id and the user's SCRAM credentials.
kc_format() {
	if [ -f "$jv_data/meta.properties" ]; then
		return
	fi
	if [ -d "$jv_data" ] && [ -n "$(ls -A "$jv_data" 2>/dev/null)" ]; then
		die "$jv_name: $jv_data is not empty but holds no formatted storage (no meta.properties); move it away or delete it"
	fi
	local pw
	pw=$(head -n 1 "$kc_pwfile")
	java -Xmx256m -cp "$jv_jars/*" -Dlog4j2.configurationFile="$jv_conf/log4j2.xml" \
		kafka.tools.StorageTool format --cluster-id "$(cat "$kc_idfile")" \
		--config "$jv_conf/server.properties" \
		--add-scram "SCRAM-SHA-512=[name=$kc_user,password=$pw]" \
		--add-scram "SCRAM-SHA-256=[name=$kc_user,password=$pw]" >>"$jv_log" 2>&1 </dev/null 9>&- ||
		jv_fail "$jv_name: formatting the storage failed"
}

up_kafka_cluster() {
	local began=$SECONDS
	kc_paths
	mkdir -p "$jv_dir"
	jv_lock

	# The jars of the kafka service.
	jv_paths kafka
	jv_install
	local major
	major=$(jv_java_major)
	if [ -z "$major" ] || [ "$major" -lt 17 ]; then
		die "kafka-cluster: Kafka 4 needs Java 17 or newer; the java on PATH is ${major:-unknown}"
	fi
	kc_paths
	kc_make_certs
	kc_make_password
	if [ ! -s "$kc_idfile" ]; then
		kafka_cluster_id >"$kc_idfile"
	fi
	local pw
	pw=$(head -n 1 "$kc_pwfile")

	# Ports: each node's remembered one when it runs or is free.
	local n running taken=() cport started=() froms=()
	declare -A port iport mport
	for n in "${kc_brokers[@]}"; do
		kc_node "$n"
		running=no
		if jv_pid >/dev/null; then running=yes; fi
		port[$n]=$(kc_port "$jv_portfile" $running $((9191 + n)) ${taken[@]+"${taken[@]}"})
		taken+=("${port[$n]}")
		iport[$n]=$(kc_port "$kc_iportfile" $running $((9194 + n)) "${taken[@]}")
		taken+=("${iport[$n]}")
		mport[$n]=$(kc_port "$kc_mportfile" $running $((9291 + n)) "${taken[@]}")
		taken+=("${mport[$n]}")
	done
	kc_node controller
	running=no
	if jv_pid >/dev/null; then running=yes; fi
	cport=$(kc_port "$jv_portfile" $running 9198 "${taken[@]}")
	taken+=("$cport")

	# The controller first: the brokers register with it.
	local jvm=(-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent
		-Djava.awt.headless=true)
	kc_node controller
	if jv_pid >/dev/null; then
		say "kafka-cluster: the controller runs (127.0.0.1:$cport)"
	else
		mkdir -p "$jv_conf"
		chmod 700 "$jv_conf"
		jv_template controller.properties "$jv_conf/server.properties" \
			ID="$kc_controller_id" PORT="$cport" DATA="$jv_data"
		jv_template log4j2.xml "$jv_conf/log4j2.xml"
		jv_remember "$jv_portfile" "$cport"
		kc_format
		say "kafka-cluster: starting the controller on 127.0.0.1:$cport (log $jv_log)"
		jv_start -Xms64m -Xmx256m "${jvm[@]}" -Dlog4j2.configurationFile="$jv_conf/log4j2.xml" \
			-cp "$jv_jars/*" "$jv_main" "$jv_conf/server.properties"
		started+=(controller)
		froms+=("$jv_log_from")
	fi
	local only=" ${ANNALS_KAFKA_CLUSTER_BROKERS:-${kc_brokers[*]}} "
	for n in "${kc_brokers[@]}"; do
		kc_node "$n"
		if jv_pid >/dev/null; then
			say "kafka-cluster: broker $n runs (127.0.0.1:${port[$n]})"
			if ! kc_has_mtls; then
				warn "kafka-cluster: broker $n runs without the client-certificate listener (started before it existed): '$prog down kafka-cluster', then 'up', adds it"
			fi
			continue
		fi
		if [[ $only != *" $n "* ]]; then
			say "kafka-cluster: broker $n left stopped (ANNALS_KAFKA_CLUSTER_BROKERS)"
			continue
		fi
		mkdir -p "$jv_conf"
		chmod 700 "$jv_conf"
		(
			umask 077
			jv_template broker.properties "$jv_conf/server.properties" \
				ID="$n" PORT="${port[$n]}" INTERNAL_PORT="${iport[$n]}" MTLS_PORT="${mport[$n]}" \
				CONTROLLER_ID="$kc_controller_id" CONTROLLER_PORT="$cport" \
				DATA="$jv_data" CERTS="$kc_certs" USER="$kc_user" PASSWORD="$pw"
		)
		jv_template log4j2.xml "$jv_conf/log4j2.xml"
		jv_remember "$jv_portfile" "${port[$n]}"
		jv_remember "$kc_iportfile" "${iport[$n]}"
		jv_remember "$kc_mportfile" "${mport[$n]}"
		kc_format
		say "kafka-cluster: starting broker $n on 127.0.0.1:${port[$n]} (log $jv_log)"
		jv_start -Xms128m -Xmx512m "${jvm[@]}" -Dlog4j2.configurationFile="$jv_conf/log4j2.xml" \
			-cp "$jv_jars/*" "$jv_main" "$jv_conf/server.properties"
		started+=("$n")
		froms+=("$jv_log_from")
	done

	local i
	for i in "${!started[@]}"; do
		n=${started[$i]}
		kc_node "$n"
		jv_log_from=${froms[$i]}
		if [ "$n" = controller ]; then
			jv_wait_ready "$cport" 'Kafka Server started' 120
		else
			jv_wait_ready "${port[$n]}" 'Kafka Server started' 120
		fi
	done
	local addrs=() maddrs=()
	for n in "${kc_brokers[@]}"; do
		addrs+=("127.0.0.1:${port[$n]}")
		maddrs+=("127.0.0.1:${mport[$n]}")
	done
	if [ ${#started[@]} -eq 0 ]; then
		say "kafka-cluster: already running"
	else
		say "kafka-cluster: started ${started[*]} in $((SECONDS - began)) s"
	fi
	say "kafka-cluster: brokers $(
		IFS=,
		echo "${addrs[*]}"
	) (SASL_SSL, user $kc_user, password in $kc_pwfile, CA $kc_certs/ca.pem)"
	say "kafka-cluster: brokers $(
		IFS=,
		echo "${maddrs[*]}"
	) (SSL with a client certificate: $kc_certs/client.pem and client.key)"
}

down_kafka_cluster() {
	local n
	for n in "${kc_brokers[@]}" controller; do
		kc_node "$n"
		jv_down 30
	done
}

status_kafka_cluster() {
	kc_paths
	kc_node controller
	if [ ! -f "$jv_data/meta.properties" ]; then
		say "kafka-cluster: not set up (no storage in $jv_data; run '$prog up kafka-cluster')"
		return 3
	fi
	local n rc=0 port iport mport
	for n in controller "${kc_brokers[@]}"; do
		kc_node "$n"
		port=$(jv_port "$jv_portfile")
		if [ "$n" = controller ]; then
			jv_status "Kafka $(jv_version kafka_2.13) controller" "${port:-unknown}" "" || rc=$?
		else
			iport=$(jv_port "$kc_iportfile")
			mport=$(jv_port "$kc_mportfile")
			jv_status "Kafka $(jv_version kafka_2.13) broker" "${port:-unknown} (SASL_SSL; client certificate ${mport:-none}; broker-to-broker ${iport:-unknown})" \
				"${port:+127.0.0.1:$port}" || rc=$?
		fi
	done
	return $rc
}

env_kafka_cluster() {
	kc_paths
	local n port mport addrs=() maddrs=() down=() old=()
	for n in "${kc_brokers[@]}"; do
		kc_node "$n"
		port=$(jv_port "$jv_portfile")
		if [ -z "$port" ] || [ ! -f "$jv_data/meta.properties" ]; then
			die "kafka-cluster: not set up; run '$prog up kafka-cluster' first"
		fi
		addrs+=("127.0.0.1:$port")
		mport=$(jv_port "$kc_mportfile")
		if [ -z "$mport" ] || ! kc_has_mtls; then
			old+=("$n")
		else
			maddrs+=("127.0.0.1:$mport")
		fi
		if ! jv_pid >/dev/null; then down+=("$n"); fi
	done
	if [ ${#down[@]} -gt 0 ]; then
		warn "kafka-cluster: broker(s) ${down[*]} not running; run '$prog up kafka-cluster'"
	fi
	if [ ${#old[@]} -gt 0 ]; then
		warn "kafka-cluster: broker(s) ${old[*]} configured without the client-certificate listener (before it existed), so ANNALS_TEST_KAFKA_CLUSTER_MTLS is not set; run '$prog down kafka-cluster', then '$prog up kafka-cluster'"
	fi
	kc_paths
	printf 'export ANNALS_TEST_KAFKA_CLUSTER=%s\n' "$(
		IFS=,
		echo "${addrs[*]}"
	)"
	if [ ${#old[@]} -eq 0 ]; then
		printf 'export ANNALS_TEST_KAFKA_CLUSTER_MTLS=%s\n' "$(
			IFS=,
			echo "${maddrs[*]}"
		)"
	else
		printf 'unset ANNALS_TEST_KAFKA_CLUSTER_MTLS\n'
	fi
	printf 'export ANNALS_TEST_KAFKA_CLUSTER_CERTS=%s\n' "$kc_certs"
	printf 'export ANNALS_TEST_KAFKA_CLUSTER_PASSWORD_FILE=%s\n' "$kc_pwfile"
	printf 'export ANNALS_TEST_KAFKA_CLUSTER_DIR=%s\n' "$jv_dir"
}
