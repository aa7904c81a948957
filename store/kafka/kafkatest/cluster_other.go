//go:build !unix

package kafkatest

import (
	"errors"
	"os"
)

// The cluster's tests lock a file and kill brokers the Unix way; elsewhere
// they fail to take the lock, saying so.

func lockFile(*os.File, bool) error {
	return errors.New("the Kafka cluster's tests need a Unix system (flock, SIGKILL)")
}

func alive(int) bool { return false }

func sigkill(int) error { return errors.ErrUnsupported }
