package harness

import (
	"testing"
	"time"
)

// Eventually calls check every poll until it returns nil, failing the test
// with its last error once timeout has passed. It returns how long it
// waited.
func Eventually(t *testing.T, timeout, poll time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("not within %s: %s: %v", timeout, what, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(poll):
		}
	}
}
