package shipping_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/delivery"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/shipping"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/sqlite"
)

const crashOrders = 200

// TestCrashLoop: orders deliver their ship requests to a flaky warehouse
// (30% of attempts fail, 15% are taken but answered with an error as a
// late answer is, 10% are delivered twice), in a process killed with
// SIGKILL at a random moment and started again, several times, then run
// to the end. Every request reaches the warehouse at least once, its
// de-duplication holds each exactly once, and no request is delivered in a
// run after the one that stored its confirmation.
func TestCrashLoop(t *testing.T) {
	if dir := os.Getenv("SHIPPING_CHILD_DIR"); dir != "" {
		crashChild(t, dir)
		return
	}
	dir := t.TempDir()
	kills := 6
	if testing.Short() {
		kills = 3
	}
	for run := 1; run <= kills+1; run++ {
		final := run == kills+1
		// The child ends with the test (CommandContext), and on its own
		// after its timeout should the test die first.
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrashLoop$", "-test.v", "-test.timeout=3m")
		cmd.Env = append(os.Environ(), "SHIPPING_CHILD_DIR="+dir, "SHIPPING_RUN="+strconv.Itoa(run), "SHIPPING_FINAL="+strconv.FormatBool(final))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 16)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		if final {
			var out []string
			for l := range lines {
				out = append(out, l)
			}
			if err := cmd.Wait(); err != nil || !strings.Contains(strings.Join(out, "\n"), "drained") {
				t.Fatalf("final run: %v\n%s\n%s", err, strings.Join(out, "\n"), stderr.String())
			}
			continue
		}
		// The kill comes at a random moment after the child started
		// placing orders: while placing, delivering or confirming.
		for l := range lines {
			if l == "started" {
				break
			}
		}
		time.Sleep(time.Duration(50+rand.IntN(400)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		for range lines {
		}
		_ = cmd.Wait()
	}

	ctx := t.Context()
	w, err := shipping.OpenWarehouse(ctx, filepath.Join(dir, "warehouse.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	held, err := w.Shipments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	receipts, err := w.Receipts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlite.Open(ctx, filepath.Join(dir, "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := serialization.NewRegistry()
	if err := shipping.Register(reg); err != nil {
		t.Fatal(err)
	}
	duplicates := 0
	for i := 1; i <= crashOrders; i++ {
		pid := fmt.Sprintf("%s|o-%d", shipping.EntityType, i)
		if held[pid] != 1 {
			t.Errorf("%s: the warehouse holds %d requests, want exactly 1", pid, held[pid])
		}
		confirmedIn := map[int64]int{} // delivery id → run of its confirmation
		for r, err := range store.Journal().Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
			if err != nil {
				t.Fatal(err)
			}
			v, err := reg.Deserialize(r.Payload, r.SerializerID, r.Manifest)
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := v.(shipping.ShipmentConfirmed); ok {
				confirmedIn[c.DeliveryID] = c.Run
			}
		}
		run, ok := confirmedIn[1]
		if !ok {
			t.Errorf("%s: request 1 never confirmed", pid)
			continue
		}
		runs := receipts[pid+"#1"]
		if len(runs) == 0 {
			t.Errorf("%s: request 1 confirmed in run %d but never received", pid, run)
		}
		duplicates += len(runs) - 1
		for _, r := range runs {
			if r > run {
				t.Errorf("%s: request 1 confirmed in run %d and delivered again in run %d (runs %v)", pid, run, r, runs)
			}
		}
	}
	t.Logf("%d orders, %d kills: every request held once; %d duplicate deliveries de-duplicated", crashOrders, kills, duplicates)
}

// crashChild is one run: it places every order (placing is idempotent:
// an order placed already answers with its state, so this also recovers
// every order and hands its outbox to the deliverer) and delivers until
// killed, or, in the final run, until every request is confirmed.
func crashChild(t *testing.T, dir string) {
	run, _ := strconv.Atoi(os.Getenv("SHIPPING_RUN"))
	final := os.Getenv("SHIPPING_FINAL") == "true"
	ctx := context.Background()
	warehouse, err := shipping.OpenWarehouse(ctx, filepath.Join(dir, "warehouse.db"))
	if err != nil {
		t.Fatal(err)
	}
	warehouse.Run = run
	flaky := delivery.DestinationFunc[shipping.ShipRequest](func(ctx context.Context, d delivery.Delivery[shipping.ShipRequest]) error {
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // the warehouse's latency
		switch r := rand.Float64(); {
		case r < 0.30:
			return errors.New("warehouse busy")
		case r < 0.45:
			if err := warehouse.Deliver(ctx, d); err != nil {
				return err
			}
			return errors.New("answer lost")
		case r < 0.55:
			if err := warehouse.Deliver(ctx, d); err != nil {
				return err
			}
		}
		return warehouse.Deliver(ctx, d)
	})
	store, err := sqlite.Open(ctx, filepath.Join(dir, "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	host, d := wire(t, store.Journal(), store.Snapshots(), flaky, delivery.Config[shipping.ShipRequest]{
		RedeliverInterval: 50 * time.Millisecond,
		AttemptTimeout:    5 * time.Second,
	}, run)
	go d.Run(ctx)
	fmt.Println("started")
	var wg sync.WaitGroup
	orders := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range orders {
				if _, err := entity.Ask(ctx, host, fmt.Sprintf("o-%d", i), func(r entity.ReplyTo[shipping.Order]) shipping.Command {
					return shipping.Place{Items: []string{fmt.Sprintf("item-%d", i)}, Reply: r}
				}); err != nil {
					t.Errorf("place o-%d: %v", i, err)
				}
			}
		})
	}
	for i := 1; i <= crashOrders; i++ {
		orders <- i
	}
	close(orders)
	wg.Wait()
	fmt.Println("placed")
	if !final {
		select {} // until killed (or -test.timeout ends it)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := d.Drained(dctx); err != nil {
		t.Fatalf("not drained: %d unconfirmed: %v", d.Unconfirmed(), err)
	}
	fmt.Println("drained")
	if err := host.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
