package sqlite_test

import (
	"testing"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/storetest"
)

func TestDurableStateCompliance(t *testing.T) {
	shared := openTemp(t)
	storetest.RunDurableState(t, storetest.DurableHarness{
		New: func(*testing.T) durable.Store { return shared.DurableState() },
		Own: func(t *testing.T) durable.Store { return openTemp(t).DurableState() },
	})
}
