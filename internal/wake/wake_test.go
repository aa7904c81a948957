package wake_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/annals-go/annals/internal/wake"
)

func TestLaterFoldsRequestsIntoOneCall(t *testing.T) {
	tests := []struct {
		name      string
		asks      []time.Duration // when each After is called, from the start
		wantCalls int
	}{
		{"one request", []time.Duration{0}, 1},
		{"requests while one is due fold into it", []time.Duration{0, time.Millisecond, 5 * time.Millisecond}, 1},
		{"a request after the call schedules another", []time.Duration{0, 20 * time.Millisecond}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var l wake.Later
				var calls atomic.Int32
				start := time.Now()
				for _, at := range tt.asks {
					time.Sleep(at - time.Since(start))
					l.After(10*time.Millisecond, func() { calls.Add(1) })
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if got := int(calls.Load()); got != tt.wantCalls {
					t.Errorf("%d calls, want %d", got, tt.wantCalls)
				}
			})
		})
	}
}
