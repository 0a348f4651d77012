// Command copyrows is the library at work: a holder copies rows to a
// warehouse over HTTP under a lease, and its issuer loses the lease in the
// middle of the copy.
//
// The warehouse is a real HTTP server on a loopback port. The holder posts
// one batch per request, checks sig.Err() before each batch and sends each
// request with sig.Context(ctx), so a loss cuts the request in flight. The
// first run loses the lease while batch 3 is being written; the second run
// releases the lease when the copy is done, and the issuer's late loss
// reaches nobody.
//
// Run it with `make demo` or `go run ./docs/examples/copyrows`.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "copyrows:", err)
		os.Exit(1)
	}
}

var errRefused = errors.New("the coordinator refused the claim")

// run plays both scenarios and writes what happened to out.
func run(out io.Writer) error {
	wh, err := startWarehouse()
	if err != nil {
		return err
	}
	defer wh.close()
	rows := makeRows(5, 4)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	fmt.Fprintf(out, "== run 1: the issuer loses the lease while batch 3 is in flight\n")
	coord := newCoordinator()
	sig, release := coord.acquire("orders")
	// Batch 3 is slow to write, and the coordinator refuses the holder's
	// claim as soon as the warehouse starts on it: the loss lands in the
	// middle of a request.
	wh.setSlow(3, func() {
		fmt.Fprintf(out, "issuer:    losing the lease on %q: %v\n", "orders", errRefused)
		coord.refuse("orders", errRefused)
	})
	err = copyRows(context.Background(), out, client, sig, wh.url, rows)
	release()
	var le *lost.Error
	switch {
	case errors.As(err, &le):
		fmt.Fprintf(out, "holder:    stopped: %v\n", err)
		fmt.Fprintf(out, "holder:    *lost.Error subject=%q cause=%q\n", le.Subject(), le.Unwrap())
	case err != nil:
		return fmt.Errorf("run 1: %w", err)
	default:
		return errors.New("run 1: the copy finished, but the lease was lost in the middle")
	}
	fmt.Fprintf(out, "warehouse: stored batches %v\n", wh.stored())

	fmt.Fprintf(out, "\n== run 2: the holder releases the lease; the issuer's late loss reaches nobody\n")
	wh.reset()
	sig, release = coord.acquire("orders")
	ctx, cancel := sig.Context(context.Background())
	defer cancel()
	if err := copyRows(ctx, out, client, sig, wh.url, rows); err != nil {
		return fmt.Errorf("run 2: %w", err)
	}
	release()
	fmt.Fprintf(out, "holder:    released the lease\n")
	lostNow := coord.refuse("orders", errors.New("session expired"))
	fmt.Fprintf(out, "issuer:    late loss after the release reached the holder: %v\n", lostNow)
	fmt.Fprintf(out, "holder:    sig.Err() = %v, ctx.Err() = %v\n", sig.Err(), ctx.Err())
	fmt.Fprintf(out, "warehouse: stored batches %v\n", wh.stored())
	return nil
}

// copyRows is the holder's loop: check the lease before each batch, and send
// each batch with a context that the loss of the lease cancels.
func copyRows(ctx context.Context, out io.Writer, client *http.Client, sig *signal.Signal, url string, batches [][]string) error {
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
				fmt.Fprintf(out, "holder:    batch %d aborted in flight: %v\n", n, err)
				return fmt.Errorf("batch %d: %w", n, cause)
			}
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("batch %d: warehouse answered %s", n, resp.Status)
		}
		fmt.Fprintf(out, "holder:    batch %d landed (%d rows)\n", n, len(batch))
	}
	return nil
}

func makeRows(batches, perBatch int) [][]string {
	rows := make([][]string, batches)
	for b := range rows {
		for r := range perBatch {
			rows[b] = append(rows[b], fmt.Sprintf("order-%d", b*perBatch+r+1))
		}
	}
	return rows
}

// coordinator is a small in-process issuer: one lease per key, as a lock
// service would grant them.
type coordinator struct {
	mu     sync.Mutex
	leases map[string]*controller.Controller
}

func newCoordinator() *coordinator {
	return &coordinator{leases: make(map[string]*controller.Controller)}
}

// acquire grants the lease on key and returns the holder's signal and the
// release the holder calls when done.
func (c *coordinator) acquire(key string) (*signal.Signal, func()) {
	ctl := controller.New(key)
	c.mu.Lock()
	c.leases[key] = ctl
	c.mu.Unlock()
	return ctl.Signal(), func() {
		ctl.End()
		c.mu.Lock()
		if c.leases[key] == ctl {
			delete(c.leases, key)
		}
		c.mu.Unlock()
	}
}

// refuse loses the lease on key, as when the coordinator refuses a claim or
// a session expires, and reports whether a holder was told. It keeps the
// controller it last granted: a refusal that races a release finds it ended.
func (c *coordinator) refuse(key string, cause error) bool {
	c.mu.Lock()
	ctl := c.leases[key]
	c.mu.Unlock()
	if ctl == nil {
		return false
	}
	return ctl.Lose(cause)
}

// warehouse stores batches posted to it. A batch is stored only when its
// request completes; a request cut by the client stores nothing.
type warehouse struct {
	url string
	srv *http.Server

	mu        sync.Mutex
	saved     []int
	slowBatch int    // this batch's write lasts until the client goes away
	onSlow    func() // called when the slow write starts
}

func startWarehouse() (*warehouse, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	wh := &warehouse{url: "http://" + ln.Addr().String()}
	wh.srv = &http.Server{Handler: http.HandlerFunc(wh.serve)}
	go wh.srv.Serve(ln)
	return wh, nil
}

func (wh *warehouse) serve(w http.ResponseWriter, r *http.Request) {
	batch, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/batches/"))
	if err != nil || r.Method != http.MethodPost {
		http.Error(w, "want POST /batches/N", http.StatusBadRequest)
		return
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(r.Body); err != nil {
		return
	}
	wh.mu.Lock()
	slow, onSlow := batch == wh.slowBatch, wh.onSlow
	wh.mu.Unlock()
	if slow {
		onSlow()
		<-r.Context().Done() // the client went away before the write finished
	}
	if r.Context().Err() != nil {
		return
	}
	wh.mu.Lock()
	wh.saved = append(wh.saved, batch)
	wh.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

// setSlow makes the write of batch last until its client goes away, and
// calls onSlow when that write starts.
func (wh *warehouse) setSlow(batch int, onSlow func()) {
	wh.mu.Lock()
	wh.slowBatch, wh.onSlow = batch, onSlow
	wh.mu.Unlock()
}

func (wh *warehouse) stored() []int {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	return append([]int(nil), wh.saved...)
}

// reset empties the warehouse and makes every write fast again.
func (wh *warehouse) reset() {
	wh.mu.Lock()
	wh.saved, wh.slowBatch, wh.onSlow = nil, 0, nil
	wh.mu.Unlock()
}

func (wh *warehouse) close() { wh.srv.Close() }
