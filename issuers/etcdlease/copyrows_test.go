package etcdlease_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
	"github.com/zukhruf/lease/signal"
)

// copyRows is the holder's loop of the copyrows example: check the lease
// before each batch, and send each batch with a context that the loss of the
// lease cancels. landed runs after each batch the warehouse stored.
func copyRows(ctx context.Context, client *http.Client, sig *signal.Signal, url string, batches [][]string, landed func(n int)) error {
	ctx, cancel := sig.Context(ctx)
	defer cancel()
	for i, batch := range batches {
		n := i + 1
		if err := sig.Err(); err != nil {
			return fmt.Errorf("before batch %d: %w", n, err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/batches/"+strconv.Itoa(n), strings.NewReader(strings.Join(batch, "\n")))
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return fmt.Errorf("batch %d cut in flight: %w", n, cause)
			}
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("batch %d: warehouse answered %s", n, resp.Status)
		}
		landed(n)
	}
	return nil
}

// warehouse is a local HTTP server that stores batches. The batch numbered
// slow is never stored: the warehouse holds its request until the client
// goes away.
type warehouse struct {
	*httptest.Server
	slow    int
	arrived chan int      // each batch number as its request arrives
	cut     chan struct{} // closed when the slow batch's request is cut

	mu     sync.Mutex
	stored []int
}

func startWarehouse(t *testing.T, slow int) *warehouse {
	t.Helper()
	w := &warehouse{slow: slow, arrived: make(chan int, 16), cut: make(chan struct{})}
	w.Server = httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.Close)
	return w
}

func (w *warehouse) serve(rw http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/batches/"))
	if err != nil {
		http.NotFound(rw, r)
		return
	}
	io.Copy(io.Discard, r.Body)
	w.arrived <- n
	if n == w.slow {
		select {
		case <-r.Context().Done():
			close(w.cut)
		case <-time.After(hang):
			http.Error(rw, "the client never went away", http.StatusGatewayTimeout)
		}
		return
	}
	w.mu.Lock()
	w.stored = append(w.stored, n)
	w.mu.Unlock()
	rw.WriteHeader(http.StatusCreated)
}

func (w *warehouse) storedBatches() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.stored)
}

// checkStored checks that the warehouse stored the batches numbered want,
// in that order, and no other.
func (w *warehouse) checkStored(t *testing.T, want ...int) {
	t.Helper()
	if got := w.storedBatches(); !slices.Equal(got, want) {
		t.Errorf("stored batches %v, want %v", got, want)
	}
}

// arrivals returns the batch numbers that reached the warehouse so far.
func (w *warehouse) arrivals() []int {
	var got []int
	for {
		select {
		case n := <-w.arrived:
			got = append(got, n)
		default:
			return got
		}
	}
}

func makeBatches(n, rows int) [][]string {
	batches := make([][]string, n)
	for b := range batches {
		for r := range rows {
			batches[b] = append(batches[b], fmt.Sprintf("order-%d", b*rows+r+1))
		}
	}
	return batches
}

// copyRun is one run of the copyrows holder: a lock on a session of its own,
// released when the run ends, a warehouse and an HTTP client of its own.
type copyRun struct {
	s      *concurrency.Session
	l      *etcdlease.Lease
	wh     *warehouse
	client *http.Client
}

// startCopyRun locks lockName on a new session of srv for a run whose
// warehouse never stores the batch numbered slow. The session's TTL is
// long, so that the revocation reaches the holder as the deletion of its
// key.
func startCopyRun(t *testing.T, srv *etcdtest.Server, slow int) *copyRun {
	t.Helper()
	r := &copyRun{s: newLongSession(t, srv), wh: startWarehouse(t, slow), client: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(r.client.CloseIdleConnections)
	r.l = mustLock(t, r.s, lockName)
	t.Cleanup(func() {
		// The test's context is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		r.l.Unlock(ctx)
	})
	return r
}

// copyRows runs the holder over batches; landed runs after each batch stored.
func (r *copyRun) copyRows(ctx context.Context, batches [][]string, landed func(n int)) error {
	return copyRows(ctx, r.client, r.l.Signal(), r.wh.URL, batches, landed)
}

// TestCopyRows runs the copyrows holder under an etcd lock whose session is
// revoked in the middle of the copy.
func TestCopyRows(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	batches := makeBatches(5, 4)

	// The loss comes while batch 3 is in the warehouse: the request is cut
	// and the holder stops there.
	t.Run("in flight", func(t *testing.T) {
		r := startCopyRun(t, srv, 3)
		done := make(chan error, 1)
		go func() { done <- r.copyRows(t.Context(), batches, func(int) {}) }()
		// Wait for batches 1 and 2 to land and batch 3 to reach the
		// warehouse.
		for want := 1; want <= 3; want++ {
			if n := waitFor(t, r.wh.arrived, hang, fmt.Sprintf("batch %d to arrive", want)); n != want {
				t.Fatalf("batch %d arrived, want %d", n, want)
			}
		}
		revoke(t, op, r.s)

		copyErr := waitFor(t, done, hang, "copyRows to return after the revocation")
		checkLoss(t, copyErr, lockName, etcdlease.ErrKeyDeleted, "batch 3 cut in flight")
		waitFor(t, r.wh.cut, hang, "the warehouse to see batch 3's request cut")
		r.wh.checkStored(t, 1, 2)
		if got := r.wh.arrivals(); len(got) != 0 {
			t.Errorf("batches %v reached the warehouse after the loss, want none", got)
		}
	})

	// The loss comes between batches 2 and 3: the holder checks before
	// batch 3 and sends nothing more.
	t.Run("between batches", func(t *testing.T) {
		r := startCopyRun(t, srv, 0)
		// landed runs in this goroutine, so it may fail the test.
		err := r.copyRows(t.Context(), batches, func(n int) {
			if n == 2 {
				revoke(t, op, r.s)
				waitLost(t, r.l.Signal(), hang)
			}
		})
		checkLoss(t, err, lockName, etcdlease.ErrKeyDeleted, "before batch 3")
		r.wh.checkStored(t, 1, 2)
		if got, want := r.wh.arrivals(), []int{1, 2}; !slices.Equal(got, want) {
			t.Errorf("batches %v reached the warehouse, want %v", got, want)
		}
	})
}
