// Package servicescript locates scripts/services, the project's script
// that runs the real servers, for the tests that stop, kill and restart
// them (a test helper).
package servicescript

import (
	"errors"
	"path/filepath"
	"runtime"
)

// Path returns the absolute path of scripts/services in the module this
// package was built from, whatever the working directory.
func Path() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("servicescript: no caller information to locate the module")
	}
	// file is <module>/internal/servicescript/servicescript.go.
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "services"), nil
}
