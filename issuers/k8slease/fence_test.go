package k8slease_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

// fence is a resource that keeps the largest token it accepted and refuses
// a write with a smaller one: what a lease's token is for.
type fence struct {
	mu       sync.Mutex
	largest  int64
	accepted []int64
	refused  []int64
}

func (f *fence) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, err := strconv.ParseInt(r.URL.Query().Get("token"), 10, 64)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if tok < f.largest {
		f.refused = append(f.refused, tok)
		http.Error(w, fmt.Sprintf("token %d is older than %d", tok, f.largest), http.StatusConflict)
		return
	}
	f.largest = tok
	f.accepted = append(f.accepted, tok)
}

// write writes to the fence at url with tok, and reports whether it was
// accepted.
func write(url string, tok int64) (bool, error) {
	resp, err := http.Post(url+"?token="+strconv.FormatInt(tok, 10), "text/plain", nil)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// pausedHolder is the role of a child process that holds a lease and
// writes to a fence when told. Args: the Lease's name, the fence's URL.
// Lines in: "check" (emits "live" or "lost: <err>"), "write" (emits
// "accepted" or "refused"), "unlock".
func pausedHolder(c *kubetest.Child) error {
	name, url := c.Args[0], c.Args[1]
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	l, err := short.Lock(context.Background(), cs, ns, name, "paused")
	if err != nil {
		return err
	}
	c.Emit("token " + strconv.FormatInt(l.Token(), 10))
	for {
		line, err := c.ReadLine()
		if err != nil {
			return nil
		}
		switch line {
		case "check":
			if err := l.Signal().Err(); err != nil {
				c.Emit("lost: " + strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				c.Emit("live")
			}
		case "write":
			ok, err := write(url, l.Token())
			switch {
			case err != nil:
				c.Emit("error: " + err.Error())
			case ok:
				c.Emit("accepted")
			default:
				c.Emit("refused")
			}
		case "unlock":
			l.Unlock(context.Background())
			return nil
		}
	}
}

// pausedTrial is one run of the paused holder: A, in a child process,
// checks its signal, is paused (SIGSTOP) before its write, B takes the
// Lease over and writes, then A goes on and writes with its token. It
// returns A's write's outcome and the signal A reports afterwards.
func pausedTrial(t *testing.T, s *kubetest.Server, f *fence, url string) (aWrite, aAfter string) {
	t.Helper()
	name := leaseName(t)
	child := kubetest.StartChild(t, s.Config(), "holder", name, url)
	next := func(want string) string {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		ev, err := child.Next(ctx)
		if err != nil {
			t.Fatalf("the holder's next event (%s): %v", want, err)
		}
		return ev.Text
	}
	if ev := next("token"); !strings.HasPrefix(ev, "token ") {
		t.Fatalf("the holder said %q, want its token", ev)
	}
	if err := child.Send("check"); err != nil {
		t.Fatal(err)
	}
	if ev := next("check"); ev != "live" {
		t.Fatalf("the holder's check said %q, want live", ev)
	}
	// The check passed; the write is on its way when the process stops.
	if err := child.Stop(); err != nil {
		t.Fatal(err)
	}
	cs := clientset(t, s.Config())
	b, err := short.Lock(t.Context(), cs, ns, name, "b")
	if err != nil {
		child.Continue()
		t.Fatal(err)
	}
	defer b.Unlock(context.Background())
	if ok, err := write(url, b.Token()); err != nil || !ok {
		t.Fatalf("B's write with token %d: accepted %v, %v", b.Token(), ok, err)
	}
	if err := child.Continue(); err != nil {
		t.Fatal(err)
	}
	child.Send("write")
	aWrite = next("write")
	child.Send("check")
	aAfter = next("check")
	child.Send("unlock")
	return aWrite, aAfter
}

// TestPausedHolderStaleWriteRefused: the signal cannot reach a holder that
// is paused between its check and its write; the token refuses the write.
func TestPausedHolderStaleWriteRefused(t *testing.T) {
	f := &fence{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	aWrite, aAfter := pausedTrial(t, shared, f, srv.URL)
	if aWrite != "refused" {
		t.Errorf("the paused holder's write: %s, want refused by the token", aWrite)
	}
	if !strings.HasPrefix(aAfter, "lost: ") || !strings.Contains(aAfter, k8slease.ErrRenewalUnconfirmed.Error()) &&
		!strings.Contains(aAfter, k8slease.ErrTakenOver.Error()) {
		t.Errorf("the paused holder's signal after it went on: %s, want lost", aAfter)
	}
}
