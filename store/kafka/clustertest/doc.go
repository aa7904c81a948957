// Package clustertest holds the failure tests of the Kafka journal on the
// secured cluster of three brokers that `scripts/services up
// kafka-cluster` starts: the leader of a journal topic's partitions
// killed under load, and two brokers of three down. They kill brokers, so
// they hold the cluster alone (kafkatest.ClusterAlone), and they take
// minutes, so they live apart from package kafka's tests, each package
// within go test's default timeout. The package has no code of its own.
package clustertest
